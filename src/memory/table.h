#pragma once

// Table: the states of one Limit's keys in the memory store, in kShards shards
// (src/memory/shards.h), each a CompactMap under its own SpinLock. A new key reclaims reset keys
// as the store's Budget asks, and is refused when it is full and none is found
// (src/memory/eviction.h). MakeTable makes the
// table for a limit, holding its states in the most compact encoding the limit allows
// (src/memory/compact_state.h); the implementation, TableOf, is in table.cc.
//
// A table whose keys have all reset may be retired (DropReset, then RetireIfEmpty): marked
// under every shard lock, so that a caller that found it before and then takes a shard lock
// sees the mark and looks its limit up again; the store frees it once no thread can still
// hold it (src/memory/registry.h).
//
// Thread-safe: Decide, KeyCount, Save, Put, DropReset and RetireIfEmpty take the shard locks
// themselves; the *Held calls and ReclaimOne are for callers that already hold the shard's
// lock (ShardLock).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "absl/functional/function_ref.h"

#include "sluice/algorithms.h"
#include "sluice/decision.h"
#include "sluice/limit.h"
#include "src/core/mutex.h"
#include "src/memory/eviction.h"
#include "src/memory/fingerprint.h"
#include "src/memory/shards.h"
#include "src/memory/snapshot.h"

namespace sluice::internal {

enum class Mode { kApply, kDryRun };

class Table;
// The other tables a full shard may look in for a reset key: those of the registry the
// caller holds, which keeps them alive (retired ones among them hold no key).
using Others = std::span<Table* const>;

// The states of one Limit's keys.
class Table {
 public:
  // `fingerprint`: null when the table keeps its keys' text; else the store's keyed hash,
  // whose value stands for each key (compact-keys mode, src/memory/fingerprint_map.h).
  Table(const Limit& limit, Budget& budget, Timestamp created, const Fingerprint* fingerprint)
      : limit_(limit), budget_(budget), created_(created), fingerprint_(fingerprint) {}
  virtual ~Table() = default;

  const Limit& limit() const { return limit_; }
  Budget& budget() const { return budget_; }
  // The time of the request that made it: a table is not retired before a period has passed.
  Timestamp created() const { return created_; }
  // Whether RetireIfEmpty has retired it. Read under one of its shard locks: it is set under
  // all of them, so a caller that holds one knows whether its decision counts.
  bool retired() const { return retired_.load(std::memory_order_relaxed); }

  // The hash every call of this table takes with a key (HashedKey::hash): the key's fingerprint
  // when the table keeps fingerprints, else HashOf. Inline: it runs on every request.
  size_t KeyHash(std::string_view key) const {
    return fingerprint_ != nullptr ? fingerprint_->Of(key) : HashOf(key);
  }
  // Whether the table keeps fingerprints, not keys: it cannot Save, and two keys with one
  // fingerprint share a state.
  bool fingerprinted() const { return fingerprint_ != nullptr; }

  // Asks the memory for what Decide on `key` will read, without waiting for it (a hint: it
  // changes nothing, and does nothing when the shard is busy). Stage 0 first, then, once that
  // has had time to arrive, stage 1 (see CompactMap::Prefetch).
  virtual void Prefetch(HashedKey key, int stage) = 0;

  // What Decide did: decided (`out` holds the decision); refused a new key, the store being
  // full with no reset key found to drop (MakeRoomHeld), nothing changed; or found the table
  // retired, nothing changed (look the limit up again).
  enum class Outcome { kDecided, kFull, kRetired };
  // Decides under the shard's lock. The key and its hash come apart, and `others` last, so
  // that every argument the hot path reads travels in a register.
  virtual Outcome Decide(std::string_view key, size_t hash, int64_t cost, Timestamp now,
                         Decision& out, Others others) = 0;
  // DecideAll's steps: the caller holds ShardLock(ShardOf(key.hash)) for the whole of them.
  // kApply after MakeRoomHeld said yes for every new key of the request: a new key is
  // inserted even if others have filled the store since (all or nothing comes first).
  virtual Decision DecideHeld(HashedKey key, int64_t cost, Timestamp now, Mode mode) = 0;
  // Whether `key` is stored (kStored), or there is room for it beside `claimed` new keys of
  // the same request and shard index already given room (kMade, after dropping reset keys if
  // the store is full), or not (kNone, counted as a refusal). Lock held as above.
  enum class Room { kStored, kMade, kNone };
  virtual Room MakeRoomHeld(HashedKey key, Timestamp now, int64_t claimed, Others others) = 0;
  // Settles and resets (MemoryStore::SettleAllAsync, ResetAllAsync), lock held as above: the
  // state of `key` (empty when it is not stored); stores `state` for it, after MakeRoomHeld
  // said yes for a new key (REQUIRES: Storable(limit(), state)); forgets it.
  virtual std::optional<AnyState> StateHeld(HashedKey key) = 0;
  virtual void PutHeld(HashedKey key, const AnyState& state) = 0;
  virtual void EraseHeld(HashedKey key) = 0;
  virtual size_t KeyCount() = 0;

  // The lock of shard `index`, for those that take it from outside: DecideAll (for
  // ShardOf(key.hash)) and the search for reset keys across tables.
  virtual SpinLock& ShardLock(size_t index) = 0;
  // Drops one reset key among the next kFullSearch of shard `index`'s walk; whether it found
  // one. REQUIRES: the caller holds ShardLock(index).
  virtual bool ReclaimOne(size_t index, Timestamp now) = 0;

  // Snapshots: writes every key as (u8 1, u32 length, key, state); see src/memory/snapshot.h.
  // REQUIRES: !fingerprinted() (it has no key text to write; the store refuses first).
  virtual void Save(SnapshotWriter& w) = 0;
  // Stores `state` for `key`; false, storing nothing, when the table is retired.
  // REQUIRES: the state's alternative is this table's algorithm and Storable(limit(), state).
  virtual bool Put(std::string_view key, const AnyState& state) = 0;

  // Retiring. DropReset drops the keys that have reset by `now`, a shard at a time, and says
  // whether none is left (it stops at the first shard that keeps one). RetireIfEmpty takes
  // every shard lock (in address order, as DecideAll does) and, if no key is stored, marks
  // the table retired and calls `unpublish` (which takes it out of the registry) before it
  // lets go: whether it did. Callers are serialised (the store's registry lock).
  virtual bool DropReset(Timestamp now) = 0;
  virtual bool RetireIfEmpty(absl::FunctionRef<void()> unpublish) = 0;

 protected:
  void MarkRetired() { retired_.store(true, std::memory_order_relaxed); }

 private:
  const Limit limit_;
  Budget& budget_;  // The store's; outlives the table.
  const Timestamp created_;
  const Fingerprint* const fingerprint_;  // The store's; outlives the table.
  std::atomic<bool> retired_{false};
};

// Whether a table for `limit` can hold `state`: a compact table only what fits its 64 bits
// (a state written by this store always does; a crafted snapshot might not).
bool Storable(const Limit& limit, const AnyState& state);

// The table for `limit`, its keys counted against `budget` (which must outlive it), made by a
// request at `created`. With `compact_keys` (which must outlive it too), a gcra or leaky_bucket
// table whose TAT fits 64 bits keeps fingerprints under it instead of keys; other tables
// ignore it.
std::unique_ptr<Table> MakeTable(const Limit& limit, Budget& budget, Timestamp created,
                                 const Fingerprint* compact_keys = nullptr);

}  // namespace sluice::internal
