#pragma once

// DenyCache: denials that Redis gave, kept for as long as Redis itself must give them again,
// so that RedisStore answers a repeat from memory, without a script call
// (RedisStoreOptions::deny_cache_entries; docs/redis.md, "Denials answered locally").
//
// Why a denial can be repeated without asking. Redis denied cost c on (limit, key) at time T
// with retry_after R >= 1. A denied request changes no state, so the only things that can
// happen to the key until T + R are the passing of time and requests that Redis allows, which
// only consume. Per algorithm (docs/algorithms.md, src/core/algorithms.cc):
//   fixed_window     R ends the window; until then `count` only grows.
//   sliding_log,     R is when the first entry whose leaving frees enough for c leaves; until
//   sliding_buckets  then it and every newer one stay, and new ones only add.
//   sliding_window   R is the first instant the weighted count, evolved by time alone, lets c
//                    in; a request allowed meanwhile adds to cur, which weighs >= 0 later on.
//   token_bucket     the level refills by at most (t - T) x N, so it stays below c x P before
//   gcra, leaky      T + R (R = ceil((cP - L) / N)); allowed requests only lower it, and the
//                    backlog (gcra, leaky_bucket) alike only grows.
// So a request on (limit, key) with cost c' >= c at a time in [T, T + R) is denied by Redis,
// whatever the rest of the fleet does. A time before T (a caller's clock stepping back) is
// denied too: less time has freed less. Never-allowed denials (retry_after -1) are not kept.
//
// Whose clock. In production the cache reads a steady clock and an entry lasts from the
// moment the call was *made* (before it was sent, so before Redis decided) plus R: it ends no
// later than Redis's own denial, provided Redis's clock runs no faster than ours (a Redis
// clock stepped forward by X can end Redis's denial X sooner; max_ttl bounds that). Under
// RedisStoreOptions::use_caller_time (tests) the times are the callers' `now`: exact when the
// times Redis sees for a key do not go backwards.
//
// What can free units sooner than time, and what the cache does about it:
//   - leases (Store::LeaseAll) are another Redis key and another path: never cached;
//   - an operator deleting a key, a failover to a replica that missed some charges, and
//     give-backs (a charge given back: multi-slot requests on a cluster, quota leasing) by
//     *other* servers: this process cannot see them. A denial kept
//     here may then outlast Redis's: it errs only toward denying, never admits more than the
//     limit, and lasts at most max_ttl (an entry's life is min(R, max_ttl));
//   - give-backs by *this* process (RedisStore::GiveBackAll): Forget(limit, key) before it is
//     sent and when it is answered; a denial whose call was made before a Forget and answered
//     after it is not kept (the epoch in its DenyStamp), for Redis may have applied the
//     give-back after it.
// A charge (RedisStore::ChargeAll) is a decision that also reports what it charged: its
// denials are kept and answered alike, and one answered here charged nothing.
//
// The figures of an answer from memory. A request is answered here when at least one of its
// limits holds a fresh denial for a cost <= the request's, and every other limit holds a fresh
// entry too (the figures Redis gave for it beside a denial); otherwise Redis is asked.
//   allowed       exact (false), for the request and for each limit denied here.
//   retry_after   R minus the time since the call was made, >= 1 us: a lower bound of what
//                 Redis would answer (exact under the caller's time when nothing else was
//                 allowed on the key since, for the same cost).
//   reset_after   likewise counted down, >= 0: a lower bound, exact in the same case.
//   remaining     as Redis gave it (last known; for a denied limit, like Redis's own, < cost).
//   delay         0 for the request, as every denial.
//   never allowed a cost past a limit's capacity (burst, or N) gets retry_after -1 there, as
//                 from Redis: exact, whatever the state.
//   other limits  of a multi-limit request (those Redis did not deny): their figures as Redis
//                 last gave them (allowed true, reset_after and delay counted down): last
//                 known, not exact; Combine of all of them as the result, so the request's
//                 retry_after is a lower bound.
//
// Memory: at most `entries` entries (each a Limit, the key, and 64 bytes of figures, about
// 200 bytes plus the key in a hash map), in up to 16 shards of 64 entries or more (one for a
// small cache); a full shard drops what has expired, else the entry that would expire first
// (a scan of the shard, on the I/O thread, only when a denial arrives at a full shard).
//
// Thread-safe: Answer, Stamp and Forget from any thread, Record from the store's I/O
// thread; each shard has its own mutex, the counters are atomics.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/limit.h"
#include "sluice/store.h"
#include "src/core/mutex.h"

