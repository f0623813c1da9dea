#pragma once

// RedisStore::Impl, the engine behind RedisStore: one I/O thread, its io_context, the Redis
// servers (nodes) with their connections and queues. Declared here so that the files that
// define it share one declaration; read it as their table of contents:
//   redis_store.cc  the store: calls in, routing to nodes, batching, deadlines, the failure
//                   policy, and RedisStore's own functions;
//   cluster.cc      the slot map (CLUSTER SLOTS) and the redirections (MOVED, ASK, TRYAGAIN);
//   connection.cc   one connection: handshake, pipelined script calls, replies, and what
//                   they say of the server (errors.h, src/core/health_log.h);
//   multislot.cc    a request over several cluster slots, decided slot by slot;
//   settle_calls.cc settles and resets (Store::SettleAll, ResetAll): a call per slot, the
//                   `once` claim first;
//   sentinel.cc     Redis Sentinel: which server is the master, and following a failover;
//   stream.cc       the bytes under a connection: TCP, a unix socket or TLS;
//   deny_calls.cc   the denial cache's side (deny_cache.h): denials answered from memory;
//   share_calls.cc  quota leasing: requests answered from shares (shares.h), the calls that
//                   take them and give them back;
// with call.h (a request on its way, and the script's calling convention), keys.h (key names
// and hash slots) and resp.h (RESP) beside them; url.cc reads the URL.
//
// Threads: callers reach the engine from any thread through Submit and SubmitLeases, which
// hand their call over under incoming_mu_ (Submit may first answer it from deny_cache_, which
// locks its own shards), and through Stats, which reads atomics (RedisKey,
// LeaseKey and local() read only what is constant or thread-safe). Everything else, the
// connections included, runs on the I/O thread alone and takes no lock.

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ssl/context.hpp"
#include "boost/asio/steady_timer.hpp"
#include <hiredis/hiredis.h>

#include "sluice/memory_store.h"
#include "sluice/redis_store.h"
#include "src/core/health_log.h"
#include "src/core/mutex.h"
#include "src/redis/call.h"
#include "src/redis/deny_cache.h"
#include "src/redis/shares.h"

namespace sluice {
namespace internal {
struct Split;  // multislot.h
}  // namespace internal

class RedisStore::Impl {
 public:
  // Starts the I/O thread, which begins connecting to every endpoint; over TLS with `tls`
  // (null for TCP and unix sockets).
  Impl(RedisStoreOptions options, std::unique_ptr<boost::asio::ssl::context> tls);
  // Fails the calls still waiting (Cancelled) and joins the I/O thread.
  ~Impl();

  // From any thread.
  const MemoryStore& local() const { return local_; }
  MemoryStore& local() { return local_; }
  std::string RedisKey(const Limit& limit, std::string_view key) const;
  std::string LeaseKey(std::string_view key) const;
  // Frame a request as one Call and queue it for the I/O thread, which completes it by
  // `done`; or, when its keys are in different cluster slots, split it (SubmitSplit).
  void Submit(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
              std::span<Decision> each, DecideDone done);
  // Submit with a mode (Call::Mode): kCharge also writes each limit's charge to `receipts`
  // (zeroed first; left so when the failure policy decides); kGiveBack gives back `charges`,
  // one per request, and fails with its error, whatever the policy, when Redis cannot be asked.
  struct LimitsCall {
    internal::Call::Mode mode = internal::Call::Mode::kDecide;
    std::span<Charge> receipts = {};
    std::span<const Charge> charges = {};
  };
  void SubmitLimits(const LimitsCall& how, std::span<const LimitedKey> requests, int64_t cost,
                    Timestamp now, std::span<Decision> each, DecideDone done);
  void SubmitLeases(LeaseOp op, std::span<const LeasedKey> keys, std::string_view id, Micros ttl,
                    Timestamp now, std::span<Decision> each, DecideDone done);
  // multislot.cc: a request (mode kDecide) or leases whose keys are in several cluster slots,
  // decided slot by slot (multislot.h); from SubmitLimits and SubmitLeases. A charge or a
  // give-back over several slots is refused (InvalidArgument), as ever.
  // A charge (mode kCharge) writes each limit's charge to `receipts` once every part allowed.
  void SubmitSplit(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                   std::span<Decision> each, std::span<Charge> receipts, DecideDone done);
  void SubmitSplitLeases(LeaseOp op, std::span<const LeasedKey> keys, std::string_view id,
                         Micros ttl, Timestamp now, std::span<Decision> each, DecideDone done);
  // settle_calls.cc: Store::SettleAll and ResetAll, checked by RedisStore (any thread).
  void SubmitSettle(std::span<const LimitedKey> requests, std::span<const Settlement> settlements,
                    std::string_view once, Timestamp once_until, Timestamp now,
                    std::span<Settled> settled, StatusDone done);
  void SubmitReset(std::span<const LimitedKey> requests, Timestamp now, StatusDone done);
  void SubmitRecord(std::string_view name, std::string_view cursor,
                    std::span<const std::pair<std::string, std::string>> set,
                    RedisStore::Record* record, std::string* next_cursor, DecideDone done);
  struct SettlePart;  // settle_calls.cc
  struct Settle;

