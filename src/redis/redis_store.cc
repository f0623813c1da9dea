#include "sluice/redis_store.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <deque>
#include <future>
#include <optional>
#include <thread>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "fmt/format.h"

#include "sluice/algorithms.h"
#include "sluice/memory_store.h"
#include "src/core/mutex.h"
#include "src/redis/call.h"
#include "src/redis/connection.h"
#include "src/redis/errors.h"
#include "src/redis/keys.h"
#include "src/redis/redis_store_impl.h"
#include "src/redis/sentinel.h"
#include "src/redis/stream.h"

namespace sluice {
namespace {

namespace asio = boost::asio;
using internal::AppendHead;
using internal::AppendLease;
using internal::AppendLimit;
using internal::BatchCommand;
using internal::HashSlot;
using internal::IsStoreUnavailable;
using internal::kSlotCount;
using internal::ReadReply;

}  // namespace

// ---------------------------------------------------------------------------------------------
// RedisStore::Impl (redis_store_impl.h): its thread, and the calls made on any thread.

RedisStore::Impl::Impl(RedisStoreOptions options, std::unique_ptr<asio::ssl::context> tls)
    : options_(std::move(options)),
      deny_cache_(
          internal::DenyCache::Create(options_.deny_cache_entries, options_.deny_cache_max_ttl)),
      margin_ms_(fmt::format_int(options_.expiry_margin.count()).str()),
      tls_(std::move(tls)),
      work_(asio::make_work_guard(io_)),
      local_(options_.local),
      timer_(io_) {
  if (options_.cluster) {
    slot_owner_.assign(kSlotCount, nullptr);
  }
  thread_ = std::thread([this] { io_.run(); });
  asio::post(io_, [this] {
    sentinel_ = Sentinel::Start(*this);  // With redis+sentinel://, the master's node.
    for (const RedisEndpoint& endpoint : options_.endpoints) {
      NodeAt(endpoint);
    }
  });
}

RedisStore::Impl::~Impl() {
  asio::post(io_, [this] { Shutdown(); });
  work_.reset();
  thread_.join();
}

std::string RedisStore::Impl::RedisKey(const Limit& limit, std::string_view key) const {
  return internal::RedisKey(options_.key_prefix, limit, key);
}

std::string RedisStore::Impl::LeaseKey(std::string_view key) const {
  return internal::LeaseKey(options_.key_prefix, key);
}

// A call with its deadline and the head of its part of ARGV: time, cost (or a lease op),
// the number of keys and the mode.
internal::CallPtr RedisStore::Impl::NewCall(int64_t cost, size_t keys, Timestamp now,
                                            std::span<Decision> each, DecideDone done) const {
  auto call = std::make_unique<Call>();
  FillCall(*call, cost, keys, now, each, std::move(done));
  return call;
}

void RedisStore::Impl::FillCall(Call& call, int64_t cost, size_t keys, Timestamp now,
                                std::span<Decision> each, DecideDone done) const {
  call.cost = cost;
  call.now = now;
  call.each = each;
  call.done = std::move(done);
  call.deadline = SteadyNow() + options_.timeout;
  call.keys.reserve(keys);
  AppendHead(call, options_.use_caller_time ? std::optional(now) : std::nullopt, keys);
}

void RedisStore::Impl::Submit(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                              std::span<Decision> each, DecideDone done) {
  if (shares_ && SubmitLeased(requests, cost, now, each, done)) {
    return;  // Leased (share_calls.cc): answered from a share, or a share is being taken.
  }
  SubmitLimits({}, requests, cost, now, each, std::move(done));
}

void RedisStore::Impl::SubmitLimits(const LimitsCall& how, std::span<const LimitedKey> requests,
                                    int64_t cost, Timestamp now, std::span<Decision> each,
                                    DecideDone done) {
  std::fill(how.receipts.begin(), how.receipts.end(), Charge{});
  if (AnsweredDenied(how.mode, requests, cost, now, each, done)) {
    return;  // deny_calls.cc: denied from memory, as Redis would (a denial charges nothing).
  }
  CallPtr call = std::make_unique<Call>();
  call->mode = how.mode;
  call->receipts = how.receipts;
  FillCall(*call, cost, requests.size(), now, each, std::move(done));
  call->deny_stamp = DenyStamp(now);
  call->limits.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string redis_key = RedisKey(*requests[i].limit, requests[i].key);
    if (!SameSlot(*call, redis_key, requests[i].key)) {
      if (how.mode == Call::Mode::kDecide || how.mode == Call::Mode::kCharge) {
        SubmitSplit(requests, cost, now, each, how.receipts, std::move(call->done));
      }
      return;
    }
    AppendLimit(*call, options_.key_prefix, redis_key, requests[i], now);
    if (how.mode == Call::Mode::kGiveBack) {
      internal::AppendCharge(*call, how.charges[i]);
    }
  }
  Enqueue(std::move(call));
}

