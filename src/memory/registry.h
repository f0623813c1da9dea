#pragma once

// Registry: the memory store's tables, one per distinct Limit. Found without a lock on every
// request, made when a limit is first seen, and retired once every key of theirs has reset, so
// that limits callers mint (limit=1, 2, 3, ... or distinct periods) do not hold a table each
// for the life of the process.
//
// Safe reclamation, RCU-like. The tables in force are an immutable View behind a shared_ptr,
// replaced whole under a mutex when a table is made or retired. Each thread keeps a copy of the
// shared_ptr (thread_local, as RateLimitService::rules() does) and takes the mutex only when
// the version has moved on; it lets go of its old copy only in Pin, which a store call makes
// once at its start, so a table it found stays alive until its next call, whatever is retired
// meanwhile. A table is retired under all of its shard locks (Table::RetireIfEmpty) and taken
// out of the View before they are let go: a thread that found it in an older View sees the
// mark under the shard lock it takes and looks again (Table::Outcome::kRetired), finding a new
// table or making one. So no decision is made on a table that has left the registry, and a
// table is retired only when it holds no key (those it held had all reset: they decided as new
// keys do), so retiring is invisible to decisions. The hot path pays a thread_local read and
// an acquire load of the version; a thread's old View (and tables retired since) stays alive
// until it next calls the store.
//
// Thread-safe.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "sluice/limit.h"
#include "src/core/mutex.h"
#include "src/memory/eviction.h"
#include "src/memory/table.h"

namespace sluice::internal {

// How many tables a new table looks at, to retire those whose keys have all reset: idle
// tables go a little at a time, never in a sweep, unless the registry is full.
inline constexpr size_t kRetirePerInsert = 2;

class Registry {
 public:
  // The tables in force at one moment. Immutable.
  struct View {
    std::vector<std::shared_ptr<Table>> owned;  // In the order they were made.
    std::vector<Table*> tables;                 // The same: Table::Others for eviction.
    // Open addressing by the limit's hash, a power of two at least twice the tables (at
    // least 8); a null slot ends a probe.
    std::vector<Table*> slots;

    // The table of `limit`, or null. Inline: it runs on every request.
    Table* Find(const Limit& limit) const {
      const size_t mask = slots.size() - 1;
      for (size_t i = SlotOf(limit) & mask;; i = (i + 1) & mask) {
        Table* table = slots[i];
        if (table == nullptr || table->limit() == limit) {
          return table;  // Slots are at most half full: a null one is always met.
        }
      }
    }
  };

  // Where a limit's probe starts: a cheap mix of its numbers.
  static size_t SlotOf(const Limit& limit) {
    uint64_t h = static_cast<uint64_t>(limit.limit()) * 0x9E3779B97F4A7C15ULL;
    h ^= static_cast<uint64_t>(limit.period().count()) * 0xC2B2AE3D27D4EB4FULL;
    h ^= static_cast<uint64_t>(limit.burst()) * 0x165667B19E3779F9ULL;
    h ^= static_cast<uint64_t>(limit.buckets()) * 0x27D4EB2F165667C5ULL;
    h ^= static_cast<uint64_t>(limit.algorithm());
    h ^= limit.zone_hash() * 0x94D049BB133111EBULL;  // Calendar quotas of several zones.
    h ^= static_cast<uint64_t>(limit.calendar().value_or(CalendarUnit::kDay)) << 8;
    return static_cast<size_t>(h ^ (h >> 29));
  }

  // `max_tables`: the most tables held at once (MemoryStore::kMaxLimits). `budget` counts
  // the tables' keys and must outlive them. `compact_keys`, if not null, is given to every
  // table made (MakeTable) and must outlive them too.
  Registry(size_t max_tables, Budget& budget, const Fingerprint* compact_keys = nullptr);

  // The View this thread holds, refreshed if the registry changed since. Lets go of the View
  // it held before: call it at the start of a store call, and again only once no table found
  // in the earlier View is in use by this thread.
  const View& Pin() {
    if (pinned.registry != id_ || pinned.version != version_.load(std::memory_order_acquire))
        [[unlikely]] {
      return Refresh();
    }
    return *pinned.view;
  }

  // Makes a table for `limit` at `now`, unless one is in force now. It first retires up to
  // kRetirePerInsert tables whose keys have all reset (at least a period after they were
  // made), and, when `max_tables` are in force, any one such table; ResourceExhausted when
  // none is found. The caller then pins again and finds it.
  absl::Status Insert(const Limit& limit, Timestamp now);

  // The View in force, for those that walk every table (snapshots, counts).
  std::shared_ptr<const View> Current() const;

  size_t size() const { return size_.load(std::memory_order_relaxed); }
  uint64_t retired() const { return retired_.load(std::memory_order_relaxed); }

 private:
  // This thread's copy of a View: trivial, so the hot path reads it with no guard; the
  // shared_ptr that keeps the View alive (registry.cc) is touched only when it changes.
  struct Pinned {  // Zero at first, as every thread_local of static storage: no registry.
    uint64_t registry;
    uint64_t version;
    const View* view;
  };
  static inline thread_local Pinned pinned;

  const View& Refresh();
  // Looks at up to `look` tables from the cursor and retires idle ones, until `want` are.
  // Returns how many were.
  size_t RetireIdle(Timestamp now, size_t look, size_t want) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Publishes `owned` as the View in force.
  void Publish(std::vector<std::shared_ptr<Table>> owned) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_tables_;
  Budget& budget_;
  const Fingerprint* const compact_keys_;
  const uint64_t id_;  // Tells registries apart in the threads' copies.
  std::atomic<uint64_t> version_{1};
  std::atomic<size_t> size_{0};
  std::atomic<uint64_t> retired_{0};
  mutable Mutex mu_;
  std::shared_ptr<const View> view_ ABSL_GUARDED_BY(mu_);
  size_t cursor_ ABSL_GUARDED_BY(mu_) = 0;  // Where RetireIdle's walk resumes.
};

}  // namespace sluice::internal