  RedisStoreStats Stats() const;

  // The call path's steady clock: options_.steady_clock_for_testing's, or steady_clock's.
  // Any thread.
  internal::SteadyTime SteadyNow() const {
    return options_.steady_clock_for_testing ? options_.steady_clock_for_testing()
                                             : internal::SteadyClock::now();
  }

 private:
  class Connection;  // connection.h
  class Sentinel;    // sentinel.h

  using Call = internal::Call;
  using CallPtr = internal::CallPtr;
  using Pending = internal::Pending;
  using SteadyClock = internal::SteadyClock;
  using SteadyTime = internal::SteadyTime;

  // One Redis server: a standalone server, or a cluster node, with its connections and the
  // calls waiting to be sent to it.
  struct Node {
    RedisEndpoint endpoint;
    std::vector<std::unique_ptr<Connection>> connections;
    std::deque<CallPtr> queue;
    std::deque<Pending> asked;       // Batches an ASK sent here, to go first, after ASKING.
    bool time_refused_said = false;  // Its refusal of TIME has been logged (connection.cc).
  };

  // redis_store.cc: calls in and out. NewCall, SameSlot and Enqueue run on the caller's
  // thread (from Submit), the rest on the I/O thread.
  CallPtr NewCall(int64_t cost, size_t keys, Timestamp now, std::span<Decision> each,
                  DecideDone done) const;
  void FillCall(Call& call, int64_t cost, size_t keys, Timestamp now, std::span<Decision> each,
                DecideDone done) const;
  bool SameSlot(Call& call, const std::string& redis_key, std::string_view key);
  void Enqueue(CallPtr call);
  void TakeIncoming();
  void Complete(Call& call, absl::StatusOr<Decision> result);
  // What the script's reply to a batch said of Redis: whether it decided a call, and the
  // first error of a call that says Redis cannot decide now (errors.h), if any.
  struct BatchOutcome {
    bool answered = false;
    std::optional<std::string> refusal;
    bool not_master = false;  // That error says the server is not a master (READONLY...).
  };
  BatchOutcome CompleteBatch(std::vector<CallPtr>& calls, const redisReply& reply);
  template <typename Calls>
  void FailAll(Calls& calls, const absl::Status& status);

  // multislot.cc: a split request's steps, each from the completion of the call before it
  // (StartSplit on the caller's thread, the rest on the I/O thread).
  using SplitPtr = std::shared_ptr<internal::Split>;
  enum class PartAsk : uint8_t { kCharge, kAsIs, kGiveBack, kDryRun };
  void StartSplit(SplitPtr split);
  void AskPart(SplitPtr split, size_t part, PartAsk ask);
  void OnCharged(SplitPtr split, absl::StatusOr<Decision> result);
  void Unwind(SplitPtr split);
  void OnSettled(SplitPtr split, size_t part, PartAsk ask, absl::StatusOr<Decision> result);
  void AnswerSplit(internal::Split& split);

