#pragma once

// Store: where the per-key state of the limits lives, and the only place a decision that
// changes state is made. MemoryStore (memory_store.h) keeps it in this process; a Redis store
// shares it across a fleet.
//
// Time authority: the caller passes `now`, read once per request (or per batch) from its
// Clock, so a server can read the clock once for many decisions. A store with its own time
// authority (Redis TIME) may document that it uses its own instead.
//
// Thread-safety: every Store implementation is safe to call from any number of threads.

#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/give_back.h"
#include "sluice/limit.h"
#include "sluice/settle.h"

namespace sluice {

// Quota leasing (docs/redis.md, "Quota leasing (shares)"): a store shared by a fleet may let
// a server that sees a key often take up to `max` units of its quota in one call, admit from
// them locally for at most `ttl` (and never past the limit's window), and give back what it
// did not use. The fleet never admits more than the limit; it may admit less, by what servers
// hold unused. RedisStore leases when its options allow it; other stores ignore the policy.
struct SharePolicy {
  int64_t max = 0;  // The most units one share holds: 1 to kMaxShare (1: never leased).
  Micros ttl{0};    // How long a share lives: kMinShareTtl to kMaxShareTtl.
  friend bool operator==(const SharePolicy&, const SharePolicy&) = default;
};

inline constexpr int64_t kMaxShare = 1'000'000;
inline constexpr Micros kMinShareTtl = std::chrono::milliseconds(1);
inline constexpr Micros kMaxShareTtl = std::chrono::minutes(1);

// Whether `limit` may be leased under `policy`: OK, or InvalidArgument naming the problem (max
// or ttl out of range; sliding_log or sliding_buckets, whose charges cannot be given back).
absl::Status ValidateSharePolicy(const Limit& limit, const SharePolicy& policy);

// One limit applied to one key. All must outlive the call they are passed to.
struct LimitedKey {
  const Limit* limit = nullptr;
  std::string_view key = {};
  // Set: the key may be decided from a share under this policy (see SharePolicy), when it is
  // the request's only limit. Null: every decision is the store's own.
  const SharePolicy* share = nullptr;
  // The figures this limit had before, newest first: a rule whose limit a reload changed
  // (docs/algorithms.md, "A change of limit"). A key that holds no state under `limit` but
  // holds some under one of these is moved to `limit`, its state converted
  // (sluice/convert.h), before the call acts on it; a reset forgets it under these too. Empty:
  // the state is found by `limit` alone. Every store honours it on decisions and resets; a
  // settle or a give-back acts on the state under `limit` alone (on Memcached and Redis).
  // RedisStore copies the state rather than moving it, and never converts into a key that
  // exists (docs/redis.md, "Keys").
  std::span<const Limit> before = {};
};

// A concurrency limit on one key: at most `capacity` leases held there at once, as Stripe's
// concurrent-request limiter. A lease is named by an id its taker chooses, and is held until
// it is released or its time to live passes, so a taker that crashed frees its slot by itself.
struct LeasedKey {
  std::string_view key = {};
  int64_t capacity = 0;  // 1 to kMaxConcurrency; ignored by kRelease.
};

enum class LeaseOp : uint8_t {
  kQuery,    // How the keys stand for `id` (which may be empty); changes nothing.
  kTake,     // Takes lease `id` on every key until now + ttl, all or nothing. An id that already
             // holds a lease on a key is renewed there, whatever the capacity.
  kRelease,  // Gives lease `id` back on every key that holds it.
};

inline constexpr int64_t kMaxConcurrency = 10'000;
inline constexpr size_t kMaxLeaseIdBytes = 64;
inline constexpr Micros kMaxLeaseTtl = std::chrono::hours(24);

// The checks every Store makes before LeaseAll: OK, or InvalidArgument naming the problem (no
// keys, a key twice, a capacity or ttl out of range, an id empty, too long or with bytes
// outside printable ASCII).
absl::Status ValidateLeases(LeaseOp op, std::span<const LeasedKey> keys, std::string_view id,
                            Micros ttl);

// The checks every Store makes before SettleAll: OK, or InvalidArgument naming the problem
// (sizes that differ, no requests, a settlement ValidateSettlement refuses, a `once` too long
// or with bytes outside printable ASCII).
absl::Status ValidateSettleAll(size_t requests, std::span<const Settlement> settlements,
                               std::string_view once, size_t settled);

namespace internal {
absl::Status InvalidRequest(size_t limit_count, int64_t cost);  // ValidateRequest's slow path.
}  // namespace internal

// Receives the result of DecideAllAsync.
using DecideDone = absl::AnyInvocable<void(absl::StatusOr<Decision>) &&>;
// Receives the result of SettleAllAsync and ResetAllAsync.
using StatusDone = absl::AnyInvocable<void(absl::Status) &&>;

// The longest a settle's `once` may be, in bytes of printable ASCII.
inline constexpr size_t kMaxOnceBytes = 64;

class Store {
 public:
  virtual ~Store() = default;