void RedisStore::Impl::SubmitLeases(LeaseOp op, std::span<const LeasedKey> keys,
                                    std::string_view id, Micros ttl, Timestamp now,
                                    std::span<Decision> each, DecideDone done) {
  CallPtr call = NewCall(static_cast<int64_t>(op), keys.size(), now, each, std::move(done));
  call->lease_op = op;
  call->lease_id = id;
  call->lease_ttl = ttl;
  for (const LeasedKey& k : keys) {
    const std::string redis_key = LeaseKey(k.key);
    if (!SameSlot(*call, redis_key, k.key)) {
      SubmitSplitLeases(op, keys, id, ttl, now, each, std::move(call->done));  // multislot.cc
      return;
    }
    AppendLease(*call, redis_key, k);
  }
  Enqueue(std::move(call));
}

void RedisStore::Impl::SubmitRecord(std::string_view name, std::string_view cursor,
                                    std::span<const std::pair<std::string, std::string>> set,
                                    RedisStore::Record* record, std::string* next_cursor,
                                    DecideDone done) {
  auto call = std::make_unique<Call>();
  call->mode = Call::Mode::kRecord;
  call->record = record;
  call->record_cursor = next_cursor;
  FillCall(*call, 0, 0, Timestamp{}, {}, std::move(done));
  const std::string key = options_.key_prefix + std::string(name);
  if (SameSlot(*call, key, name)) {
    internal::AppendRecord(*call, key, cursor, set);
    Enqueue(std::move(call));
  }
}

void RedisStore::Impl::Enqueue(CallPtr call) {
  calls_.fetch_add(1, std::memory_order_relaxed);
  {
    internal::MutexLock lock(incoming_mu_);
    incoming_.push_back(std::move(call));
    if (take_scheduled_) {
      return;
    }
    take_scheduled_ = true;
  }
  asio::post(io_, [this] { TakeIncoming(); });
}

// In a cluster, whether `redis_key` is in the slot of the call's keys so far (and if so,
// the call's slot is its); when not, fails the call, unless it is a request the caller splits
// by slot (mode kDecide: limits or leases; kCharge, unless it takes a share).
bool RedisStore::Impl::SameSlot(Call& call, const std::string& redis_key, std::string_view key) {
  if (!options_.cluster) {
    return true;
  }
  const int slot = HashSlot(redis_key);
  if (call.slot >= 0 && slot != call.slot) {
    if (call.mode == Call::Mode::kDecide ||
        (call.mode == Call::Mode::kCharge && call.share == nullptr)) {
      return false;
    }
    std::move(call.done)(absl::InvalidArgumentError(
        fmt::format("keys '{}' and '{}' are in different Redis Cluster slots, and a charge to "
                    "be given back is made in one slot: give them the same {{tag}}, as in "
                    "'{{user}}:ip'",
                    call.keys.front(), key)));
    return false;
  }
  call.slot = slot;
  return true;
}

RedisStoreStats RedisStore::Impl::Stats() const {
  RedisStoreStats stats{.calls = calls_.load(std::memory_order_relaxed),
                        .script_calls = script_calls_.load(std::memory_order_relaxed),
                        .failures = failures_.load(std::memory_order_relaxed),
                        .fallbacks = fallbacks_.load(std::memory_order_relaxed),
                        .reconnects = reconnects_.load(std::memory_order_relaxed),
                        .redirects = redirects_.load(std::memory_order_relaxed),
                        .asks = asks_.load(std::memory_order_relaxed),
                        .denials_answered_locally = deny_cache_ ? deny_cache_->answered() : 0,
                        .master_switches = master_switches_.load(std::memory_order_relaxed),
                        .split_requests = split_requests_.load(std::memory_order_relaxed),
                        .give_backs = give_backs_.load(std::memory_order_relaxed),
                        .give_backs_failed = give_backs_failed_.load(std::memory_order_relaxed),
                        .settle_units_lost = settle_units_lost_.load(std::memory_order_relaxed),
                        .connections_ready = ready_.load(std::memory_order_relaxed)};
  const internal::HealthLog::Counts lost = health_.counts();
  stats.servers_lost = lost.lost;
  stats.servers_refusing = lost.refusing;
  AddShareStats(stats);  // share_calls.cc
  stats.local = local_.Stats();
  return stats;
}