  // settle_calls.cc: a settle's or a reset's steps (NewSettle and the first AskSettlePart on
  // the caller's thread, the rest on the I/O thread).
  std::shared_ptr<Settle> NewSettle(std::span<const LimitedKey> requests, Timestamp now);
  void AskSettlePart(std::shared_ptr<Settle> settle, size_t part);
  void OnSettlePart(std::shared_ptr<Settle> settle, size_t part, absl::Status status);
  void SettleFailed(Settle& settle, size_t part, bool unavailable);
  void AnswerSettle(Settle& settle);

  // redis_store.cc: nodes, routing and batching; I/O thread.
  Node& NodeAt(const RedisEndpoint& endpoint);
  void Route(CallPtr call);
  void Dispatch();
  void DispatchTo(Node& node);
  bool AnyConnectionUsable() const;
  absl::Status NoConnection() const;

  // redis_store.cc: deadlines and shutdown; I/O thread.
  void ArmTimer();
  void OnTimer();
  // Answers the calls waiting to be sent (queued, unrouted, or in a batch an ASK sent on)
  // whose deadline is `now` or past, as timed out: from OnTimer, and from Dispatch before it
  // sends anything, so that a batch that waited goes out without the calls whose callers
  // have their answer (which, sent, would make the timer fail the connection).
  void ExpireWaiting(SteadyTime now);
  absl::Status TimedOut() const;
  void Shutdown();

  // share_calls.cc: quota leasing. SubmitLeased, from Submit on the caller's thread, answers
  // from a share or calls TakeShare (any thread), whose answer OnTaken reads on the I/O
  // thread; GiveBack sends what ended (any thread); SweepShares ends shares on a timer (I/O).
  // SubmitLeased returns false, leaving `done`, for a request it does not lease (several
  // limits, no policy, cost 0).
  struct Taking;
  bool SubmitLeased(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                    std::span<Decision> each, DecideDone& done);
  void TakeShare(std::unique_ptr<Taking> taking);
  void OnTaken(std::unique_ptr<Taking> taking, absl::StatusOr<Decision> result);
  void GiveBack(std::vector<internal::ShareReturn>& returns, Timestamp now);
  void SweepShares();
  void AddShareStats(RedisStoreStats& stats) const;
  // The time the sweep ends shares at: the latest a caller passed, moved on by the steady
  // clock since (an end it reads early only gives units back sooner).
  Timestamp ShareNow() const;

  // cluster.cc: the slot map and redirections; I/O thread.
  void RefreshSlots();
  void OnSlots(const redisReply& reply, const RedisEndpoint& asked);
  void OnSlotsRefused(std::string_view error);
  void Redirect(Pending batch, std::string_view error);

  // deny_calls.cc: the denial cache (deny_cache.h), which answers on the callers' threads
  // and learns on the I/O thread (Complete). AnsweredDenied, from Submit: whether the cache
  // answered (then `done` has been called), or Submit must go on (`done` left as it was). A
  // give-back (mode kGiveBack) is never answered here: it makes the cache forget its limits
  // instead, before it is sent and again when it is answered (RecordDenial).
  bool AnsweredDenied(Call::Mode mode, std::span<const LimitedKey> requests, int64_t cost,
                      Timestamp now, std::span<Decision> each, DecideDone& done);
  Timestamp DenyCacheNow(Timestamp now) const;
  internal::DenyStamp DenyStamp(Timestamp now) const;  // For a call made at `now`.
  // What Redis answered `call` (I/O thread), kept when it was a denial (a decision or a
  // charge); a give-back's limits forgotten.
  void RecordDenial(const Call& call, const absl::StatusOr<Decision>& result);

