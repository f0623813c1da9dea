#pragma once

// The leases of concurrency limits (Store::LeaseAll) in memory: MemoryStore keeps them here,
// in a table of their own beside its limits' tables. src/redis/decide.lua keeps the same
// figures in one sorted set per key, scored by expiry; DecideLease is the definition both
// follow.

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"

#include "sluice/store.h"
#include "src/core/mutex.h"

namespace sluice::internal {

struct Lease {
  std::string id;
  Timestamp expiry;  // Held while now < expiry.
};

// One key's part of Store::LeaseAll: drops the leases that have expired by `now` from `held`,
// then, when `apply`, takes (kTake) or gives back (kRelease) `id`, and returns the key's
// figures as Store::LeaseAll defines them. A dry run (apply false) of kTake reports the
// figures of a kQuery, which is what a take that did not happen reports.
Decision DecideLease(std::vector<Lease>& held, LeaseOp op, int64_t capacity, std::string_view id,
                     Micros ttl, Timestamp now, bool apply);

// Leases by key, in shards with a lock each. A key takes memory while it holds a lease:
// its entry goes when its last lease is released or is found expired, and a shard that has
// doubled since it was last swept is swept whole, so keys nobody asks about again go too.
//
// Bounded: at most max_leases leases (0: no bound) over all keys, since anyone who can name
// keys can take a lease on each. A take that would hold more first sweeps every shard for
// expired leases (at most once a second of the callers' time, as a sweep touches every lease),
// and is then refused with ResourceExhausted, counted in refused(). Renewing a lease one
// already holds, releases and queries are never refused. Thread-safe.
class LeaseTable {
 public:
  explicit LeaseTable(size_t max_leases) : max_leases_(static_cast<int64_t>(max_leases)) {}

  // Store::LeaseAll, after ValidateLeases.
  absl::StatusOr<Decision> LeaseAll(LeaseOp op, std::span<const LeasedKey> keys,
                                    std::string_view id, Micros ttl, Timestamp now,
                                    std::span<Decision> each);
  // Keys holding an entry now (some of whose leases may have expired unseen).
  size_t KeyCount();
  // Leases held now (some perhaps expired unseen), and takes refused for want of room.
  size_t Count() const { return static_cast<size_t>(leases_.load(std::memory_order_relaxed)); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  static constexpr size_t kShards = 16;
  static constexpr Micros kFullSweepEvery{1'000'000};
  struct Shard {
    Mutex mu;
    // Node-based: LeaseAll holds pointers to several keys' sets while it inserts others.
    absl::node_hash_map<std::string, std::vector<Lease>> leases ABSL_GUARDED_BY(mu);
    size_t sweep_at ABSL_GUARDED_BY(mu) = 64;  // Swept whole when it holds this many keys.
  };
  static size_t ShardOf(std::string_view key);
  // Drops the leases expired by `now`, and the keys left with none.
  void Sweep(Shard& shard, Timestamp now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Whether `n` more leases fit, sweeping every shard first if they do not (`locked`: the
  // shards the caller holds; the others are only tried). Reserves them when they fit.
  bool Reserve(int64_t n, Timestamp now, std::span<const size_t> locked);

  const int64_t max_leases_;  // 0: no bound.
  std::array<Shard, kShards> shards_;
  std::atomic<int64_t> leases_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<int64_t> next_full_sweep_{0};  // Microseconds since the epoch.
};

}  // namespace sluice::internal
