#pragma once

// RedisStore: the Store a fleet shares. Every decision is one Lua script call in Redis
// (src/redis/decide.lua), atomic there, on Redis's own clock, so that any number of servers
// enforce one exact limit. The decisions equal MemoryStore's for the same (time, key, cost)
// sequence, figure for figure. (With deny_cache_entries, a repeat of a denial is answered from
// memory: the same decision, some figures bounds; see there.)
//
//   auto options = sluice::ParseRedisUrl("redis://127.0.0.1:6379");
//   auto store = sluice::RedisStore::Create(*options);
//   sluice::Limiter limiter(limit, **store, sluice::SystemClock());
//
// Time: the script reads Redis's TIME; the `now` a caller passes is used only by the `local`
// failure policy, to find a calendar quota's windows near it (the script is sent their bounds),
// and by tests (see RedisStoreOptions::use_caller_time).
//
// I/O: the store owns one thread running the connections. Calls from any thread are queued
// there; a call is sent at once on a connection with nothing in flight, and calls made while
// every connection has a script call in flight wait for a reply and are decided together by
// one script call (up to `batch` of them; a full batch goes out at once, up to `pipeline`
// script calls in flight on a connection): fewer round trips under load. Each call
// has a deadline; a connection that misses one is closed and reopened, with backoff; a call
// whose deadline passes while it waits is answered as timed out, not sent. A
// connection is TCP, a unix socket (unix://) or TLS over TCP (rediss://, RedisTlsOptions).
//
// Keys: each limit's state for a key is one Redis key, "<prefix><limit>:<key>", where <limit>
// names the algorithm and its parameters (so a changed limit starts afresh, as in MemoryStore)
// and <key> carries a Redis Cluster hash tag: the key's own {tag} if it has one, else the
// whole key in braces. So every limit on one key lives in one slot, decided all or nothing
// in one script call; keys tagged alike ("{alice}:ip", "{alice}:user") share a slot too.
//
// Redis Cluster (redis+cluster://): the slot map comes from CLUSTER SLOTS, asked of any node;
// each master has its own connections; a batch holds calls of one slot. MOVED updates the map
// (and asks for a fresh one), ASK sends the batch once to the importing node after ASKING,
// TRYAGAIN sends it again; a batch is given up after 5 redirections.
//
// A request over several slots (DecideAll on a user and an address, LeaseAll on two keys) is
// split into one script call per slot, each atomic, and decided slot by slot in ascending slot
// order: each slot is charged (or takes its leases) only once every slot before it has
// allowed; when a slot denies, the slots before it are given back (sluice/give_back.h; a
// take, by releasing its id there) and the slots after it are asked a dry run, before the
// request is answered. A request that charges nothing (cost 0, a query, a release) asks every
// slot at once. What a client can observe:
//   - Never more admitted than a limit allows: a charge is made only where it is checked, and
//     what a give-back returns was charged.
//   - Sequentially (no other request in flight), the same answer, figure for figure, as one
//     atomic call (MemoryStore's): a denied request leaves nothing charged; each limit
//     reports as DecideAll says (the denying one its denial, the others as a cost-0 query).
//   - Concurrently, a request in flight holds its charges on the earlier slots until its
//     later slots answer (a round trip each), so another request may be denied by a charge
//     that is then given back; never the reverse: no request is admitted because of one in
//     flight. The figures of one answer come from different instants, one per slot.
//   - A give-back that cannot reach its node (an error, the timeout) is not retried: its units
//     stay charged until their window or bucket lets them go (fewer admitted, never more),
//     counted by RedisStoreStats::give_backs_failed. (One that timed out after it was sent may
//     still be applied, late, by a node that wakes up.) A dry run that fails reports its limits as
//     the `allow` policy does (allowed, every figure 0: nothing is known); the request stays
//     denied.
//   - The failure policy applies to each slot's charge as to any call: under kDeny the
//     request fails with the error and the slots before it are given back; under kAllow the
//     failed slot counts as allowed, so the request is admitted if the other slots allow it;
//     under kLocal the failed slot is decided in the local store (and its charge there is not
//     given back after a later denial).
//   - Each call has its own timeout: a request over k slots answers within k + 2 timeouts (its
//     charges one after another, then its give-backs and dry runs all at once, and for leases
//     the query that follows a release).
//   - Leases: a take given back is a release of its id on the earlier slots. An id that
//     already held a lease there (a renewal) loses it: treat a renewal over several slots that
//     is denied as the lease lost (sluiced takes a fresh id each time and never renews).
//
// Thread-safe.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"

