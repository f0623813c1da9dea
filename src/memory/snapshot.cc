#include "src/memory/snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

#include "fmt/format.h"

#include "src/core/replace_file.h"
#include "src/memory/compact_state.h"

namespace sluice::internal {
namespace {

constexpr std::string_view kMagic = "SLUICESNAP";
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderSize = 10 + 4 + 8;  // magic, version, body length
constexpr size_t kTrailerSize = 4;          // CRC-32

uint32_t Crc32(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes lengths as uInt: feed it in pieces that fit.
  while (!bytes.empty()) {
    const size_t piece = std::min<size_t>(bytes.size(), 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(piece));
    bytes.remove_prefix(piece);
  }
  return static_cast<uint32_t>(crc);
}

bool DecodeQueue(SnapshotReader& r, int64_t& last, CountQueue& queue) {
  uint32_t n = 0;
  if (!r.I64(last) || !r.U32(n)) {
    return false;
  }
  // The queue keeps the sum of its counts: refuse, while reading, counts whose sum no limit
  // allows, a limit's N and its largest debt (Plausible checks the real limit afterwards),
  // before the sum could overflow.
  int64_t total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    int64_t index = 0;
    int64_t count = 0;
    if (!r.I64(index) || !r.I64(count) || count <= 0 ||
        count > Limit::kMaxCount + kMaxDebt - total ||
        (!queue.empty() && index <= queue.entries().back().index)) {
      return false;
    }
    queue.Add(index, count);
    total += count;
  }
  return true;
}

void EncodeQueue(int64_t last, const CountQueue& queue, SnapshotWriter& w) {
  w.I64(last);
  w.U32(static_cast<uint32_t>(queue.entries().size()));
  for (const CountQueue::Entry& e : queue.entries()) {
    w.I64(e.index);
    w.I64(e.count);
  }
}

// The bounds Plausible checks (see snapshot.h).
bool InRange(int64_t last) { return last == kNoTime || (last >= 0 && last < kCompactUntil); }
// The most a key may hold: N plus the largest debt a settle can leave (compact_state.h).
int64_t Ceiling(const Limit& l) { return l.limit() + MaxDebt(l); }
bool PlausibleQueue(const Limit& l, int64_t last, const CountQueue& q, int64_t width) {
  if (!InRange(last) || (last == kNoTime && !q.empty())) {
    return false;
  }
  int64_t total = 0;
  for (const CountQueue::Entry& e : q.entries()) {
    if (e.index < 0 || e.index > last / width || e.count > Ceiling(l) - total) {
      return false;
    }
    total += e.count;
  }
  return true;
}
bool PlausibleTat(const Limit& l, Int128 tat) {
  return tat == kNoTat ||
         (tat >= 0 && tat <= Int128{kCompactUntil} * l.rate_units() +
                                 (Int128{l.burst()} + MaxDebt(l)) * l.rate_period_us());
}

absl::Status Errno(std::string_view what, const std::string& path) {
  return absl::UnavailableError(
      fmt::format("{} {}: {}", what, path, std::generic_category().message(errno)));
}

}  // namespace

bool SnapshotReader::Little(int bytes, uint64_t& v) {
  if (data_.size() - offset_ < static_cast<size_t>(bytes)) {
    offset_ = data_.size();  // Failed: every later read fails too.
    return false;
  }
  v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<uint8_t>(data_[offset_ + i])) << (8 * i);
  }
  offset_ += bytes;
  return true;
}

bool SnapshotReader::U8(uint8_t& v) {
  uint64_t x = 0;
  const bool ok = Little(1, x);
  v = static_cast<uint8_t>(x);
  return ok;
}
bool SnapshotReader::U32(uint32_t& v) {
  uint64_t x = 0;
  const bool ok = Little(4, x);
  v = static_cast<uint32_t>(x);
  return ok;
}
bool SnapshotReader::I64(int64_t& v) {
  uint64_t x = 0;
  const bool ok = Little(8, x);
  v = static_cast<int64_t>(x);
  return ok;
}
bool SnapshotReader::I128(Int128& v) {
  int64_t high = 0;
  int64_t low = 0;
  if (!I64(high) || !I64(low)) {
    return false;
  }
  v = (Int128{high} << 64) | static_cast<uint64_t>(low);
  return true;
}
bool SnapshotReader::Bytes(size_t n, std::string_view& v) {
  if (data_.size() - offset_ < n) {
    offset_ = data_.size();
    return false;
  }
  v = data_.substr(offset_, n);
  offset_ += n;
  return true;
}

void Encode(const FixedWindowState& s, SnapshotWriter& w) {
  w.I64(s.last);
  w.I64(s.count);
}
bool Decode(SnapshotReader& r, FixedWindowState& s) {
  return r.I64(s.last) && r.I64(s.count) && s.count >= 0;
}