  // Constant after construction; read on any thread.
  const RedisStoreOptions options_;
  // Null when options_.deny_cache_entries is 0; thread-safe itself.
  const std::unique_ptr<internal::DenyCache> deny_cache_;
  const std::string margin_ms_;  // options_.expiry_margin, as ARGV carries it.
  // rediss://: what every connection's TLS shares (CAs, the client's certificate); null
  // otherwise. Used on the I/O thread only once built.
  const std::unique_ptr<boost::asio::ssl::context> tls_;

  // The I/O thread and its loop. The loop is declared before everything that waits on it
  // (sockets, timers), so that it is destroyed after them.
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
  MemoryStore local_;  // The `local` policy's fallback. Thread-safe itself.

  // Calls made on other threads, taken into the queues by the I/O thread.
  internal::Mutex incoming_mu_;
  std::vector<CallPtr> incoming_ ABSL_GUARDED_BY(incoming_mu_);
  bool take_scheduled_ ABSL_GUARDED_BY(incoming_mu_) = false;

  // The I/O thread's own (its connections' too): read and written there only, unlocked.
  std::vector<std::unique_ptr<Node>> nodes_;    // Never shrinks: connections point at nodes.
  std::vector<Node*> slot_owner_;               // Cluster: the node serving each slot.
  std::deque<CallPtr> unrouted_;                // Cluster: calls whose slot has no known owner.
  bool slots_asked_ = false;                    // A CLUSTER SLOTS is in flight.
  bool slots_known_ = false;                    // One has been answered.
  SteadyTime slots_asked_at_;                   // When the last one was asked.
  boost::asio::steady_timer slots_timer_{io_};  // Waits out kSlotsInterval before the next.
  bool slots_timer_armed_ = false;
  boost::asio::steady_timer timer_;  // The earliest deadline of all (ArmTimer).
  bool timer_armed_ = false;
  bool stopping_ = false;
  std::string sha_;                                    // The script's, from SCRIPT LOAD.
  std::string last_error_ = "not connected yet";       // For NoConnection's message.
  internal::HealthLog health_{"Redis", options_.log};  // Lost and back; its Flush is OnTimer's.
  // Sentinel (redis+sentinel://): finds the master and moves nodes_.front() to it; null
  // otherwise.
  std::unique_ptr<Sentinel> sentinel_;

  // Quota leasing: null unless options_.shares. The engine is thread-safe; the latest time a
  // caller passed (and when) is written by callers, read by the sweep; the timer is the I/O
  // thread's.
  std::unique_ptr<internal::Shares> shares_ =
      options_.shares ? std::make_unique<internal::Shares>(options_.share_keys) : nullptr;
  std::atomic<int64_t> share_now_us_{0};
  std::atomic<int64_t> share_now_steady_ns_{0};
  boost::asio::steady_timer share_timer_{io_};
  bool share_timer_armed_ = false;

  // Counters for Stats(): written on the I/O thread (calls_ on the callers'), read on any.
  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> script_calls_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> fallbacks_{0};
  std::atomic<uint64_t> reconnects_{0};
  std::atomic<uint64_t> redirects_{0};
  std::atomic<uint64_t> asks_{0};
  std::atomic<uint64_t> split_requests_{0};  // multislot.cc's, on any thread.
  std::atomic<uint64_t> give_backs_{0};
  std::atomic<uint64_t> give_backs_failed_{0};
  std::atomic<uint64_t> settle_units_lost_{0};  // settle_calls.cc's, on the I/O thread.
  std::atomic<uint64_t> master_switches_{0};    // Sentinel: written by sentinel.cc.
  std::atomic<int> ready_{0};
};

// Completes every call of `calls` with `status`, leaving `calls` empty.
template <typename Calls>
void RedisStore::Impl::FailAll(Calls& calls, const absl::Status& status) {
  Calls failing;
  failing.swap(calls);
  for (CallPtr& c : failing) {
    Complete(*c, status);
  }
}

}  // namespace sluice