#include "sluice/failure_policy.h"
#include "sluice/give_back.h"
#include "sluice/memory_store.h"
#include "sluice/store.h"
#include "sluice/store_log.h"

namespace sluice {

// What the store tells an operator (RedisStoreOptions::log): a Redis server lost or refusing to
// decide (kWarning), and back (kInfo).
// (The shared store log's names, sluice/store_log.h, kept under Redis's names for callers.)
using RedisLogLevel = StoreLogLevel;
using RedisLogSink = StoreLogSink;

// Where one Redis server listens: a host and port, or a unix socket.
struct RedisEndpoint {
  std::string host = {};
  uint16_t port = 6379;
  std::string socket = {};  // A unix socket's path (unix://); host and port are then unused.
  friend bool operator==(const RedisEndpoint&, const RedisEndpoint&) = default;
};

// "host:port", "[::1]:port" or "unix:/path", for messages.
std::string RedisEndpointName(const RedisEndpoint& endpoint);

// TLS to Redis (rediss://), through OpenSSL. The files are read by RedisStore::Create, which
// refuses a file it cannot read or a key that does not match its certificate, naming the file.
struct RedisTlsOptions {
  bool enabled = false;        // rediss:// and rediss+cluster:// set it.
  std::string ca_file = {};    // PEM certificates that may sign the server's; empty: the system's.
  std::string cert_file = {};  // The client's certificate chain (PEM), for servers that ask for
  std::string key_file = {};   // one (tls-auth-clients); both or neither.
  // Whether the server's certificate must name the host connected to (its DNS name, or its IP
  // address for a numeric host). Off, the chain is still verified against ca_file: a server
  // whose certificate names another host is accepted, one signed by another CA is not.
  bool verify_hostname = true;
};

// Redis Sentinel (redis+sentinel://): the sentinels that watch a master, and the master's name.
// The store asks the sentinels in turn where the master is (SENTINEL get-master-addr-by-name),
// checks with ROLE that the server named is a master, and follows a failover: the sentinel it
// asked tells it (+switch-master), and it asks again when the master fails (connection lost,
// timeout, READONLY). The failure policy answers meanwhile.
struct RedisSentinelOptions {
  std::string master_name = {};               // Empty: no sentinel.
  std::vector<RedisEndpoint> endpoints = {};  // The sentinels (TCP), asked in this order.
  // The sentinels' own AUTH (sentinel_user=, sentinel_password= in the URL); empty for none.
  // RedisStoreOptions::user and password are the master's.
  std::string user = {};
  std::string password = {};
};

struct RedisStoreOptions {
  // Where Redis is: one server, or the seed nodes of a cluster; empty with a sentinel, which
  // names the master.
  std::vector<RedisEndpoint> endpoints = {};
  bool cluster = false;
  RedisSentinelOptions sentinel = {};
  std::string user = {};      // AUTH user (Redis 6 ACLs); empty for the default user.
  std::string password = {};  // AUTH password; empty for no AUTH.
  int database = 0;           // SELECT; 0 in a cluster.
  RedisTlsOptions tls = {};

  // Connections per Redis server, and script calls in flight on each (beyond the first, only
  // full batches).
  int connections = 2;
  int pipeline = 16;
  // The most requests one script call decides (1: a call each).
  int batch = 32;
  // How long a call may wait for Redis, from the moment it is made.
  std::chrono::milliseconds timeout{100};
  // Reconnection backoff: the first wait after a failure, doubled up to the maximum.
  std::chrono::milliseconds backoff_min{10};
  std::chrono::milliseconds backoff_max{250};

