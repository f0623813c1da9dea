// A snapshot file (src/memory/snapshot.h) loaded by MemoryStore::LoadSnapshot. Most inputs are
// taken as a body and framed with a right header and checksum, so that the fuzzer reaches the
// tables, keys and states behind the CRC (a crafted file passes it); an input that starts with
// the magic is loaded as the whole file, to reach the framing's own checks. Whatever loads must
// then save and load again, whole.

#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "sluice/memory_store.h"
#include "src/memory/snapshot.h"

namespace sluice {
namespace {

constexpr std::string_view kMagic = "SLUICESNAP";

std::string Framed(std::string_view body) {
  internal::SnapshotWriter w;
  w.Bytes(kMagic);
  w.U32(1);
  w.I64(static_cast<int64_t>(body.size()));
  w.Bytes(body);
  const uint32_t crc = static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                                   reinterpret_cast<const Bytef*>(w.data().data()),
                                                   static_cast<uInt>(w.data().size())));
  w.U32(crc);
  return w.data();
}

// A file in memory, rewritten for every input, named by its /proc path.
class MemoryFile {
 public:
  MemoryFile() : fd_(memfd_create("sluice-snapshot", 0)) {
    if (fd_ < 0) {
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  const std::string& Write(std::string_view bytes) {
    if (ftruncate(fd_, 0) != 0 ||
        pwrite(fd_, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
      std::abort();
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

// Where a loaded store saves itself: a file of this process's in /dev/shm (memory, so that the
// save's fsync costs nothing), or $TMPDIR.
// Removed after each use, and when the fuzzer exits.
struct SavePath {
  SavePath() {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : std::getenv("TMPDIR");
    path = std::string(dir != nullptr ? dir : "/tmp") + "/sluice-fuzz-snapshot-" +
           std::to_string(getpid());
  }
  ~SavePath() { unlink(path.c_str()); }
  std::string path;
};

}  // namespace
}  // namespace sluice

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  static MemoryFile file;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string& path =
      file.Write(input.starts_with(kMagic) ? std::string(input) : Framed(input));
  MemoryStore store;
  // A time within every period the loader accepts, so that loaded states are still live.
  const Timestamp now{Micros{1'700'000'000'000'000}};
  const absl::StatusOr<size_t> loaded = store.LoadSnapshot(path, now);
  if (!loaded.ok() || *loaded == 0) {
    return 0;
  }
  // What loaded must save and load again, whole: every state Decode and Plausible let in is
  // one that Encode writes back and the loader takes a second time. (A key written twice in
  // a crafted file is counted twice by LoadSnapshot, and kept once.)
  const size_t keys = store.KeyCount();
  if (keys > *loaded) {
    std::abort();
  }
  static const SavePath saved;
  if (!store.SaveSnapshot(saved.path).ok()) {
    std::abort();
  }
  MemoryStore again;
  const absl::StatusOr<size_t> reloaded = again.LoadSnapshot(saved.path, now);
  unlink(saved.path.c_str());  // libFuzzer may end without running destructors.
  if (!reloaded.ok() || *reloaded != keys) {
    std::abort();
  }
  return 0;
}
