#pragma once

// MemcachedStore: a Store a fleet shares through Memcached (through Debian's libmemcached, the
// awesomized fork: ketama hashing, timeouts, failed-server handling). Its decisions equal
// MemoryStore's for the same (time, key, cost) sequence, figure for figure, for every
// algorithm: each limit's state for a key is one Memcached item holding the state in the
// memory store's own compact encoding (src/memory/snapshot.h), and a decision reads it (gets),
// runs the same algorithm code on it here (sluice/algorithms.h), and writes it back only if
// nobody wrote it meanwhile (cas; add for a new key). A denied request and a cost-0 query
// write nothing.
//
//   auto options = sluice::ParseMemcachedUrl("memcached://10.0.0.1:11211,10.0.0.2:11211");
//   auto store = sluice::MemcachedStore::Create(*options);
//
// Time: Memcached has no clock to offer, so decisions are made at the `now` the caller passes.
// Every server of a fleet must therefore read clocks that agree (NTP): a server whose clock is
// ahead by d moves every window it touches forward by d (it sees windows end early and buckets
// refill early, and the next servers see "time running backwards", which the algorithms read
// as no time passed). Skew lets a fleet admit, at a window's edge, up to what the spec admits
// over a window d longer; it never corrupts a state.
//
// Contention: a write that finds the item changed since it was read (another server won the
// cas) reads and decides again, at most `cas_retries` times and within the call's timeout;
// past that the call fails with ResourceExhausted ("contention", naming the limit and key).
// That is no outage (the servers answered every time), so no failure policy applies: under
// `allow` a hot key lost to contention would otherwise be admitted uncharged, more often the
// busier it is. Nothing is ever admitted without a successful
// write of the state that admits it. One writer wins each round, so a hot key progresses; a
// caller may lose several rounds in a row when many write one key at once, so each retry
// first waits a random 0 to 10 us x 2^retry (at most 640 us), and none starts once the call's
// timeout has passed (DeadlineExceeded, also for the policy).
//
// Several limits in one request (DecideAll): their items may live on different servers and
// Memcached has no multi-key transaction. Each limit is first read and decided without
// writing (a dry run): when any denies, nothing is written and the answer is exact. When all
// allow, they are charged one after another, each by its own gets/cas loop; if a later one
// denies by then (another server's request came between) or fails, the earlier charges are
// given back (sluice/give_back.h, in their own gets/cas loops) and the request is denied (or
// decided by the failure policy). What a client can observe:
//   - Never more admitted than a limit allows: a charge is made only where it is checked.
//   - Sequentially, the same answer as MemoryStore's DecideAll, figure for figure.
//   - Concurrently, a request in flight may hold charges that are then given back, so another
//     request may be denied by them; never the reverse.
//   - A give-back that cannot be written (an error, its retries exhausted) leaves its units
//     charged until their window or bucket lets them go: fewer admitted, never more; counted
//     by MemcachedStoreStats::give_backs_failed.
//
// Expiry: every item is written with an exptime of its state's reset_after plus
// expiry_margin, in whole seconds (at least 1), so that Memcached drops a key once it has
// fully reset; a horizon past Memcached's 30 days of relative exptime is written with no
// expiry (exptime 0). Memcached may also evict an item early when it runs out of
// memory (LRU): that key then starts afresh, a fresh quota. Size the servers so that they do
// not evict (stats evictions), or run them with -M (refuse writes instead of evicting: the
// failure policy then decides).
//
// Servers: keys are spread over the servers by ketama consistent hashing (adding a server
// moves about 1/n of the keys). A server that fails is not ejected from the ring: its keys
// are decided by the failure policy while it is down (retried every `retry_after_failure`),
// so that they never move to a server that does not hold their state (which would hand every
// key a fresh quota); the other servers' keys are decided as before. A restarted server has
// lost its items: its keys start afresh.
//
// Threads: Memcached I/O through libmemcached blocks, so the store owns `threads` threads,
// each with its own connections (a memcached_st cloned from one set up by Create).
// DecideAllAsync queues the call there and calls `done` from one of them; DecideAll and
// Decide run the call on the caller's thread with a connection set of the store's pool.
//
// Settles (Store::ChargeAllAsync, SettleAllAsync, ResetAllAsync; sluice/settle.h):
//   - ChargeAllAsync is DecideAllAsync that also says what each limit charged (units 0 when
//     denied, for cost 0, and when the failure policy decided: nothing in Memcached then).
//   - SettleAllAsync first claims its `once`, when there is one, with an `add` of the item
//     "<prefix>once:<once>" (src/memcached/keys.h) expiring at once_until (plus
//     expiry_margin, in whole seconds: relative up to 30 days, else a Unix time), so that the
//     claim is fleet-wide: an `add` that finds the item answers AlreadyExists ("receipt was
//     settled already") and changes nothing. It then reads every limit's item, and settles
//     each in turn in its own gets/cas loop (sluice::Settle on the decoded state). Memcached
//     has no multi-key transaction, so a settle over several limits is not all or nothing
//     once the claim is made: a read that fails takes the claim back (delete, so the settle
//     can be tried again: nothing was written) and changes nothing; a limit whose settle
//     fails after that (unreachable, timed out, its cas retries exhausted) keeps its units
//     charged (fewer admitted, never more) while the other limits are settled, the claim
//     stays (a replay would give back twice elsewhere), and the call answers the first error.
//     A max_debt past what the memory store's encoding holds (MemoryStore's bound) is
//     InvalidArgument, as there: an item in debt must decode.
//   - The failure policy's direction: a give-back Memcached cannot make is an error and gives
//     nothing back (never admits more); an extra charge it cannot make goes to the `local`
//     policy's store when that policy is on (which then denies more while the outage
//     lasts), else it is lost (MemcachedStoreStats::settle_units_lost). No policy turns a
//     failed settle into a success.
//   - ResetAllAsync deletes every limit's item (a missing one is fine) and forgets what the
//     `local` policy's store holds of them; a delete that fails answers its error, the other
//     items deleted.
//
// Leases (LeaseAll) are not implemented: Unimplemented, naming the store.
//
// Thread-safe.

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "sluice/failure_policy.h"
#include "sluice/memory_store.h"
#include "sluice/store.h"
#include "sluice/store_log.h"