namespace sluice::internal {

// What a call carries from the moment it was made: the cache's time then, and its epoch.
struct DenyStamp {
  Timestamp at;
  uint64_t epoch = 0;
};

class DenyCache {
 public:
  // The most entries a cache may hold: at about 200 bytes each, 10^8 is 20 GB, surely a
  // mistake.
  static constexpr int64_t kMaxEntries = 100'000'000;
  // OK, or InvalidArgument naming the option (RedisStoreOptions::deny_cache_entries, ...).
  static absl::Status CheckOptions(int64_t entries, std::chrono::milliseconds max_ttl);
  // A cache of `entries`, or null for 0 (off). REQUIRES: CheckOptions(entries, max_ttl).ok().
  static std::unique_ptr<DenyCache> Create(int64_t entries, std::chrono::milliseconds max_ttl);

  // REQUIRES: entries >= 1, max_ttl >= 1 us.
  DenyCache(int64_t entries, Micros max_ttl);
  DenyCache(const DenyCache&) = delete;
  DenyCache& operator=(const DenyCache&) = delete;

  // The stamp of a call made at `now`.
  DenyStamp Stamp(Timestamp now) const;

  // The answer to `requests` at `now`, written to `each` with their Combine returned, when it
  // can be given from memory (see above); nullopt when Redis must be asked (`each` is then
  // unspecified). REQUIRES: each.size() == requests.size().
  std::optional<Decision> Answer(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                                 std::span<Decision> each);

  // Keeps what Redis answered (`each`, per limit `limits[i]` on `keys[i]`) to a request of
  // `cost` made at `stamp`, when it was a denial that can be repeated.
  void Record(std::span<const Limit> limits, std::span<const std::string> keys, int64_t cost,
              DenyStamp stamp, std::span<const Decision> each);

  // Drops what is known of `limit` on `key`, and refuses denials of calls made before now:
  // for a give-back, which can free units sooner than time.
  void Forget(const Limit& limit, std::string_view key);

  uint64_t answered() const { return answered_.load(std::memory_order_relaxed); }
  size_t size() const;  // Entries held now, fresh or not.

 private:
  struct Key {
    Limit limit;
    std::string key;
  };
  struct KeyRef {
    const Limit* limit;
    std::string_view key;
  };
  struct Hash {
    using is_transparent = void;
    size_t operator()(const Key& k) const;
    size_t operator()(const KeyRef& k) const;
  };
  struct Eq {
    using is_transparent = void;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return Ref(a).key == Ref(b).key && *Ref(a).limit == *Ref(b).limit;
    }
    static KeyRef Ref(const KeyRef& k) { return k; }
    static KeyRef Ref(const Key& k) { return {&k.limit, k.key}; }
  };
  struct Entry {
    Timestamp at;      // When the call Redis answered was made.
    Timestamp until;   // Trusted while now < until.
    int64_t cost = 0;  // The cost denied (for a denial).
    Decision figures;  // As Redis gave them: allowed false for a denial.
  };
  struct Shard {
    mutable Mutex mu;
    absl::flat_hash_map<Key, Entry, Hash, Eq> map ABSL_GUARDED_BY(mu);
  };

  Shard& ShardOf(size_t hash);
  // Puts `entry` at `key` in `shard`, making room if it is full; a known denial still fresh
  // at `entry.at` is not replaced by figures.
  void Put(Shard& shard, const KeyRef& key, const Entry& entry, uint64_t epoch);
  void MakeRoom(Shard& shard, Timestamp now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);

  const size_t per_shard_;
  const Micros max_ttl_;
  std::vector<Shard> shards_;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<uint64_t> answered_{0};
};

}  // namespace sluice::internal
