#pragma once

// Shares: the bookkeeping of quota leasing (docs/redis.md, "Quota leasing (shares)"), apart
// from any I/O so that it can be tested on a manual clock. The store asks it, per request on a
// leased key, whether a share answers it (Begin); sends to Redis what it says to (a call of
// `take` units: the request's own cost, or more to take a share); hands it Redis's answer
// (Taken); and gives back to Redis what it returns (expired, replaced or evicted shares).
//
// One entry per (limit, key) a leased request has named: the shares held there (at most two:
// the one in use and a refill taken when it ran low), what Redis last reported remaining, and
// the units this server asked for there lately (its rate). A share is sized from that rate
// (units over the last ttl), at most the policy's max, the limit's burst, and a quarter of
// what Redis last reported remaining (so that a few servers cannot take it all), and lives
// until its ttl passes or, for the windowed algorithms, its window ends, whichever is first.
//
// Time: the caller's. A share taken at `sent` ends at sent + its life, where the life is
// measured by Redis from a later instant (when Redis decided): it ends no later than Redis
// would end it. The store must pass the same clock's time to every call.
//
// Thread-safe: Begin from any thread, the rest from any thread too; each entry's shard is
// locked for a few map operations at a time.

#include <array>
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/give_back.h"
#include "sluice/limit.h"
#include "sluice/store.h"
#include "src/core/mutex.h"

namespace sluice::internal {

// What one (limit, key) is leased as: `id` names it (the store's Redis key), `key` is the
// caller's. Read during the call only.
struct ShareKey {
  std::string_view id;
  const Limit& limit;
  std::string_view key;
  const SharePolicy& policy;
};

// Unused units of a share, to be given back to Redis.
struct ShareReturn {
  Limit limit;
  std::string key;  // The caller's.
  int64_t units = 0;
  int64_t taken = 0;  // The units the share's call charged.
  Timestamp sent;     // When that call was made (the caller's time).
  // What the call charged (Redis's receipt), cut to the unused units: they are the charge's
  // last ones. Without a receipt nothing can be given back.
  std::optional<Charge> receipt;
};

struct ShareStats {
  uint64_t local = 0;           // Decisions answered from a share, without Redis.
  uint64_t taken = 0;           // Shares Redis granted.
  uint64_t denied = 0;          // Shares Redis refused (the request was then asked exactly).
  uint64_t units_returned = 0;  // Unused units handed back for a give-back.
  uint64_t units_lapsed = 0;    // Unused units whose window ended first (nothing to give back).
  uint64_t entries = 0;         // (limit, key) entries held now.
};

class Shares {
 public:
  // A server takes at most 1/kFraction of what Redis last reported remaining.
  static constexpr int64_t kFraction = 4;

  // Holds at most `capacity` entries (at least 16): beyond, the least recently used one is
  // evicted and its shares returned.
  explicit Shares(size_t capacity);
  Shares(const Shares&) = delete;
  Shares& operator=(const Shares&) = delete;

  // A request that waits for the share on its way: called with its decision from that share,
  // or nullopt to ask Redis at its own cost (the share was refused, failed or too small).
  using Waiter = absl::AnyInvocable<void(std::optional<Decision>) &&>;
  struct Ready {
    Waiter waiter;
    std::optional<Decision> decision;
  };
  // The most requests that wait on one entry; more are asked of Redis.
  static constexpr size_t kMaxWaiting = 1024;

  struct Plan {
    std::optional<Decision> local;  // Answered from a share.
    bool waiting = false;           // Given to the waiter `wait` made.
    int64_t take = 0;    // Not answered: ask Redis for this cost (>= the request's; more takes a
                         // share, of take - cost units).
    int64_t refill = 0;  // Answered, and the share runs low: take this many units in the
                         // background, as a request of cost 0 (0: no refill).
  };

  // A request of `cost` (>= 1) on `k` at `now`. Returns in `returns` the shares it finds
  // ended (or evicts). The caller reports the outcome of every call the plan asks for (Taken
  // or Failed, with its figures; a refill as a request of cost 0): a share in flight keeps the
  // entry from taking another until then.
  // When the entry has no units left and a share is on its way, the request waits for it,
  // rather than ask Redis, if `wait` makes a waiter (called under the entry's lock: it should
  // only wrap what the request needs; an empty one declines).
  Plan Begin(const ShareKey& k, int64_t cost, Timestamp now, std::vector<ShareReturn>& returns,
             absl::FunctionRef<Waiter()> wait);
  Plan Begin(const ShareKey& k, int64_t cost, Timestamp now, std::vector<ShareReturn>& returns) {
    return Begin(k, cost, now, returns, [] { return Waiter(); });
  }