// ---------------------------------------------------------------------------------------------
// Routing and batching, on the I/O thread.

// The node at `endpoint`, connecting to it the first time it is named.
RedisStore::Impl::Node& RedisStore::Impl::NodeAt(const RedisEndpoint& endpoint) {
  for (auto& node : nodes_) {
    if (node->endpoint == endpoint) {
      return *node;
    }
  }
  auto node = std::make_unique<Node>();
  node->endpoint = endpoint;
  for (int i = 0; i < options_.connections; ++i) {
    node->connections.push_back(std::make_unique<Connection>(*this, *node));
  }
  nodes_.push_back(std::move(node));
  for (auto& c : nodes_.back()->connections) {
    c->Connect();
  }
  return *nodes_.back();
}

// Completes a call: with Redis's answer, or with a failure the policy turns into one.
void RedisStore::Impl::Complete(Call& call, absl::StatusOr<Decision> result) {
  RecordDenial(call, result);  // deny_calls.cc
  // A give-back that fails leaves its units charged: no policy can make Redis take them back.
  // A dry run that fails is its caller's to report (multislot.cc): it must charge nothing.
  // A settle or a reset has its own (settle_calls.cc). Redis could not decide (errors.h): the
  // policy does. A call's own error stays its own.
  if (!result.ok() && IsStoreUnavailable(result.status()) &&
      (call.mode == Call::Mode::kDecide || call.mode == Call::Mode::kCharge)) {
    failures_.fetch_add(1, std::memory_order_relaxed);
    internal::ShareFellBack(call);  // A call taking a share: the policy decides the request.
    switch (options_.on_failure) {
      case FailurePolicy::kDeny:
        break;
      case FailurePolicy::kAllow:
        fallbacks_.fetch_add(1, std::memory_order_relaxed);
        std::fill(call.each.begin(), call.each.end(), Decision{.allowed = true});
        result = Combine(call.each);
        break;
      case FailurePolicy::kLocal: {
        fallbacks_.fetch_add(1, std::memory_order_relaxed);
        if (call.lease_op) {
          absl::InlinedVector<LeasedKey, 4> keys;
          for (size_t i = 0; i < call.keys.size(); ++i) {
            keys.push_back({call.keys[i], call.capacities[i]});
          }
          result = local_.LeaseAll(*call.lease_op, keys, call.lease_id, call.lease_ttl, call.now,
                                   call.each);
          break;
        }
        absl::InlinedVector<LimitedKey, 4> requests;
        for (size_t i = 0; i < call.limits.size(); ++i) {
          requests.push_back({&call.limits[i], call.keys[i]});
        }
        result = local_.DecideAll(requests, call.cost, call.now, call.each);
        break;
      }
    }
  }
  if (!result.ok()) {
    // One failure is handed to many calls, whose callers may be on other threads: give each
    // a Status of its own rather than a share of one reference-counted message (shared
    // ones are thread-safe, but Debian's Abseil is not built for ThreadSanitizer, which
    // then sees the count's atomics as plain writes).
    result = absl::Status(result.status().code(), result.status().message());
  }
  std::move(call.done)(std::move(result));
}

void RedisStore::Impl::TakeIncoming() {
  std::vector<CallPtr> taken;
  {
    internal::MutexLock lock(incoming_mu_);
    taken.swap(incoming_);
    take_scheduled_ = false;
  }
  for (CallPtr& c : taken) {
    if (stopping_) {
      Complete(*c, absl::CancelledError("the Redis store is shutting down"));
    } else {
      Route(std::move(c));
    }
  }
  Dispatch();
}

