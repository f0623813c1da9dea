#pragma once

// CallerLimits: the distinct limits that callers give (ad hoc /v1/check without rules,
// Envoy's per-descriptor limit overrides) and that are in use, bounded. Each costs the store a
// table (MemoryStore::kMaxLimits in all, shared with the rules), so callers may have
// kMaxCallerLimits in use at once. A limit is in use from its first request until no key of
// it can hold state any more: one to two Horizon()s after its last request (every key has
// reset by one, whatever the algorithm), or, when all the places are taken, as soon as the
// store holds no state of it (Store::HoldsState): a limit with a long period (100 years)
// holds its place only while a key of it does, not for two centuries after a request that
// stored nothing (cost 0) or a key that has reset. Then its place goes to the next new limit,
// and the memory store frees its table (src/memory/registry.h); a limit that comes back is
// counted anew and decides as before (its keys had reset). So one caller minting limits
// (limit=1, 2, 3, ...) holds at most kMaxCallerLimits, and only for as long as it keeps them
// busy or their keys hold state, which is memory the store must keep anyway.
//
// Thread-safe. A limit in use is found without a lock (an open-addressed array of hashes,
// each with the time it stays in use, refreshed at most once a horizon); a new one takes a
// mutex and looks at every place. When every place is taken, a new limit asks the store about
// the limits in use, at most once every kSweepEvery (the store's answer costs a look at each
// table). Races are benign and bounded by the requests in flight: a limit whose place is
// being given away as it is used is admitted this once, and may then store a key while its
// place serves another (a place is not given away within kSettle of being taken, so that a
// new limit's first request has stored its key by then); a hash collision merely lets one
// more limit in.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>

#include "sluice/clock.h"
#include "sluice/limit.h"
#include "src/core/mutex.h"

namespace sluice::server {

inline constexpr size_t kMaxCallerLimits = 1024;

class CallerLimits {
 public:
  // Whether the store holds state of `limit` that has not reset by `now` (Store::HoldsState).
  using HoldsState = std::function<bool(const Limit& limit, Timestamp now)>;
  // How often, at most, a full set of places asks the store which limits hold no state.
  static constexpr Micros kSweepEvery{1'000'000};
  // How long a place is kept, at least, once taken, whatever the store holds.
  static constexpr Micros kSettle{1'000'000};

  explicit CallerLimits(HoldsState holds_state) : holds_state_(std::move(holds_state)) {}

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
  // Gives up the places, taken kSettle or more before `now`, whose limits hold no state in the
  // store; at most once every kSweepEvery.
  void FreeIdle(Timestamp now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const HoldsState holds_state_;
  std::array<Place, kSlots> places_{};
  internal::Mutex mu_;  // Serialises new limits and FreeIdle.
  // Each place's limit and when it was taken, written with its hash.
  std::array<std::optional<Limit>, kSlots> limits_ ABSL_GUARDED_BY(mu_);
  std::array<int64_t, kSlots> taken_us_ ABSL_GUARDED_BY(mu_){};
  int64_t next_sweep_us_ ABSL_GUARDED_BY(mu_) = std::numeric_limits<int64_t>::min();
};

}  // namespace sluice::server
