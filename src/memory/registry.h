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

    // The table of `limit`, or null.
    Table* Find(const Limit& limit) const;
  };

  // `max_tables`: the most tables held at once (MemoryStore::kMaxLimits). `budget` counts
  // the tables' keys and must outlive them.
  Registry(size_t max_tables, Budget& budget);

  // The View this thread holds, refreshed if the registry changed since. Lets go of the View
  // it held before: call it at the start of a store call, and again only once no table found
  // in the earlier View is in use by this thread.
  const View& Pin();

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
  // Looks at up to `look` tables from the cursor and retires idle ones, until `want` are.
  // Returns how many were.
  size_t RetireIdle(Timestamp now, size_t look, size_t want) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Publishes `owned` as the View in force.
  void Publish(std::vector<std::shared_ptr<Table>> owned) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_tables_;
  Budget& budget_;
  const uint64_t id_;  // Tells registries apart in the threads' copies.
  std::atomic<uint64_t> version_{1};
  std::atomic<size_t> size_{0};
  std::atomic<uint64_t> retired_{0};
  mutable Mutex mu_;
  std::shared_ptr<const View> view_ ABSL_GUARDED_BY(mu_);
  size_t cursor_ ABSL_GUARDED_BY(mu_) = 0;  // Where RetireIdle's walk resumes.
};

}  // namespace sluice::internal