// Puts a call in the queue of the node that serves its slot (or, in a cluster whose slot
// map does not name one, aside until a fresh map does). Queues stay in deadline order, which
// is the order calls were made: a redirected call goes back ahead of later ones, and the
// deadline timer need only look at each queue's front.
void RedisStore::Impl::Route(CallPtr call) {
  std::deque<CallPtr>* queue = &unrouted_;
  if (!options_.cluster) {
    queue = &nodes_.front()->queue;
  } else if (Node* owner = slot_owner_[static_cast<size_t>(call->slot)]; owner != nullptr) {
    queue = &owner->queue;
  }
  if (queue->empty() || queue->back()->deadline <= call->deadline) {
    queue->push_back(std::move(call));
    return;
  }
  const auto at = std::upper_bound(
      queue->begin(), queue->end(), call->deadline,
      [](SteadyTime deadline, const CallPtr& queued) { return deadline < queued->deadline; });
  queue->insert(at, std::move(call));
}

// Sends what waits on the connections that have room, a batch per script call: what waited
// past its deadline is answered instead (ExpireWaiting).
void RedisStore::Impl::Dispatch() {
  ExpireWaiting(SteadyNow());
  for (auto& node : nodes_) {
    DispatchTo(*node);
  }
  if (options_.cluster && !unrouted_.empty()) {
    RefreshSlots();
    if (!AnyConnectionUsable()) {
      FailAll(unrouted_, NoConnection());
    }
  }
  ArmTimer();
}

void RedisStore::Impl::DispatchTo(Node& node) {
  const SteadyTime now = SteadyNow();
  auto least_busy = [&]() -> Connection* {
    Connection* best = nullptr;
    for (auto& c : node.connections) {
      if (c->ready() && c->batches() < options_.pipeline && c->ClockReady(now) &&
          (best == nullptr || c->batches() < best->batches())) {
        best = c.get();
      }
    }
    return best;
  };
  while (!node.asked.empty()) {
    Connection* c = least_busy();
    if (c == nullptr) {
      break;
    }
    // Its `expires` on this node's clock, not the node's that sent it here.
    Pending batch = std::move(node.asked.front());
    node.asked.pop_front();
    batch.command = BatchCommand(batch.calls, sha_, margin_ms_, c->Expires(now, batch.deadline));
    c->Send(std::move(batch), /*asking=*/true);
  }
  while (!node.queue.empty()) {
    Connection* c = least_busy();
    if (c == nullptr) {
      break;
    }
    // While every connection has a script call in flight, what arrives waits for the first
    // reply (which dispatches again) to go out as one batch, unless a full batch waits: calls
    // that come in one by one would otherwise each go out as a script call of its own, each
    // paying a round trip's system calls here and a script call's overhead in Redis.
    if (c->batches() > 0 && node.queue.size() < static_cast<size_t>(options_.batch)) {
      break;
    }
    // In a cluster one script call touches one slot: batch the calls of the first one's.
    Pending batch{.kind = Pending::Kind::kBatch};
    const int slot = node.queue.front()->slot;
    for (auto it = node.queue.begin();
         it != node.queue.end() && batch.calls.size() < static_cast<size_t>(options_.batch);) {
      if ((*it)->slot == slot) {
        batch.calls.push_back(std::move(*it));
        it = node.queue.erase(it);
      } else {
        ++it;
      }
    }
    // Past the earliest deadline its caller has its answer: Redis must then decide nothing.
    batch.command =
        BatchCommand(batch.calls, sha_, margin_ms_, c->Expires(now, batch.calls.front()->deadline));
    batch.deadline = batch.calls.front()->deadline;
    c->Send(std::move(batch), /*asking=*/false);
  }
  if ((!node.queue.empty() || !node.asked.empty()) &&
      (sentinel_ == nullptr || sentinel_->master_known()) &&  // Else: wait for a master.
      std::none_of(node.connections.begin(), node.connections.end(),
                   [](const auto& c) { return c->opening() || c->ready(); })) {
    // Every connection to it is waiting out a backoff: fail now rather than at the deadline.
    FailAll(node.queue, NoConnection());
    for (Pending& p : node.asked) {
      FailAll(p.calls, NoConnection());
    }
    node.asked.clear();
    if (options_.cluster) {
      RefreshSlots();  // It may have failed over.
    }
  }
}