void Encode(const SlidingWindowState& s, SnapshotWriter& w) {
  w.I64(s.last);
  w.I64(s.cur);
  w.I64(s.prev);
}
bool Decode(SnapshotReader& r, SlidingWindowState& s) {
  return r.I64(s.last) && r.I64(s.cur) && r.I64(s.prev) && s.cur >= 0 && s.prev >= 0;
}

void Encode(const SlidingLogState& s, SnapshotWriter& w) { EncodeQueue(s.last, s.log, w); }
bool Decode(SnapshotReader& r, SlidingLogState& s) { return DecodeQueue(r, s.last, s.log); }

void Encode(const SlidingBucketsState& s, SnapshotWriter& w) { EncodeQueue(s.last, s.buckets, w); }
bool Decode(SnapshotReader& r, SlidingBucketsState& s) { return DecodeQueue(r, s.last, s.buckets); }

void Encode(const TokenBucketState& s, SnapshotWriter& w) {
  w.I128(s.level);
  w.I64(s.last);
}
bool Decode(SnapshotReader& r, TokenBucketState& s) {
  return r.I128(s.level) && r.I64(s.last);  // A level in debt is below 0: Plausible bounds it.
}

void Encode(const GcraState& s, SnapshotWriter& w) { w.I128(s.tat); }
bool Decode(SnapshotReader& r, GcraState& s) { return r.I128(s.tat); }

void Encode(const LeakyBucketState& s, SnapshotWriter& w) { w.I128(s.tat); }
bool Decode(SnapshotReader& r, LeakyBucketState& s) { return r.I128(s.tat); }

bool Plausible(const Limit& l, const FixedWindowState& s) {
  return InRange(s.last) && s.count >= 0 && s.count <= Ceiling(l);
}
bool Plausible(const Limit& l, const SlidingWindowState& s) {
  return InRange(s.last) && s.cur >= 0 && s.cur <= Ceiling(l) && s.prev >= 0 &&
         s.prev <= Ceiling(l);
}
bool Plausible(const Limit& l, const SlidingLogState& s) {
  return PlausibleQueue(l, s.last, s.log, 1);
}
bool Plausible(const Limit& l, const SlidingBucketsState& s) {
  return PlausibleQueue(l, s.last, s.buckets, l.period().count() / l.buckets());
}
bool Plausible(const Limit& l, const TokenBucketState& s) {
  const Int128 p = l.rate_period_us();  // A level in debt goes down to -D*P'.
  return InRange(s.last) && s.level >= -Int128{MaxDebt(l)} * p && s.level <= Int128{l.burst()} * p;
}
bool Plausible(const Limit& l, const GcraState& s) { return PlausibleTat(l, s.tat); }
bool Plausible(const Limit& l, const LeakyBucketState& s) { return PlausibleTat(l, s.tat); }

absl::Status WriteSnapshotFile(const std::string& path, std::string_view body) {
  SnapshotWriter file;
  file.Bytes(kMagic);
  file.U32(kVersion);
  file.I64(static_cast<int64_t>(body.size()));
  file.Bytes(body);
  file.U32(Crc32(file.data()));
  return internal::ReplaceFile(path, file.data(), 0644);
}

absl::StatusOr<std::string> ReadSnapshotFile(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(fmt::format("no snapshot at {}", path));
    }
    return Errno("cannot read the snapshot", path);
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::UnavailableError(fmt::format("snapshot {} is not a regular file", path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Errno("cannot read the snapshot", path);
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  const std::string file = std::move(contents).str();
  auto corrupt = [&](std::string_view why) {
    return absl::DataLossError(fmt::format("snapshot {} is unusable: {}", path, why));
  };
  if (file.empty()) {
    return corrupt("the file is empty");
  }
  if (file.size() < kHeaderSize + kTrailerSize || !file.starts_with(kMagic)) {
    return corrupt("not a sluice snapshot");
  }
  const std::string_view bytes = file;
  SnapshotReader header(bytes.substr(kMagic.size()));
  uint32_t version = 0;
  int64_t body_size = 0;
  header.U32(version);
  header.I64(body_size);
  if (version != kVersion) {
    return corrupt(fmt::format("version {}, this build reads version {}", version, kVersion));
  }
  if (body_size < 0 ||
      static_cast<uint64_t>(body_size) != file.size() - kHeaderSize - kTrailerSize) {
    return corrupt(fmt::format("truncated or extended: {} bytes, the header promises {}",
                               file.size(), body_size + kHeaderSize + kTrailerSize));
  }
  SnapshotReader trailer(bytes.substr(file.size() - kTrailerSize));
  uint32_t crc = 0;
  trailer.U32(crc);
  if (crc != Crc32(bytes.substr(0, file.size() - kTrailerSize))) {
    return corrupt("checksum mismatch");
  }
  return file.substr(kHeaderSize, static_cast<size_t>(body_size));
}

}  // namespace sluice::internal
