#pragma once

// What bounds the memory store's keys: the Budget (the key count, striped by shard index) and
// the bounds of the search a new key makes for a reset key (in its own table, then in others
// of the store's registry, which the caller passes in). The tables (src/memory/table.cc)
// reclaim by them; MemoryStore's comment states the policy.
//
// Budget is thread-safe: its counters are relaxed atomics.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "sluice/memory_store.h"
#include "src/memory/shards.h"

namespace sluice::internal {

// The store's key count and its bound, kept in one stripe per shard index (shard i of every
// table counts in stripe i), each on a cache line of its own: keys are created and dropped all
// the time (a key that resets between its requests is reclaimed and created again), and one
// counter shared by all threads would bounce between their cores on every one. Each stripe
// holds max_keys / kShards keys, rounded up; keys spread evenly over them by hash.
class Budget {
 public:
  struct alignas(64) Stripe {
    std::atomic<int64_t> keys{0};
    std::atomic<uint64_t> reclaimed{0};
    std::atomic<uint64_t> refused{0};
  };

  explicit Budget(size_t max_keys)
      : max_per_stripe_(static_cast<int64_t>((max_keys + kShards - 1) / kShards)) {}

  Stripe& stripe(size_t shard) { return stripes_[shard]; }
  // Whether stripe `shard` has no room for another key beyond `claimed` ones that a request
  // has already been given room for and not yet inserted.
  bool Full(size_t shard, int64_t claimed = 0) const {
    return max_per_stripe_ > 0 &&
           stripes_[shard].keys.load(std::memory_order_relaxed) + claimed >= max_per_stripe_;
  }
  MemoryStoreStats Stats() const {
    MemoryStoreStats stats;
    for (const Stripe& s : stripes_) {
      stats.keys += static_cast<size_t>(s.keys.load(std::memory_order_relaxed));
      stats.reclaimed += s.reclaimed.load(std::memory_order_relaxed);
      stats.refused += s.refused.load(std::memory_order_relaxed);
    }
    return stats;
  }

 private:
  const int64_t max_per_stripe_;  // 0: no bound.
  std::array<Stripe, kShards> stripes_;
};

// The bounded search a new key makes for reset keys to drop. Nearing growth, it looks at
// kReclaimPerInsert keys of its shard; when the store is full, at kFullSearch keys of its shard
// and then, until one is found, at kFullSearch keys of the same shard of each of up to
// kOtherTablesAsked other tables: 32 keys at most, after which it is refused.
inline constexpr size_t kOtherTablesAsked = 3;
inline constexpr int kReclaimPerInsert = 2;
inline constexpr int kFullSearch = 8;

}  // namespace sluice::internal