  // What a decision gets when Redis cannot decide it (sluice/failure_policy.h): when Redis
  // cannot be reached in time (a lost connection, a timeout) or answers that it cannot decide
  // now (OOM, READONLY, MASTERDOWN, LOADING, BUSY, CLUSTERDOWN, NOREPLICAS, MISCONF, NOAUTH,
  // NOPERM), to the whole script call or to a command the script runs (src/redis/errors.h
  // reads them). Any other error is the call's own (Internal: a key of another type, a script
  // error), which no policy decides.
  FailurePolicy on_failure = FailurePolicy::kDeny;
  // Hears, once per change and never per call, a Redis server lost with the reason (refused,
  // AUTH refused with Redis's error, a timeout, OOM or READONLY answered) and back; a change
  // repeated within 30 s is held back and counted, and the state is said once the 30 s have
  // passed (src/core/health_log.h). Called on the store's I/O thread: it must not block nor call
  // the store. Empty: nothing is said.
  RedisLogSink log = {};
  std::string key_prefix = "sluice:";
  // Added to every key's expiry beyond its reset_after.
  std::chrono::milliseconds expiry_margin{1000};

  // Denials answered locally: keep up to this many of the denials Redis gave, and deny a
  // repeat (the same limit and key, a cost at least as large) from memory, without a script
  // call, until the retry time Redis gave has passed: Redis would deny it too, for the rest of
  // a fleet can only consume more. 0 (the default) keeps none. At most max_ttl per denial:
  // the longest a denial can outlast Redis's when units are freed out of sight (another
  // server's give-back, a key deleted by hand). What is exact and what is a bound: docs/redis.md,
  // "Denials answered locally".
  int64_t deny_cache_entries = 0;
  std::chrono::milliseconds deny_cache_max_ttl{1000};
  // Quota leasing (SharePolicy in store.h; docs/redis.md, "Quota leasing (shares)"). Off, every
  // decision asks Redis whatever the requests' policies. On, a request whose only limit has a
  // policy may be answered from a share of that limit's quota this store took from Redis, and
  // the share's unused units are given back when it ends. Shares are kept for at most
  // `share_keys` (limit, key) pairs (a few hundred bytes each); beyond, the least recently used
  // pair is forgotten and its share given back. A request answered from a share is allowed
  // with remaining = the units this store holds plus what Redis last reported remaining (an
  // estimate: other servers may have used some since), reset_after = the share's call's less
  // the time since, retry_after 0, and (leaky_bucket) the delay of the unit it uses; denials
  // always come from Redis. Requests of several limits and of cost 0 are never leased.
  bool shares = false;
  size_t share_keys = 100'000;

  // The bounds of the MemoryStore the `local` policy decides in (its keys and leases grow for
  // as long as an outage lasts): sluiced gives it --max-keys and --max-leases, the bounds its
  // memory store would have. Default: none.
  MemoryStoreOptions local = {};

