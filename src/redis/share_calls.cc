// Quota leasing in the Redis store (see redis_store_impl.h and docs/redis.md, "Quota leasing
// (shares)"): a request whose only limit has a SharePolicy is answered from a share the engine
// (shares.h) holds, or sent to Redis at the cost the engine asks for (the request's own, or
// more to take a share); Redis's answer goes back to the engine, and the unused units of the
// shares that end (by their ttl, by eviction) are given back to Redis.

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "boost/asio/error.hpp"

#include "sluice/redis_store.h"
#include "src/redis/call.h"
#include "src/redis/redis_store_impl.h"
#include "src/redis/shares.h"

namespace sluice {
namespace {

// How often the I/O thread ends the shares whose time is up, while any is held: a share's
// unused units go back to Redis at most this late.
constexpr std::chrono::milliseconds kShareSweep{2};

int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             internal::SteadyClock::now().time_since_epoch())
      .count();
}

}  // namespace

// A call the engine asked for, and what its answer needs. Owned by the call's `done`.
struct RedisStore::Impl::Taking {
  internal::ShareTake share;
  Limit limit;
  std::string key;            // The caller's.
  std::vector<Limit> before;  // The limit's earlier figures (LimitedKey::before).
  std::string id;             // The Redis key: the engine's name for (limit, key).
  SharePolicy policy;
  int64_t cost = 0;  // The request's own; 0 for a refill.
  int64_t take = 0;  // What the call charges.
  Timestamp sent;
  Decision answer;            // Redis's answer (the call's `each`).
  Charge receipt;             // What it charged (the call's `receipts`).
  std::span<Decision> each;   // The caller's; empty for a refill.
  DecideDone done = nullptr;  // The caller's; empty for a refill.

  internal::ShareKey Key() const {
    return {.id = id, .limit = limit, .key = key, .policy = policy};
  }
};

bool RedisStore::Impl::SubmitLeased(std::span<const LimitedKey> requests, int64_t cost,
                                    Timestamp now, std::span<Decision> each, DecideDone& done) {
  if (requests.size() != 1 || requests[0].share == nullptr || cost <= 0) {
    return false;
  }
  const LimitedKey& r = requests[0];
  if (absl::Status s = ValidateSharePolicy(*r.limit, *r.share); !s.ok()) {
    std::move(done)(s);
    return true;
  }
  if (now.time_since_epoch().count() > share_now_us_.load(std::memory_order_relaxed)) {
    share_now_us_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    share_now_steady_ns_.store(SteadyNanos(), std::memory_order_relaxed);
  }
  // Shares live on a clock that never steps back: a system clock set back must not stretch a
  // share past the window Redis charged it in (ShareNow moves on with the steady clock). Tests
  // that replay their own times (use_caller_time) keep them.
  if (!options_.use_caller_time) {
    now = std::max(now, ShareNow());
  }
  std::string id = RedisKey(*r.limit, r.key);
  auto taking = [&](int64_t own, int64_t take) {
    return std::unique_ptr<Taking>(new Taking{.limit = *r.limit,
                                              .key = std::string(r.key),
                                              .before = {r.before.begin(), r.before.end()},
                                              .id = id,
                                              .policy = *r.share,
                                              .cost = own,
                                              .take = take,
                                              .sent = now});
  };
  // A request that waits for the share on its way: answered from it, or asked exactly.
  auto wait = [&]() -> internal::Shares::Waiter {
    std::unique_ptr<Taking> t = taking(cost, cost);
    t->each = each;
    t->done = std::move(done);
    return [this, t = std::move(t)](std::optional<Decision> d) mutable {
      if (!d) {
        TakeShare(std::move(t));
        return;
      }
      t->each[0] = *d;
      std::move(t->done)(*d);
    };
  };
  std::vector<internal::ShareReturn> returns;
  const internal::Shares::Plan plan = shares_->Begin(
      {.id = id, .limit = *r.limit, .key = r.key, .policy = *r.share}, cost, now, returns, wait);
  if (plan.local) {
    calls_.fetch_add(1, std::memory_order_relaxed);
    // Framed before `done`, which may free the caller's request (its key, limit and policy).
    std::unique_ptr<Taking> refill = plan.refill > 0 ? taking(0, plan.refill) : nullptr;
    each[0] = *plan.local;
    std::move(done)(*plan.local);
    if (refill) {
      TakeShare(std::move(refill));
    }
  } else if (!plan.waiting) {
    std::unique_ptr<Taking> t = taking(cost, plan.take);
    t->each = each;
    t->done = std::move(done);
    TakeShare(std::move(t));
  }
  GiveBack(returns, now);
  return true;
}