  // Redis's answer to a call of `take` units made at `sent` for a request of `cost` (0 for a
  // refill), with what it charged (`receipt`, when allowed and known). Records a share of
  // take - cost units when allowed. Returns the request's decision; nullopt when a share was
  // refused (take > cost), and the request must be asked again at its own cost. The requests
  // that waited for the share go to `ready`, each with its answer, for the caller to call
  // after (never under a lock).
  std::optional<Decision> Taken(const ShareKey& k, int64_t cost, int64_t take, Timestamp sent,
                                const Decision& answer, const std::optional<Charge>& receipt,
                                std::vector<ShareReturn>& returns,
                                std::vector<Ready>* ready = nullptr);
  // The call Begin asked for got no answer from Redis (or the failure policy's); the requests
  // that waited for it go to `ready`, to be asked of Redis.
  void Failed(const ShareKey& k, int64_t cost, int64_t take, std::vector<Ready>* ready = nullptr);

  // Removes the shares whose ttl ends by `now` into `returns`. A share that ends with its
  // window is left for Begin to drop (there is nothing to give back), so that a `now` read
  // ahead of the callers' (a sweep's guess) never ends one early.
  void Expire(Timestamp now, std::vector<ShareReturn>& returns);
  // Removes every share into `returns` (what has lapsed by `now` is not returned).
  void Drain(Timestamp now, std::vector<ShareReturn>& returns);

  ShareStats Stats() const;
  // Whether any share is held that Expire will end.
  bool Holding() const { return holding_.load(std::memory_order_relaxed) > 0; }

 private:
  // Units taken by one call.
  struct Tranche {
    int64_t taken = 0;         // What the call charged (its cost).
    int64_t left = 0;          // Units not yet used.
    Timestamp sent;            // When the call was made.
    Timestamp ends;            // When the share ends.
    bool window_ends = false;  // It ends with its window: nothing is given back then.
    Decision answer;           // Redis's answer to the call.
    std::optional<Charge> receipt;
  };
  struct Entry {
    Limit limit;
    std::string key;
    SharePolicy policy;
    absl::InlinedVector<Tranche, 2> tranches;  // Oldest first.
    bool taking = false;                       // A call taking a share is in flight.
    struct Waiting {
      int64_t cost;
      Timestamp now;
      Waiter waiter;
    };
    std::vector<Waiting> waiting;  // For the share in flight, first come first.
    int64_t remaining = -1;        // What Redis last reported remaining; -1: unknown.
    Timestamp remaining_until;     // Until when that report stands.
    Timestamp rate_start;          // The rate: units asked for since rate_start,
    int64_t rate_units = 0;
    int64_t rate_last = 0;  // and over the ttl before it.
    std::list<Entry*>::iterator lru;
    std::optional<Timestamp> indexed;  // Its key in Shard::ending, if any.
    const std::string* id = nullptr;   // Its key in Shard::entries.
  };
  struct Shard {
    SpinLock mu;
    absl::node_hash_map<std::string, Entry> entries ABSL_GUARDED_BY(mu);
    std::list<Entry*> lru ABSL_GUARDED_BY(mu);  // Most recently used first.
    // Entries holding shares that end by their ttl, by the earliest such end.
    std::set<std::pair<Timestamp, Entry*>> ending ABSL_GUARDED_BY(mu);
  };
  static constexpr size_t kShards = 16;

  Shard& ShardOf(std::string_view id);
  // The entry for `k`, made (evicting another when full) if there is none; most recent now.
  Entry& Find(Shard& shard, const ShareKey& k, Timestamp now, std::vector<ShareReturn>& returns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // Which shares Retire removes: those that end by `now` (kEnded: `now` is a caller's),
  // those whose ttl ends by `now` (kTtl: the sweep's), or all (kAll).
  enum class Which : uint8_t { kEnded, kTtl, kAll };
  // Removes the entry's shares `which` says into `returns` (those whose window has ended by
  // `now` lapse, returning nothing).
  void Retire(Shard& shard, Entry& e, Timestamp now, Which which, std::vector<ShareReturn>& returns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  void Reindex(Shard& shard, Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  // The share size `e`'s rate asks for: at least `cost`, at most max, burst and what a
  // fraction of Redis's last remaining allows beyond `cost`.
  static int64_t Want(const Entry& e, int64_t cost, Timestamp now);
  // The decision of a request of `cost` answered from `t` at `now`; uses its units.
  static Decision Use(const Entry& e, Tranche& t, int64_t cost, Timestamp now);
  // Records what Redis's `answer` to a call at `sent` says remains.
  static void Learn(Entry& e, const Decision& answer, Timestamp sent);
  // Taken's step under the lock: the share recorded, the request's decision.
  std::optional<Decision> Record(Shard& s, Entry& e, int64_t cost, int64_t take, Timestamp sent,
                                 const Decision& answer, const std::optional<Charge>& receipt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Answers the requests waiting on `e` from its shares, or with nullopt, into `ready`.
  void Release(Entry& e, std::vector<Ready>* ready);

  const size_t per_shard_;
  std::array<Shard, kShards> shards_;
  std::atomic<uint64_t> local_{0};
  std::atomic<uint64_t> taken_{0};
  std::atomic<uint64_t> denied_{0};
  std::atomic<uint64_t> units_returned_{0};
  std::atomic<uint64_t> units_lapsed_{0};
  std::atomic<int64_t> entries_{0};
  std::atomic<int64_t> holding_{0};  // Entries in a Shard::ending.
};

}  // namespace sluice::internal
