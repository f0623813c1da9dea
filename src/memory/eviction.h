#pragma once

// What bounds the memory store's keys, and how a key is chosen to go when the bound is met:
// the Budget (the key count, striped by shard index, and every table eviction may ask), a
// Nominee (a key some table offers) and BetterVictim (the policy that compares two). The tables
// (src/memory/table.cc) reclaim and evict by them; MemoryStore's comment states the policy.
//
// Budget is thread-safe: its counters are relaxed atomics, and AddTable publishes each table
// to the readers of table_count() and table(). Nominee and BetterVictim are plain values.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "sluice/algorithms.h"
#include "sluice/memory_store.h"
#include "src/memory/shards.h"

namespace sluice::internal {

// The store's key count and its bound, kept in one stripe per shard index (shard i of every
// table counts in stripe i), each on a cache line of its own: keys are created and dropped all
// the time (a key that resets between its requests is reclaimed and created again), and one
// counter shared by all threads would bounce between their cores on every one. Each stripe
// holds max_keys / kShards keys, rounded up; keys spread evenly over them by hash.
class Table;

class Budget {
 public:
  struct alignas(64) Stripe {
    std::atomic<int64_t> keys{0};
    std::atomic<uint64_t> reclaimed{0};
    std::atomic<uint64_t> evicted{0};
  };

  explicit Budget(size_t max_keys)
      : max_per_stripe_(static_cast<int64_t>((max_keys + kShards - 1) / kShards)) {}

  Stripe& stripe(size_t shard) { return stripes_[shard]; }
  bool Full(size_t shard) const {
    return max_per_stripe_ > 0 &&
           stripes_[shard].keys.load(std::memory_order_relaxed) >= max_per_stripe_;
  }
  // Every table of the store, in the order they were made, for eviction to choose among.
  void AddTable(Table* table) {  // Callers are serialised (the store's insert lock).
    const size_t n = table_count_.load(std::memory_order_relaxed);
    tables_[n].store(table, std::memory_order_relaxed);
    table_count_.store(n + 1, std::memory_order_release);  // Publishes tables_[n].
  }
  size_t table_count() const { return table_count_.load(std::memory_order_acquire); }
  Table* table(size_t i) const { return tables_[i].load(std::memory_order_relaxed); }

  MemoryStoreStats Stats() const {
    MemoryStoreStats stats;
    for (const Stripe& s : stripes_) {
      stats.keys += static_cast<size_t>(s.keys.load(std::memory_order_relaxed));
      stats.reclaimed += s.reclaimed.load(std::memory_order_relaxed);
      stats.evicted += s.evicted.load(std::memory_order_relaxed);
    }
    return stats;
  }

 private:
  const int64_t max_per_stripe_;  // 0: no bound.
  std::array<Stripe, kShards> stripes_;
  std::array<std::atomic<Table*>, MemoryStore::kMaxLimits> tables_{};
  std::atomic<size_t> table_count_{0};
};

// A key some table offers for eviction, and what eviction weighs. The slot is the table's own.
struct Nominee {
  Table* table = nullptr;
  void* slot = nullptr;
  bool denied = false;
  int64_t remaining = 0;
  int64_t capacity = 1;  // The limit's burst: remaining is compared as a fraction of it.
  Micros reset_after{0};
};

// Whether `a` is the better key to evict: never denied before denied; then the furthest from
// its limit (the most remaining, as a fraction of capacity); then the closest to resetting.
inline bool BetterVictim(const Nominee& a, const Nominee& b) {
  if (a.denied != b.denied) {
    return !a.denied;
  }
  const Int128 left_a = Int128{a.remaining} * b.capacity;
  const Int128 left_b = Int128{b.remaining} * a.capacity;
  if (!a.denied && left_a != left_b) {
    return left_a > left_b;
  }
  return a.reset_after < b.reset_after;
}

inline constexpr size_t kOtherTablesAsked = 3;  // Tables besides its own a new key may evict from.

inline constexpr int kReclaimPerInsert = 2;  // Keys looked at, per new key, for a reset state.
inline constexpr int kEvictionSample = 8;    // Keys compared to choose one to evict.

}  // namespace sluice::internal
