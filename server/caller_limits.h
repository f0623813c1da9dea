#pragma once

// CallerLimits: the distinct limits that callers give (ad hoc /v1/check without rules,
// Envoy's per-descriptor limit overrides) and that are in use, bounded. Each costs the store a
// table (MemoryStore::kMaxLimits in all, shared with the rules), so callers may have
// kMaxCallerLimits in use at once. A limit is in use from its first request until no key of
// it can hold state any more: one to two Horizon()s after its last request (every key has
// reset by one, whatever the algorithm). Then its place goes to the next new limit, and the memory store
// frees its table (src/memory/registry.h); a limit that comes back is counted anew and
// decides as before (its keys had reset). So one caller minting limits (limit=1, 2, 3, ...)
// holds at most kMaxCallerLimits for as long as it keeps them busy, and not past that.
//
// Thread-safe. A limit in use is found without a lock (an open-addressed array of hashes,
// each with the time it stays in use, refreshed at most once a horizon); a new one takes a
// mutex and looks at every place. Races are benign and bounded by the requests in flight: a
// limit whose place is being given away as it is used is admitted this once; a hash collision
// merely lets one more limit in.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "sluice/clock.h"
#include "sluice/limit.h"
#include "src/core/mutex.h"

namespace sluice::server {

inline constexpr size_t kMaxCallerLimits = 1024;

class CallerLimits {
 public:
  // Whether `limit` is in use, or there was room for it, at `now`.
  bool Admit(const Limit& limit, Timestamp now);
  // Limits in use at `now` (looks at every place: for tests and metrics).
  size_t InUse(Timestamp now) const;

  // How long after its last admission a key of `limit` may still hold state, at most: two
  // periods (a sliding window's two windows) plus the time its burst takes to drain.
  static Micros Horizon(const Limit& limit);

 private:
  static constexpr size_t kSlots = 4 * kMaxCallerLimits;  // A power of two.
  static constexpr uint64_t kEmpty = 0;                   // Hashes are odd: never 0.
  struct Place {
    std::atomic<uint64_t> hash{kEmpty};
    // In use until this time (microseconds since the epoch); kept at least a horizon ahead of
    // every admission. Places are never emptied, so probes are never cut short.
    std::atomic<int64_t> until_us{0};
  };

  // The place of `hash`, in use at `now_us`, or null.
  Place* Find(uint64_t hash, int64_t now_us);
  static void Touch(Place& place, int64_t now_us, int64_t horizon_us);

  std::array<Place, kSlots> places_{};
  internal::Mutex mu_;  // Serialises new limits.
};

}  // namespace sluice::server