  // Decides a request of `cost` units on `key` under `limit` at `now`, and records it when
  // allowed. Errors: InvalidArgument for a negative cost; a store-specific error (Unavailable,
  // DeadlineExceeded) when the state cannot be reached.
  virtual absl::StatusOr<Decision> Decide(const Limit& limit, std::string_view key, int64_t cost,
                                          Timestamp now) = 0;

  // Decides one request of `cost` units against every entry of `requests`, all or nothing:
  // allowed only if every limit allows it, and then every limit records it; when any denies,
  // none records anything. Writes each limit's own decision to `each` (a limit that would
  // have allowed a denied request reports its figures as they stand, as a cost-0 query does)
  // and returns their Combine.
  // REQUIRES: each.size() == requests.size().
  // Errors: as Decide; InvalidArgument for an empty `requests`.
  virtual absl::StatusOr<Decision> DecideAll(std::span<const LimitedKey> requests, int64_t cost,
                                             Timestamp now, std::span<Decision> each) = 0;

  // DecideAll without waiting: calls `done` exactly once with what DecideAll would return.
  // `requests` is read before this returns; `each` must stay alive until `done` is called.
  // `done` may be called before this returns (the default, for stores that answer at once,
  // such as MemoryStore) or later from a thread of the store's (RedisStore), so it must be
  // quick and must not call back into the store synchronously.
  virtual void DecideAllAsync(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                              std::span<Decision> each, DecideDone done) {
    std::move(done)(DecideAll(requests, cost, now, each));
  }

  // Applies `op` to lease `id` on `keys` at `now` (see LeaseOp), and writes each key's figures
  // to `each`, returning their Combine:
  //   allowed      kTake, kQuery: `id` holds a lease there, or one is free; kRelease: `id`
  //                held one there (and has given it back).
  //   remaining    leases free after the call (0 for kRelease).
  //   reset_after  until the last lease held there expires; 0 when none is held.
  //   retry_after  0 when allowed; else until the earliest lease held expires (at least 1 us).
  //                A release may free a slot sooner.
  //   delay        0.
  // A lease is held while now < its expiry. REQUIRES: each.size() == keys.size().
  // Errors: InvalidArgument from ValidateLeases; as DecideAll when the state cannot be reached.
  virtual absl::StatusOr<Decision> LeaseAll(LeaseOp op, std::span<const LeasedKey> keys,
                                            std::string_view id, Micros ttl, Timestamp now,
                                            std::span<Decision> each) = 0;

  // LeaseAll without waiting, with DecideAllAsync's contract.
  virtual void LeaseAllAsync(LeaseOp op, std::span<const LeasedKey> keys, std::string_view id,
                             Micros ttl, Timestamp now, std::span<Decision> each, DecideDone done) {
    std::move(done)(LeaseAll(op, keys, id, ttl, now, each));
  }