bool RedisStore::Impl::AnyConnectionUsable() const {
  for (const auto& node : nodes_) {
    for (const auto& c : node->connections) {
      if (c->opening() || c->ready()) {
        return true;
      }
    }
  }
  return false;
}

absl::Status RedisStore::Impl::NoConnection() const {
  return absl::UnavailableError(fmt::format("no connection to Redis: {}", last_error_));
}

// The replies to one batch, given to its calls in order.
RedisStore::Impl::BatchOutcome RedisStore::Impl::CompleteBatch(std::vector<CallPtr>& calls,
                                                               const redisReply& reply) {
  BatchOutcome outcome;
  size_t at = 0;
  for (CallPtr& c : calls) {
    absl::StatusOr<Decision> result = ReadReply(reply, at, *c);
    if (result.ok()) {
      outcome.answered = true;
    } else if (!outcome.refusal && IsStoreUnavailable(result.status())) {
      outcome.refusal = std::string(internal::RedisErrorText(result.status()));
      outcome.not_master =
          internal::ClassifyRedisStatus(result.status()) == internal::RedisErrorKind::kNotMaster;
    }
    Complete(*c, std::move(result));
  }
  return outcome;
}

// ---------------------------------------------------------------------------------------------
// Deadlines and shutdown.

// One timer for every deadline: the earliest among the queues' fronts and each connection's
// oldest script call or connection attempt (each list is in deadline order), and health_'s.
void RedisStore::Impl::ArmTimer() {
  std::optional<SteadyTime> earliest;
  auto consider = [&](std::optional<SteadyTime> t) {
    if (t && (!earliest || *t < *earliest)) {
      earliest = t;
    }
  };
  if (!unrouted_.empty()) {
    consider(unrouted_.front()->deadline);
  }
  consider(health_.due());  // A line held back, to say once its quiet time has passed.
  for (auto& node : nodes_) {
    if (!node->queue.empty()) {
      consider(node->queue.front()->deadline);
    }
    for (const Pending& p : node->asked) {
      consider(p.deadline);
    }
    for (auto& c : node->connections) {
      consider(c->deadline());
    }
  }
  if (!earliest || (timer_armed_ && timer_.expiry() <= *earliest)) {
    return;
  }
  timer_armed_ = true;
  timer_.expires_at(*earliest);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec == asio::error::operation_aborted) {
      return;  // Re-armed earlier, or shutting down.
    }
    timer_armed_ = false;
    OnTimer();
  });
}

void RedisStore::Impl::OnTimer() {
  const SteadyTime now = SteadyNow();
  health_.Flush(now);
  for (auto& node : nodes_) {
    for (auto& c : node->connections) {
      if (std::optional<SteadyTime> d = c->deadline(); d && *d <= now) {
        c->Fail(TimedOut());
      }
    }
  }
  ExpireWaiting(now);
  ArmTimer();
}

void RedisStore::Impl::ExpireWaiting(SteadyTime now) {
  auto expire = [&](std::deque<CallPtr>& queue) {
    while (!queue.empty() && queue.front()->deadline <= now) {  // In deadline order (Route).
      CallPtr c = std::move(queue.front());
      queue.pop_front();
      Complete(*c, TimedOut());
    }
  };
  expire(unrouted_);
  for (auto& node : nodes_) {
    expire(node->queue);
    for (auto it = node->asked.begin(); it != node->asked.end();) {
      if (it->deadline <= now) {
        FailAll(it->calls, TimedOut());
        it = node->asked.erase(it);
      } else {
        ++it;
      }
    }
  }
}

absl::Status RedisStore::Impl::TimedOut() const {
  return absl::DeadlineExceededError(
      fmt::format("Redis did not answer within {} ms", options_.timeout.count()));
}

void RedisStore::Impl::Shutdown() {
  stopping_ = true;
  timer_.cancel();
  slots_timer_.cancel();
  share_timer_.cancel();
  if (sentinel_ != nullptr) {
    sentinel_->Stop();
  }
  const absl::Status status = absl::CancelledError("the Redis store is shutting down");
  for (auto& node : nodes_) {
    for (auto& c : node->connections) {
      c->Close(status);
    }
    FailAll(node->queue, status);
    for (Pending& p : node->asked) {
      FailAll(p.calls, status);
    }
    node->asked.clear();
  }
  FailAll(unrouted_, status);
}

}  // namespace sluice
