#pragma once

// The memory store's snapshot format: how each algorithm's state is written and read back,
// and the file around it. The format describes states as the algorithms define them, not as
// the store lays them out in memory, so the store's tables can change without old snapshots
// becoming unreadable. Plausible checks what a decoded state may hold before the store keeps it.
//
// File: "SLUICESNAP" + version (u32) + body length (u64) + body + CRC-32 of everything before
// it (u32). Numbers are little-endian. Body: a table per limit,
//   u8 1, u8 algorithm, i64 limit, i64 period_us, i64 burst, i64 buckets,
//   then per key: u8 1, u32 key length, key bytes, the state; then u8 0.
// and u8 0 after the last table. A calendar quota's table starts with u8 2 in place of the 1,
// its period_us is 0, and after its buckets come u8 unit (CalendarUnit) and the zone's name
// (u32 length, bytes): a file without calendar quotas is as it was before they existed.

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "sluice/algorithms.h"
#include "sluice/limit.h"

namespace sluice::internal {

// A body's markers (above).
inline constexpr uint8_t kNoMoreTables = 0;
inline constexpr uint8_t kTable = 1;
inline constexpr uint8_t kCalendarTable = 2;

class SnapshotWriter {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Little(v, 4); }
  void I64(int64_t v) { Little(static_cast<uint64_t>(v), 8); }
  void I128(Int128 v) {
    I64(static_cast<int64_t>(v >> 64));
    I64(static_cast<int64_t>(static_cast<uint64_t>(v)));
  }
  void Bytes(std::string_view bytes) { out_.append(bytes); }

  const std::string& data() const { return out_; }

 private:
  void Little(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) {
      out_.push_back(static_cast<char>(v >> (8 * i)));
    }
  }

  std::string out_;
};

// Reads what SnapshotWriter wrote. Every read checks that the bytes are there; a failed read
// returns false and leaves the reader failed.
class SnapshotReader {
 public:
  explicit SnapshotReader(std::string_view data) : data_(data) {}

  bool U8(uint8_t& v);
  bool U32(uint32_t& v);
  bool I64(int64_t& v);
  bool I128(Int128& v);
  bool Bytes(size_t n, std::string_view& v);

  size_t offset() const { return offset_; }
  bool at_end() const { return offset_ == data_.size(); }

 private:
  bool Little(int bytes, uint64_t& v);

  std::string_view data_;
  size_t offset_ = 0;
};

// Each state's encoding. Decode checks what the algorithms assume (counts positive, indices
// increasing) and returns false for anything else.
void Encode(const FixedWindowState& s, SnapshotWriter& w);
void Encode(const SlidingLogState& s, SnapshotWriter& w);
void Encode(const SlidingWindowState& s, SnapshotWriter& w);
void Encode(const SlidingBucketsState& s, SnapshotWriter& w);
void Encode(const TokenBucketState& s, SnapshotWriter& w);
void Encode(const GcraState& s, SnapshotWriter& w);
void Encode(const LeakyBucketState& s, SnapshotWriter& w);
bool Decode(SnapshotReader& r, FixedWindowState& s);
bool Decode(SnapshotReader& r, SlidingLogState& s);
bool Decode(SnapshotReader& r, SlidingWindowState& s);
bool Decode(SnapshotReader& r, SlidingBucketsState& s);
bool Decode(SnapshotReader& r, TokenBucketState& s);
bool Decode(SnapshotReader& r, GcraState& s);
bool Decode(SnapshotReader& r, LeakyBucketState& s);

// Whether a state read from a snapshot could have been made by this store under `limit`:
// counts within the limit, times within the store's range, log entries no newer than the
// last admission. A file can pass its checksum and still be crafted; the algorithms assume
// these bounds (sums within int64, products within 128 bits), so a state outside them is
// refused rather than decided on.
bool Plausible(const Limit& l, const FixedWindowState& s);
bool Plausible(const Limit& l, const SlidingLogState& s);
bool Plausible(const Limit& l, const SlidingWindowState& s);
bool Plausible(const Limit& l, const SlidingBucketsState& s);
bool Plausible(const Limit& l, const TokenBucketState& s);
bool Plausible(const Limit& l, const GcraState& s);
bool Plausible(const Limit& l, const LeakyBucketState& s);

// Writes `body`, framed and checksummed, to `path` atomically: to a temporary file beside it,
// fsync'd, then renamed over `path`, so a crash leaves the old snapshot or the new, never half
// of one. Errors name the path and the failing step.
absl::Status WriteSnapshotFile(const std::string& path, std::string_view body);

// Reads the body of the snapshot at `path`. NotFound when there is none; Unavailable naming
// the path and the reason when it cannot be read (a directory, no permission); DataLoss naming
// the path when it is empty, truncated, not a snapshot, of another version, or fails its
// checksum.
absl::StatusOr<std::string> ReadSnapshotFile(const std::string& path);

}  // namespace sluice::internal
