#pragma once

// MemoryStore: the embedded, in-process Store. Each distinct Limit gets its own table of
// per-key states, split into shards that each have their own lock, so threads deciding on
// different keys rarely meet and there is no global lock. A key takes memory only once a
// request on it has been admitted: denied requests and cost-0 queries never create a key.
//
// Thread-safe. Decisions are exact: two threads racing on one key are serialised by the
// key's shard lock.

#include <cstddef>
#include <memory>
#include <string>

#include "sluice/store.h"

namespace sluice {

struct MemoryStoreOptions {
  // The most keys the store holds, over all its limits; 0 for no bound. A new key that would
  // go past it first makes room, or is refused: see "Bounded memory" in MemoryStore's comment.
  size_t max_keys = 0;
  // The most leases (LeaseAll) the store holds, over all keys; 0 for no bound. A take that
  // would go past it, once expired leases are swept, is refused with ResourceExhausted.
  size_t max_leases = 0;
  // Compact keys: gcra and leaky_bucket tables (whose TAT fits 64 bits, as it does for every
  // limit up to some 10^6 per microsecond) keep a 64-bit fingerprint of each key instead of
  // its text, beside the 8-byte TAT: 16 bytes a slot, 19 to 22 bytes a key in all (against
  // 40 to 48 with keys kept, and the key's own bytes past 23). Other algorithms keep keys.
  // The fingerprint is SipHash-2-4 under a secret drawn for this store, so keys that share
  // one cannot be crafted; they meet by chance only (about 3 in 10^8 that any two of a million
  // keys of one limit do). Two keys that share a fingerprint share one state: each is charged
  // for the other's admissions, so either may be denied sooner (or, leaky_bucket, delayed
  // longer) than its limit says, but
  // neither is ever admitted past its own limit (what one state admits conforms to the limit,
  // and so does any part of it). The price besides that chance:
  //   - SaveSnapshot and LoadSnapshot are refused (FailedPrecondition): a snapshot has no key
  //     text to write, and fingerprints are worthless to another store, whose secret differs
  //     (writing the secret to the file would give it to whoever reads the file).
  //   - DecideAll refuses (InvalidArgument, as for a key named twice) a request that names
  //     two keys of one limit that share a fingerprint: one state cannot be charged twice all
  //     or nothing.
  // Eviction, max_keys and the retiring of idle limits work as without it.
  bool compact_keys = false;
  // The secret of compact keys' fingerprints; 0 (the default) draws one at random. A fixed one
  // is for tests that compare two stores: whoever knows it can craft keys that share a state.
  uint64_t compact_keys_secret_for_testing = 0;
  // The most live `once` claims of settles (SettleAllAsync) the store keeps; 0 for the default,
  // 1,000,000 (src/memory/once_claims.h says why). When that many are live a settle with a
  // `once` is refused (ResourceExhausted) and changes nothing.
  size_t max_once_claims = 0;
};

// One request of a batch (MemoryStore::DecideBatch): a key and its cost.
struct KeyCost {
  std::string_view key;
  int64_t cost = 1;
};

struct MemoryStoreStats {
  size_t keys = 0;              // Keys holding state now.
  uint64_t reclaimed = 0;       // Keys dropped because their state had fully reset.
  uint64_t refused = 0;         // New keys refused (ResourceExhausted): full, no reset key found.
  size_t leases = 0;            // Leases held now (some perhaps expired, not yet swept).
  uint64_t leases_refused = 0;  // Takes refused (ResourceExhausted): max_leases held.
  size_t limits = 0;            // Distinct limits with a table now.
  uint64_t limits_retired = 0;  // Tables freed because every key of theirs had reset.
};

// Bounded memory. A key whose state has fully reset decides as a new key does, so the store may
// drop it; a key whose state has not is never dropped, whatever floods the store, since
// dropping it would hand its owner a fresh quota (a key over its limit would be admitted again
// at once). When a shard's table is past 80% full (most of the way to growing), each new key
// first looks at the next two keys of its shard (a cursor walks round each shard) and drops
// those that have reset: memory is reclaimed a little at a time, never in a sweep, and a table
// grows only when its keys still hold state. When the store holds max_keys, a new key looks at
// the next eight keys of its shard, dropping those that have reset, and then, if none had, at
// eight keys of the same shard of each of up to three other limits (the budget is the store's,
// not a limit's), dropping the first that has. If none has, the new key is not created and its
// request is refused with ResourceExhausted, "store full" (as Redis's noeviction answers OOM),
// counted in MemoryStoreStats::refused: under a flood of keys that outlast their periods the
// store serves the keys it holds exactly, and new ones again as the flood's keys reset. The
// request is refused whole (DecideAll: nothing is charged). The bound is kept per shard index,
// max_keys / 64 each (rounded up); it may be passed by the keys of a DecideAll whose room was
// made while other threads filled the same stripe (one request's keys at most per thread).
class MemoryStore final : public Store {
 public:
  // The number of distinct Limits one store holds tables for at once. Rules and ad-hoc limits
  // reuse tables, so this bounds only variety. A table none of whose keys holds state any
  // more (all have reset, or it never had one) is freed, at the earliest a period (and 1 s)
  // after it was made: each new table looks at two others for that, and when kMaxLimits are
  // held, at all of them; a new limit is refused with ResourceExhausted only when none can go.
  // Freeing a table changes no decision: the keys it held decided as new keys do.
  static constexpr size_t kMaxLimits = 4096;