  // For tests only: decide at the `now` the caller passes instead of Redis's TIME, so that a
  // test can replay a trace and compare with MemoryStore. Never in production: a fleet then
  // has as many clocks as servers.
  bool use_caller_time = false;
  // For tests only: the steady clock of the call path (each call's deadline, the deadline
  // timer's checks, the age of a connection's reading of Redis's TIME), which a test moves
  // ahead to put a call past its deadline or a reading past its age without waiting. The timer
  // itself still waits on std::chrono::steady_clock, so a clock moved ahead makes it fire late,
  // never early. Called on any thread. Empty: std::chrono::steady_clock.
  std::function<std::chrono::steady_clock::time_point()> steady_clock_for_testing = {};
};

// Reads
//   redis://[[user]:password@]host[:port][/db]
//   redis+cluster://[[user]:password@]host[:port][,host[:port]...]
//   unix://[[user]:password@]/path/to/redis.sock[?db=N]
//   redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/master-name[?query]
// with percent-escapes in the user and password; rediss:// and rediss+cluster:// are as
// redis:// and redis+cluster:// over TLS (options.tls.enabled; the files are options of their
// own). A sentinel URL lists the sentinels (port 26379 by default) and names the master; its
// user and password are the master's, and its query, "&"-separated, may hold db=N,
// sentinel_user=U and sentinel_password=P (the sentinels' AUTH, escaped as the user info is).
// rediss+sentinel:// reaches the sentinels and the master over TLS. InvalidArgument naming the
// part that is wrong.
absl::StatusOr<RedisStoreOptions> ParseRedisUrl(std::string_view url);

// The URL with the passwords (the user info's, a sentinel_password='s) replaced by "***", for
// logs.
std::string RedactRedisUrl(std::string_view url);

struct RedisStoreStats {
  // Calls asked of the store: decisions (those answered locally too), give-backs, settles,
  // resets, leases and share takes; a call split over Cluster slots counts once per slot.
  uint64_t calls = 0;
  uint64_t script_calls = 0;  // Script calls sent (fewer than calls when batched).
  uint64_t failures = 0;      // Decisions Redis did not answer (error, timeout, no connection).
  uint64_t fallbacks = 0;     // Failures decided by the failure policy (allow or local).
  uint64_t reconnects = 0;    // Connections opened after the first.
  uint64_t redirects = 0;     // Cluster: script calls sent again after MOVED, ASK, TRYAGAIN.
  uint64_t asks = 0;          // Of those, after ASK (a slot migrating).
  uint64_t denials_answered_locally = 0;  // Calls denied from the denial cache, no script call.
  // Sentinel: times the master moved (a sentinel named another server than the one in use).
  uint64_t master_switches = 0;
  uint64_t split_requests = 0;     // Cluster: requests over several slots, decided slot by slot
                                   // (each slot's call also counts in `calls`).
  uint64_t give_backs = 0;         // Slots given back after a later slot denied or failed.
  uint64_t give_backs_failed = 0;  // Of those, not reached: their units stay charged.
  // Extra units that settles (SettleAll) could not charge: Redis (or one cluster slot of
  // several) not reached or refusing, and no `local` policy to charge them instead.
  uint64_t settle_units_lost = 0;
  int connections_ready = 0;  // Connections up now.
  // Redis servers lost now, as the store last saw them (no call is made to find out; a health
  // probe may read them): those whose connections fail (back once one connects), and those
  // that answered that they cannot decide (OOM, READONLY, ...; back once one decides a call).
  // At once, where RedisStoreOptions::log hears a change repeated within 30 s later.
  int servers_lost = 0;
  int servers_refusing = 0;
  // Quota leasing (RedisStoreOptions::shares). `calls` counts decisions answered from shares
  // and the calls that take or give back shares as well.
  uint64_t share_decisions = 0;       // Decisions answered from a share, without Redis.
  uint64_t shares_taken = 0;          // Shares Redis granted.
  uint64_t shares_refused = 0;        // Shares Redis refused (the request was asked exactly).
  uint64_t share_units_returned = 0;  // Unused units given back when a share ended.
  uint64_t share_units_lapsed = 0;    // Unused units whose window ended with the share.
  MemoryStoreStats local;             // The `local` policy's store (RedisStoreOptions::local).
};

class RedisStore final : public Store {
 public:
  // Starts the I/O thread and begins connecting; does not wait for Redis (calls made before a
  // connection is up wait for it within their timeout). InvalidArgument for bad options,
  // naming a TLS file that cannot be read or does not hold what it should.
  static absl::StatusOr<std::unique_ptr<RedisStore>> Create(RedisStoreOptions options);
  ~RedisStore() override;  // Fails the calls still waiting (Cancelled) and joins the thread.
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  absl::StatusOr<Decision> Decide(const Limit& limit, std::string_view key, int64_t cost,
                                  Timestamp now) override;
  absl::StatusOr<Decision> DecideAll(std::span<const LimitedKey> requests, int64_t cost,
                                     Timestamp now, std::span<Decision> each) override;
  void DecideAllAsync(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                      std::span<Decision> each, DecideDone done) override;
  // Charges and give-backs (sluice/give_back.h), for a caller that decides a request in
  // several calls and may have to undo the earlier ones, or settles it later. ChargeAll
  // (Store's) is DecideAll that also writes to `charges` what each limit charged, in Redis's
  // time (units 0 when the request was denied, or decided by the failure policy: nothing in
  // Redis to give back then); never from a quota share. Over several cluster slots it is
  // decided slot by slot as DecideAll is. GiveBackAll gives `charges` back, one per request,
  // then writes to `each` what a cost-0 query answers; the failure policy does not apply to it
  // (a give-back that cannot reach Redis fails with its error, and the units stay charged:
  // fewer admitted, never more); its limits must share a slot.
  // REQUIRES: each.size() == charges.size() == requests.size().
  void ChargeAllAsync(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                      std::span<Decision> each, std::span<Charge> charges,
                      DecideDone done) override;
  absl::StatusOr<Decision> GiveBackAll(std::span<const LimitedKey> requests,
                                       std::span<const Charge> charges, Timestamp now,
                                       std::span<Decision> each);
  void GiveBackAllAsync(std::span<const LimitedKey> requests, std::span<const Charge> charges,
                        Timestamp now, std::span<Decision> each, DecideDone done);

