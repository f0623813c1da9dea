#include "server/daemon/snapshot_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <system_error>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

#include "src/core/status.h"

namespace sluice::server {
namespace {

std::string Reason() { return std::generic_category().message(errno); }

// What WriteSnapshotFile needs: a temporary file of its own beside `path`, renamed over it.
absl::Status CheckWritable(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    return absl::UnavailableError(fmt::format("{} is a directory", path));
  }
  std::string temp = path + ".XXXXXX";
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) {
    return absl::UnavailableError(
        fmt::format("cannot create a file beside {}: {}", path, Reason()));
  }
  ::close(fd);
  if (::unlink(temp.c_str()) != 0) {
    return absl::UnavailableError(fmt::format("cannot remove {}: {}", temp, Reason()));
  }
  return absl::OkStatus();
}

// "20261123T182838Z".
std::string UtcStamp(Timestamp now) {
  const auto seconds = static_cast<std::time_t>(
      std::chrono::floor<std::chrono::seconds>(now.time_since_epoch()).count());
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  return fmt::format("{:04}{:02}{:02}T{:02}{:02}{:02}Z", utc.tm_year + 1900, utc.tm_mon + 1,
                     utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec);
}

}  // namespace

absl::Status OpenSnapshot(MemoryStore& store, const std::string& path, bool discard_corrupt,
                          Timestamp now) {
  if (absl::Status s = CheckWritable(path); !s.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("--snapshot {}: it could not be written at shutdown, and every count would "
                    "be lost: {}",
                    path, internal::Message(s)));
  }
  const absl::StatusOr<size_t> loaded = store.LoadSnapshot(path, now);
  if (loaded.ok()) {
    spdlog::info("loaded {} key(s) from snapshot {}", *loaded, path);
    return absl::OkStatus();
  }
  if (loaded.status().code() == absl::StatusCode::kNotFound) {
    spdlog::info("no snapshot at {} yet: starting empty", path);
    return absl::OkStatus();
  }
  const std::string why(internal::Message(loaded.status()));
  // Only a file that was read and found unusable is corrupt: one that could not be read (no
  // permission, an I/O error) may be whole, and is never moved aside.
  if (!discard_corrupt || loaded.status().code() != absl::StatusCode::kDataLoss) {
    return absl::InvalidArgumentError(fmt::format(
        "--snapshot: {}. Not starting over it (it would be overwritten at shutdown): move it "
        "away, or pass --snapshot-discard-corrupt to have it moved aside and start empty",
        why));
  }
  const std::string aside = fmt::format("{}.corrupt-{}", path, UtcStamp(now));
  if (::rename(path.c_str(), aside.c_str()) != 0) {
    return absl::InvalidArgumentError(fmt::format(
        "--snapshot-discard-corrupt: {}; cannot move it aside to {}: {}", why, aside, Reason()));
  }
  spdlog::warn("{}: moved it aside to {} (--snapshot-discard-corrupt); starting empty", why, aside);
  return absl::OkStatus();
}

}  // namespace sluice::server