  // --- After the decision: charges settled later (sluice/settle.h), and keys reset ---
  //
  // Each has the contract of DecideAllAsync for `done`. The defaults answer Unimplemented,
  // for stores that do not settle; every store of this library implements them.

  // DecideAll that also writes to `charges` what each limit charged, for a later SettleAll:
  // units 0 where nothing was (the request was denied, or its cost was 0), and where a
  // failure policy decided instead of the store (nothing in the store to give back then).
  // requests[i].share is ignored: a charge to settle is always the store's own.
  // REQUIRES: charges.size() == each.size() == requests.size().
  virtual void ChargeAllAsync(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                              std::span<Decision> each, std::span<Charge> charges, DecideDone done);

  // Settles a request that ChargeAll charged: applies settlements[i] to requests[i]'s key
  // (sluice/settle.h) and writes what it did to settled[i], in one call to the store where the
  // store can (one script call on a Redis server; a Cluster may need one per slot). When
  // `once` is not empty it is claimed first, fleet-wide on a shared store, until `once_until`:
  // a settle whose `once` is claimed already fails with AlreadyExists and changes nothing.
  // Errors: InvalidArgument for a settlement that ValidateSettlement refuses, sizes that
  // differ, or a `once` too long or outside printable ASCII; AlreadyExists as above; the
  // store's error when it cannot reach its state. After an error nothing was given back (the
  // units stay charged: the error can only admit less); an extra charge the store could not
  // make is made on the failure policy's own state where there is one (the `local` policy),
  // else it is lost, as the failure policy loses the charges it cannot make.
  // REQUIRES: settled.size() == settlements.size() == requests.size().
  virtual void SettleAllAsync(std::span<const LimitedKey> requests,
                              std::span<const Settlement> settlements, std::string_view once,
                              Timestamp once_until, Timestamp now, std::span<Settled> settled,
                              StatusDone done);

  // Forgets the state of every requests[i].key under its limit, fleet-wide on a shared store:
  // each then decides as a key never seen. Forgetting what is not there is OK.
  // Errors: InvalidArgument for no requests; the store's when it cannot reach its state
  // (then some keys may have been forgotten and others not).
  virtual void ResetAllAsync(std::span<const LimitedKey> requests, Timestamp now, StatusDone done);

  // The three above, waiting for the answer: for tests and tools, never for a thread that
  // serves requests.
  absl::StatusOr<Decision> ChargeAll(std::span<const LimitedKey> requests, int64_t cost,
                                     Timestamp now, std::span<Decision> each,
                                     std::span<Charge> charges);
  absl::Status SettleAll(std::span<const LimitedKey> requests,
                         std::span<const Settlement> settlements, std::string_view once,
                         Timestamp once_until, Timestamp now, std::span<Settled> settled);
  absl::Status ResetAll(std::span<const LimitedKey> requests, Timestamp now);

  // Whether this store can keep state for `limit`: OK, or InvalidArgument saying why not (a
  // backend may bound what its representation holds). A server calls it for every rule when it
  // loads its configuration; Decide and DecideAll refuse such a limit with the same error.
  virtual absl::Status CheckLimit(const Limit& limit) const = 0;

  // Whether this process holds state for `limit` that has not reset by `now`: what a server
  // asks before it gives the place of a limit a caller minted to another (a memory store's
  // table is freed only once it holds no such state). It may drop state that has reset, which
  // changes no decision. A store that keeps its state elsewhere answers for what it keeps here
  // (RedisStore and MemcachedStore: their local fallback stores). The default, for stores
  // that cannot tell, is true: keep it.
  virtual bool HoldsState(const Limit& limit, Timestamp now);
};

// The argument checks every Store makes before it decides: OK, or InvalidArgument naming the
// problem (a negative cost, no limits). Inline: it runs on every request.
inline absl::Status ValidateRequest(size_t limit_count, int64_t cost) {
  if (cost >= 0 && limit_count > 0) [[likely]] {
    return absl::OkStatus();
  }
  return internal::InvalidRequest(limit_count, cost);
}

}  // namespace sluice