  // The times the store decides at: from the Unix epoch to 2200-01-01. Within them every
  // compact state provably fits its 64 bits; a time outside is refused with InvalidArgument.
  static constexpr Timestamp kEarliest{Micros{0}};
  static constexpr Timestamp kLatest{Micros{7'258'118'400'000'000}};

  // The largest sliding_log limit accepted. Its state keeps an entry (16 bytes) per distinct
  // timestamp admitted within the period, up to the limit: at most 160 KB per key here. For
  // larger limits sliding_buckets gives a sliding window in K counters.
  static constexpr int64_t kMaxSlidingLogLimit = 10'000;

  explicit MemoryStore(MemoryStoreOptions options = {});
  ~MemoryStore() override;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  absl::StatusOr<Decision> Decide(const Limit& limit, std::string_view key, int64_t cost,
                                  Timestamp now) override;
  absl::StatusOr<Decision> DecideAll(std::span<const LimitedKey> requests, int64_t cost,
                                     Timestamp now, std::span<Decision> each) override;

  // Decides many requests under one limit at once, faster than as many Decide calls when the
  // keys are many (their states are not in the CPU's caches): it hashes the keys ahead and asks
  // the memory for their slots several requests before deciding them, so that the misses of
  // many keys overlap instead of following each other.
  // Contract: out[i] is what Decide(limit, requests[i].key, requests[i].cost, now) would return
  // if the calls were made one after the other in the order of `requests`: a key named twice
  // sees the charge of its earlier request, errors (a negative cost, a time out of range, the
  // store full) are those of Decide and concern only their own request. Other threads' calls
  // may fall between two requests of a batch, as between two Decide calls; each request is
  // decided under its shard's lock as Decide does.
  // The keys' bytes must live until it returns. When out.size() != requests.size(), every
  // place in `out` holds InvalidArgument and nothing is decided.
  void DecideBatch(const Limit& limit, std::span<const KeyCost> requests, Timestamp now,
                   std::span<absl::StatusOr<Decision>> out);
  // Leases are kept apart from the limits' state: they are bounded by max_leases, not
  // max_keys (a key holds at most kMaxConcurrency of them, and only until they expire), and
  // not saved in snapshots (a restart forgets them: until they would have expired, their
  // slots are free to others while their holders still run).
  absl::StatusOr<Decision> LeaseAll(LeaseOp op, std::span<const LeasedKey> keys,
                                    std::string_view id, Micros ttl, Timestamp now,
                                    std::span<Decision> each) override;
  // Settling (sluice/store.h), every call under the shard locks of its keys, as DecideAll's:
  //   ChargeAllAsync  DecideAll, and ChargeOf each limit's state after it;
  //   SettleAllAsync  Settle on each limit, all or nothing: a new key a charge past the limit
  //                   would create that finds the store full (ResourceExhausted) changes
  //                   nothing. A max_debt above what the store holds exactly for a limit
  //                   (MaxDebt in src/memory/compact_state.h: for sliding_log, N + max_debt
  //                   up to kMaxSlidingLogLimit) is refused with InvalidArgument. `once` is
  //                   claimed in this store until once_until (at most max_once_claims live);
  //   ResetAllAsync   forgets the keys.
  // Each calls `done` before it returns.
  void ChargeAllAsync(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                      std::span<Decision> each, std::span<Charge> charges,
                      DecideDone done) override;
  void SettleAllAsync(std::span<const LimitedKey> requests, std::span<const Settlement> settlements,
                      std::string_view once, Timestamp once_until, Timestamp now,
                      std::span<Settled> settled, StatusDone done) override;
  void ResetAllAsync(std::span<const LimitedKey> requests, Timestamp now, StatusDone done) override;
  // The `once` claims held now (some perhaps expired, not yet dropped).
  size_t OnceClaimCount() const;

  absl::Status CheckLimit(const Limit& limit) const override;
  // Whether `limit`'s table holds a key that has not reset by `now`, dropping those that have
  // (it looks at the table's shards in turn, up to the first that keeps a key).
  bool HoldsState(const Limit& limit, Timestamp now) override;
  // CheckLimit without a store: what `sluiced --check-config` asks.
  static absl::Status Supports(const Limit& limit);

  // The number of keys holding state, over all limits. Takes every shard lock in turn.
  size_t KeyCount() const;
  // The number of keys holding leases (some perhaps expired, not yet swept).
  size_t LeasedKeyCount() const;

  // Counters for monitoring; keys as KeyCount() but without taking locks.
  MemoryStoreStats Stats() const;

  // Writes the state of every key to `path` atomically: a temporary file beside it, fsync'd,
  // then renamed (and the directory fsync'd), so a crash leaves the previous snapshot or this
  // one whole. Concurrent saves to one path are safe: the last to finish wins. Each key's state
  // is consistent; keys in different shards are read one shard lock at a time, so traffic may
  // go on. Errors: Unavailable naming the path and the step that failed;
  // FailedPrecondition with compact_keys (see MemoryStoreOptions).
  absl::Status SaveSnapshot(const std::string& path) const;

  // Loads a snapshot written by SaveSnapshot into this store (a loaded key replaces the one
  // here), dropping every key whose state has fully reset by `now`: it would decide as a new
  // key does. Loading is not bounded by max_keys: if the file holds more, new keys take the
  // places of loaded ones only as those reset (or are refused until then). Returns the number of
  // keys loaded. Errors, after which no key is loaded: NotFound when there is no file; Unavailable
  // naming it when it cannot be read (not a regular file, no permission); DataLoss naming the file
  // when it is empty, truncated, not a snapshot, or its checksum or contents are wrong;
  // ResourceExhausted as Decide; FailedPrecondition with compact_keys.
  absl::StatusOr<size_t> LoadSnapshot(const std::string& path, Timestamp now);

 private:
  class Tables;
  std::unique_ptr<Tables> tables_;
};

}  // namespace sluice