namespace sluice {

struct MemcachedEndpoint {
  std::string host = {};
  uint16_t port = 11211;
  friend bool operator==(const MemcachedEndpoint&, const MemcachedEndpoint&) = default;
};

struct MemcachedStoreOptions {
  std::vector<MemcachedEndpoint> servers = {};  // At least one.
  // Threads that run DecideAllAsync's calls (each blocks while Memcached answers).
  int threads = 4;
  // How long one Memcached operation (connect, gets, cas) may take; also the call's deadline
  // for starting a cas retry (past it, DeadlineExceeded). A decision makes a gets and a cas
  // per limit, so one limit's answers within about twice the timeout.
  std::chrono::milliseconds timeout{100};
  // How long a server that failed is left alone before it is tried again.
  std::chrono::milliseconds retry_after_failure{1000};
  // gets/cas rounds one limit may lose to other writers before the call fails
  // (ResourceExhausted, which no failure policy decides).
  int cas_retries = 32;
  // When the servers cannot decide: a failed connection, a timeout, a server marked failed,
  // Memcached refusing a write (out of memory with -M). Not contention (see above). Any other
  // error (an item that does not hold a sluice state) is the call's own.
  FailurePolicy on_failure = FailurePolicy::kDeny;
  // Hears a server lost (refused, lost, timed out; out of memory under -M: kWarning) and back
  // (kInfo), as the store's calls find them: once per change, never per call; a change
  // repeated within 30 s is held back and counted (src/core/health_log.h, shared with Redis).
  // Called on the store's threads: it must not block nor call the store. Empty: nothing said.
  StoreLogSink log = {};
  std::string key_prefix = "sluice:";
  // Added to every item's expiry beyond its reset_after (and rounded up to whole seconds); at
  // least 1 s, for Memcached's clock ticks in whole seconds and may stand one behind.
  std::chrono::milliseconds expiry_margin{1000};
  // The bounds of the MemoryStore the `local` policy decides in.
  MemoryStoreOptions local = {};
};

// Reads memcached://host[:port][,host[:port]...] (port 11211 by default; an IPv6 host in
// brackets). InvalidArgument naming the part that is wrong.
absl::StatusOr<MemcachedStoreOptions> ParseMemcachedUrl(std::string_view url);

struct MemcachedStoreStats {
  int servers = 0;  // Servers in the ring.
  // Servers lost now, as the store's last call to each found it (no call is made to find out;
  // a health probe may read them): those whose operations fail (refused, lost, timed out),
  // and those that answered that they cannot store (out of memory under -M). Each is back once
  // an operation on it is answered.
  int servers_lost = 0;
  int servers_refusing = 0;
  uint64_t calls = 0;              // Decisions (and settles, resets) asked of the store.
  uint64_t failures = 0;           // Of those, the ones Memcached did not answer (error, timeout).
  uint64_t fallbacks = 0;          // Failures decided by the failure policy (allow or local).
  uint64_t cas_conflicts = 0;      // Writes that found their item changed, and retried.
  uint64_t cas_exhausted = 0;      // Calls that lost cas_retries rounds in a row.
  uint64_t give_backs = 0;         // Charges given back after a later limit denied or failed.
  uint64_t give_backs_failed = 0;  // Of those, not written: their units stay charged.
  // Extra units settles should have charged and could not (Memcached unreachable, and no
  // `local` policy to charge them to): lost, as the failure policy loses what it admits.
  uint64_t settle_units_lost = 0;
  MemoryStoreStats local;  // The `local` policy's store.
};

class MemcachedStore final : public Store {
 public:
  // The sizes of state an item holds (Memcached's items are at most 1 MB by default):
  // sliding_log of at most MemoryStore::kMaxSlidingLogLimit and sliding_buckets of at most
  // kMaxBuckets buckets; CheckLimit refuses larger ones.
  static constexpr int64_t kMaxBuckets = 10'000;
  // Why LeaseAll is Unimplemented; sluiced refuses a rules file with a concurrency rule with it.
  static constexpr const char* kNoLeases =
      "the Memcached store keeps no leases (concurrency limits): use the memory or Redis store";

