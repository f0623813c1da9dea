#pragma once

// Table: the states of one Limit's keys in the memory store, in kShards shards
// (src/memory/shards.h), each a CompactMap under its own SpinLock. A new key reclaims reset keys
// and, when the store's Budget is full, evicts one (src/memory/eviction.h). MakeTable makes the
// table for a limit, holding its states in the most compact encoding the limit allows
// (src/memory/compact_state.h); the implementation, TableOf, is in table.cc.
//
// Thread-safe: Decide, KeyCount, Save and Put take the shard locks themselves; the *Held
// calls, Nominate and Evict are for callers that already hold the shard's lock (ShardLock).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "sluice/algorithms.h"
#include "sluice/decision.h"
#include "sluice/limit.h"
#include "src/core/mutex.h"
#include "src/memory/eviction.h"
#include "src/memory/shards.h"
#include "src/memory/snapshot.h"

namespace sluice::internal {

enum class Mode { kApply, kDryRun };

// The states of one Limit's keys.
class Table {
 public:
  Table(const Limit& limit, Budget& budget) : limit_(limit), budget_(budget) {}
  virtual ~Table() = default;

  const Limit& limit() const { return limit_; }
  Budget& budget() const { return budget_; }

  // Decides under the shard's lock.
  virtual Decision Decide(HashedKey key, int64_t cost, Timestamp now) = 0;
  // DecideAll's steps: the caller holds ShardLock(ShardOf(key.hash)) for the whole of them.
  // `keep`: the request's other keys, which making room for this one must not evict.
  virtual Decision DecideHeld(HashedKey key, int64_t cost, Timestamp now, Mode mode,
                              std::span<const HashedKey> keep) = 0;
  // Marks a key as denied (if it is stored) after DecideAll denied it. Lock held as above.
  virtual void MarkDeniedHeld(HashedKey key) = 0;
  virtual size_t KeyCount() = 0;

  // The lock of shard `index`, for those that take it from outside: DecideAll (for
  // ShardOf(key.hash)) and eviction across tables.
  virtual SpinLock& ShardLock(size_t index) = 0;
  // Eviction across tables. REQUIRES for both: the caller holds ShardLock(index).
  // The best victim among keys sampled from shard `index`, or none if it holds no key.
  virtual std::optional<Nominee> Nominate(size_t index, Timestamp now,
                                          std::span<const HashedKey> keep) = 0;
  // Drops a key Nominate offered, counting it as evicted.
  virtual void Evict(size_t index, void* slot) = 0;

  // Snapshots: writes every key as (u8 1, u32 length, key, state); see src/memory/snapshot.h.
  virtual void Save(SnapshotWriter& w) = 0;
  // Stores `state` for `key`. REQUIRES: the state's alternative is this table's algorithm and
  // Storable(limit(), state).
  virtual void Put(std::string_view key, const AnyState& state) = 0;

 private:
  const Limit limit_;
  Budget& budget_;  // The store's; outlives the table.
};

// Whether a table for `limit` can hold `state`: a compact table only what fits its 64 bits
// (a state written by this store always does; a crafted snapshot might not).
bool Storable(const Limit& limit, const AnyState& state);

// The table for `limit`, its keys counted against `budget` (which must outlive it).
std::unique_ptr<Table> MakeTable(const Limit& limit, Budget& budget);

}  // namespace sluice::internal