  // Settles (Store::SettleAllAsync, sluice/settle.h): one script call (src/redis/settle.lua)
  // per cluster slot, one in all elsewhere. A `once` is claimed first, in Redis's clock:
  // "<prefix>once:{<tag>}:<once>" set NX until `once_until` (plus expiry_margin), in the slot
  // of the first limit, with that slot's call; the other slots are called once it succeeded.
  // Errors beyond Store's: InvalidArgument for a settle whose max_debt takes a bucket's
  // (burst + max_debt) x P' past 2^52 (the script's doubles), or a charge whose figures this
  // store cannot have made; AlreadyExists ("receipt was settled already"). When Redis cannot
  // be reached, nothing is given back and the error is answered; with the `local` policy the
  // extra charges are made in the local store, and `settled[i].charged` says so (else they are
  // lost: RedisStoreStats::settle_units_lost). A later slot that fails after the first settled
  // answers its error with the earlier slots' work done: see docs/redis.md, "Settles".
  void SettleAllAsync(std::span<const LimitedKey> requests, std::span<const Settlement> settlements,
                      std::string_view once, Timestamp once_until, Timestamp now,
                      std::span<Settled> settled, StatusDone done) override;
  // Deletes the limits' keys (one call per slot) and forgets them in the denial cache and, under
  // the `local` policy, in the local store.
  void ResetAllAsync(std::span<const LimitedKey> requests, Timestamp now, StatusDone done) override;

  // Leases: one sorted set per key ("<prefix>lease:<key>", tagged as above), its members the
  // lease ids, scored by expiry, decided by the same script (so batched and routed alike).
  absl::StatusOr<Decision> LeaseAll(LeaseOp op, std::span<const LeasedKey> keys,
                                    std::string_view id, Micros ttl, Timestamp now,
                                    std::span<Decision> each) override;
  void LeaseAllAsync(LeaseOp op, std::span<const LeasedKey> keys, std::string_view id, Micros ttl,
                     Timestamp now, std::span<Decision> each, DecideDone done) override;
  // Refuses what the script cannot decide exactly in doubles: token_bucket, gcra and
  // leaky_bucket with B x P' above 2^52 (P' the period in the rate's lowest terms), and the
  // memory store's own bounds (sliding_log above 10,000; sliding_buckets above 10,000
  // buckets, for one script call reads them all).
  absl::Status CheckLimit(const Limit& limit) const override;
  // What the `local` policy's store holds of `limit` (Redis's state is Redis's).
  bool HoldsState(const Limit& limit, Timestamp now) override;
  // CheckLimit without a store (nor a connection): what `sluiced --check-config` asks.
  static absl::Status Supports(const Limit& limit);

  RedisStoreStats Stats() const;

  // A record the servers of a fleet share, the hash "<key_prefix><name>": ReadRecord answers
  // its fields, WriteRecord sets `fields` in it. sluiced keeps there the figures each limit had
  // (so that a server restarted with changed rules carries what keys used, as one reloaded
  // does). Each blocks until Redis answers, or fails as a decision would (Unavailable after the
  // timeout; no failure policy applies). InvalidArgument for a name that is empty or holds '{'
  // or '}'.
  using Record = std::vector<std::pair<std::string, std::string>>;
  absl::StatusOr<Record> ReadRecord(std::string_view name);
  absl::Status WriteRecord(std::string_view name,
                           std::span<const std::pair<std::string, std::string>> fields);

  // The Redis key holding `limit`'s state for `key` (tests look at it; operators find it).
  std::string RedisKey(const Limit& limit, std::string_view key) const;
  // The Redis key holding `key`'s leases.
  std::string LeaseKey(std::string_view key) const;

  // The Lua script, as sent to SCRIPT LOAD (benchmarks run it with redis-benchmark).
  static std::string_view Script();

 private:
  class Impl;
  explicit RedisStore(std::unique_ptr<Impl> impl);
  absl::Status CheckRequest(std::span<const LimitedKey> requests, int64_t cost) const;
  static absl::Status CheckSettlements(std::span<const LimitedKey> requests,
                                       std::span<const Settlement> settlements);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