  // Sets up the connections (which open on first use) and starts the threads. Does not wait
  // for Memcached. InvalidArgument for bad options (no server, a bad prefix, a count out of
  // range).
  static absl::StatusOr<std::unique_ptr<MemcachedStore>> Create(MemcachedStoreOptions options);
  ~MemcachedStore() override;  // Finishes the queued calls, then joins the threads.
  MemcachedStore(const MemcachedStore&) = delete;
  MemcachedStore& operator=(const MemcachedStore&) = delete;

  absl::StatusOr<Decision> Decide(const Limit& limit, std::string_view key, int64_t cost,
                                  Timestamp now) override;
  absl::StatusOr<Decision> DecideAll(std::span<const LimitedKey> requests, int64_t cost,
                                     Timestamp now, std::span<Decision> each) override;
  void DecideAllAsync(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                      std::span<Decision> each, DecideDone done) override;
  // Settles (see "Settles" above). Each runs on the store's threads, as DecideAllAsync.
  void ChargeAllAsync(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                      std::span<Decision> each, std::span<Charge> charges,
                      DecideDone done) override;
  void SettleAllAsync(std::span<const LimitedKey> requests, std::span<const Settlement> settlements,
                      std::string_view once, Timestamp once_until, Timestamp now,
                      std::span<Settled> settled, StatusDone done) override;
  void ResetAllAsync(std::span<const LimitedKey> requests, Timestamp now, StatusDone done) override;
  // Unimplemented: leases need a set of ids per key, which this store does not keep.
  absl::StatusOr<Decision> LeaseAll(LeaseOp op, std::span<const LeasedKey> keys,
                                    std::string_view id, Micros ttl, Timestamp now,
                                    std::span<Decision> each) override;
  // Refuses sliding_log above MemoryStore::kMaxSlidingLogLimit and sliding_buckets above
  // kMaxBuckets buckets.
  absl::Status CheckLimit(const Limit& limit) const override;
  // What the `local` policy's store holds of `limit` (Memcached's state is Memcached's).
  bool HoldsState(const Limit& limit, Timestamp now) override;
  // CheckLimit without a store: what `sluiced --check-config` asks.
  static absl::Status Supports(const Limit& limit);

  MemcachedStoreStats Stats() const;

  // The Memcached key holding `limit`'s state for `key` (tests look at it; operators find it).
  std::string ItemKey(const Limit& limit, std::string_view key) const;

 private:
  class Impl;
  explicit MemcachedStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