// Queues the call `taking` describes, as Submit queues a request on one key, asking for its
// receipt (what it charged, to give back what the share does not use).
void RedisStore::Impl::TakeShare(std::unique_ptr<Taking> taking) {
  Taking& t = *taking;
  t.share = {.own_cost = t.cost};
  t.receipt = {};
  auto call = std::make_unique<Call>();
  call->mode = Call::Mode::kCharge;
  call->receipts = {&t.receipt, 1};
  FillCall(*call, t.take, 1, t.sent, {&t.answer, 1},
           [this, taking = std::move(taking)](absl::StatusOr<Decision> r) mutable {
             OnTaken(std::move(taking), std::move(r));
           });
  call->share = &t.share;
  if (!SameSlot(*call, t.id, t.key)) {
    return;  // Not for one key; SameSlot has answered.
  }
  AppendLimit(*call, options_.key_prefix, t.id,
              {.limit = &t.limit, .key = t.key, .before = t.before}, t.sent);
  Enqueue(std::move(call));
}

// On the I/O thread: Redis's answer (or the failure policy's) to a call TakeShare queued.
void RedisStore::Impl::OnTaken(std::unique_ptr<Taking> t, absl::StatusOr<Decision> result) {
  std::vector<internal::Shares::Ready> ready;
  auto release = [&ready] {
    for (internal::Shares::Ready& r : ready) {
      std::move(r.waiter)(r.decision);
    }
  };
  if (!result.ok() || t->share.fell_back) {
    shares_->Failed(t->Key(), t->cost, t->take, &ready);
    if (t->done) {
      if (result.ok()) {
        t->each[0] = t->answer;
      }
      std::move(t->done)(std::move(result));
    }
    release();
    return;
  }
  std::vector<internal::ShareReturn> returns;
  std::optional<Charge> receipt;
  if (t->receipt.units > 0) {
    receipt = t->receipt;
  }
  const std::optional<Decision> d =
      shares_->Taken(t->Key(), t->cost, t->take, t->sent, t->answer, receipt, returns, &ready);
  GiveBack(returns, t->sent);
  release();
  if (!d) {
    t->take = t->cost;  // The share was refused: ask again for the request alone.
    TakeShare(std::move(t));
    return;
  }
  if (t->done) {
    t->each[0] = *d;
    std::move(t->done)(*d);
  }
  SweepShares();
}

// Gives back to Redis the unused units of shares that ended, one call each (a failed one
// leaves them charged: fewer admitted, never more).
void RedisStore::Impl::GiveBack(std::vector<internal::ShareReturn>& returns, Timestamp now) {
  struct Giving {
    Limit limit;
    std::string key;
    Charge charge;
    Decision each;
  };
  for (internal::ShareReturn& r : returns) {
    if (!r.receipt || r.receipt->units <= 0) {
      continue;  // Nothing known of what Redis charged: nothing to give back.
    }
    auto g = std::unique_ptr<Giving>(
        new Giving{.limit = r.limit, .key = std::move(r.key), .charge = *r.receipt, .each = {}});
    Giving& ref = *g;
    const LimitedKey request{.limit = &ref.limit, .key = ref.key};
    SubmitLimits({.mode = Call::Mode::kGiveBack, .charges = {&ref.charge, 1}}, {&request, 1}, 0,
                 now, {&ref.each, 1}, [g = std::move(g)](absl::StatusOr<Decision>) {});
  }
  returns.clear();
}

// On the I/O thread: ends the shares whose time is up, and comes back while any is held.
void RedisStore::Impl::SweepShares() {
  if (stopping_) {
    return;
  }
  std::vector<internal::ShareReturn> returns;
  const Timestamp now = ShareNow();
  shares_->Expire(now, returns);
  GiveBack(returns, now);
  if (share_timer_armed_ || !shares_->Holding()) {
    return;
  }
  share_timer_armed_ = true;
  share_timer_.expires_after(kShareSweep);
  share_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec == boost::asio::error::operation_aborted) {
      return;  // Shutting down.
    }
    share_timer_armed_ = false;
    SweepShares();
  });
}

Timestamp RedisStore::Impl::ShareNow() const {
  const auto since = std::chrono::duration_cast<Micros>(std::chrono::nanoseconds(
      SteadyNanos() - share_now_steady_ns_.load(std::memory_order_relaxed)));
  return Timestamp(Micros(share_now_us_.load(std::memory_order_relaxed))) + since;
}

void RedisStore::Impl::AddShareStats(RedisStoreStats& stats) const {
  if (!shares_) {
    return;
  }
  const internal::ShareStats s = shares_->Stats();
  stats.share_decisions = s.local;
  stats.shares_taken = s.taken;
  stats.shares_refused = s.denied;
  stats.share_units_returned = s.units_returned;
  stats.share_units_lapsed = s.units_lapsed;
}

}  // namespace sluice
