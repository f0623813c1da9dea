#pragma once

// Table: the states of one Limit's keys in the memory store, in kShards shards
// (src/memory/shards.h), each a CompactMap under its own SpinLock. A new key reclaims reset keys
// as the store's Budget asks, and is refused when it is full and none is found
// (src/memory/eviction.h). MakeTable makes the
// table for a limit, holding its states in the most compact encoding the limit allows
// (src/memory/compact_state.h); the implementation, TableOf, is in table.cc.
//
// Thread-safe: Decide, KeyCount, Save and Put take the shard locks themselves; the *Held
// calls and ReclaimOne are for callers that already hold the shard's lock (ShardLock).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
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

  // Decides under the shard's lock. Empty when the key is new, the request would create it,
  // and the store is full with no reset key found to drop (MakeRoomHeld): nothing changed.
  virtual std::optional<Decision> Decide(HashedKey key, int64_t cost, Timestamp now) = 0;
  // DecideAll's steps: the caller holds ShardLock(ShardOf(key.hash)) for the whole of them.
  // kApply after MakeRoomHeld said yes for every new key of the request: a new key is
  // inserted even if others have filled the store since (all or nothing comes first).
  virtual Decision DecideHeld(HashedKey key, int64_t cost, Timestamp now, Mode mode) = 0;
  // Whether `key` is stored (kStored), or there is room for it beside `claimed` new keys of
  // the same request and shard index already given room (kMade, after dropping reset keys if
  // the store is full), or not (kNone, counted as a refusal). Lock held as above.
  enum class Room { kStored, kMade, kNone };
  virtual Room MakeRoomHeld(HashedKey key, Timestamp now, int64_t claimed) = 0;
  virtual size_t KeyCount() = 0;

  // The lock of shard `index`, for those that take it from outside: DecideAll (for
  // ShardOf(key.hash)) and the search for reset keys across tables.
  virtual SpinLock& ShardLock(size_t index) = 0;
  // Drops one reset key among the next kFullSearch of shard `index`'s walk; whether it found
  // one. REQUIRES: the caller holds ShardLock(index).
  virtual bool ReclaimOne(size_t index, Timestamp now) = 0;

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
