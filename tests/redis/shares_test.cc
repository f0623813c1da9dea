// Quota leasing's bookkeeping (src/redis/shares.h) on a manual clock, without Redis: shares
// sized from the rate and capped, refused shares asked again exactly, shares that end with
// their ttl (returned) or their window (lapsed), leaky_bucket's delays, eviction; and a fleet
// of three servers over one pure algorithm standing for Redis (charges, give-backs), answering
// calls out of order, which never admits more than the limit, nor less than the stated bound.

#include "src/redis/shares.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "sluice/give_back.h"
#include "sluice/limit.h"
#include "sluice/store.h"
#include "tests/testing/random.h"
#include "tests/testing/util.h"

namespace sluice::internal {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using namespace std::chrono_literals;

constexpr Micros kSecond = 1s;

struct Leased {
  Limit limit;
  SharePolicy policy;
  std::string key = "k";
  ShareKey Key() const { return {.id = key, .limit = limit, .key = key, .policy = policy}; }
};

Leased FixedWindow(int64_t n, int64_t max, Micros ttl) {
  return {.limit = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = n, .period = 1s}),
          .policy = {.max = max, .ttl = ttl}};
}

Decision Allowed(int64_t remaining, Micros reset_after) {
  return {.allowed = true, .remaining = remaining, .reset_after = reset_after};
}

// Makes `requests` - 1 requests at `t` before Redis's answer to the first (`first`), so that
// the rate is `requests` when the next comes; returns that next request's take.
int64_t Warm(Shares& shares, const Leased& l, int requests, Timestamp t, const Decision& first,
             std::vector<ShareReturn>& returns) {
  for (int i = 0; i < requests - 1; ++i) {
    EXPECT_EQ(shares.Begin(l.Key(), 1, t, returns).take, 1);  // Nothing known yet.
  }
  shares.Taken(l.Key(), 1, 1, t, first, std::nullopt, returns);
  return shares.Begin(l.Key(), 1, t, returns).take;
}

TEST(SharesTest, FirstAskedExactlyThenSharesFollowTheRate) {
  Shares shares(1000);
  const Leased l = FixedWindow(1000, 10, 100ms);
  std::vector<ShareReturn> returns;
  const Timestamp t = At(kEpoch);
  // Nothing known of the key: its own cost.
  Shares::Plan p = shares.Begin(l.Key(), 1, t, returns);
  ASSERT_FALSE(p.local);
  EXPECT_EQ(p.take, 1);
  EXPECT_EQ(shares.Taken(l.Key(), 1, 1, t, Allowed(999, kSecond), std::nullopt, returns),
            Allowed(999, kSecond));
  // Two units asked for within the ttl: a share of one beyond this request's.
  p = shares.Begin(l.Key(), 1, t, returns);
  EXPECT_EQ(p.take, 2);
  std::optional<Decision> d =
      shares.Taken(l.Key(), 1, 2, t, Allowed(997, kSecond), std::nullopt, returns);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->remaining, 998);  // Redis's 997 and the unit held here.
  // Answered from the share: Redis's last remaining is a bound; a refill of the rate's 3.
  p = shares.Begin(l.Key(), 1, t + 1ms, returns);
  ASSERT_TRUE(p.local);
  EXPECT_EQ(*p.local, (Decision{.allowed = true, .remaining = 997, .reset_after = 999ms}));
  EXPECT_EQ(p.refill, 3);
  // While the refill is on its way, the next request is asked exactly.
  p = shares.Begin(l.Key(), 1, t + 1ms, returns);
  EXPECT_FALSE(p.local);
  EXPECT_EQ(p.take, 1);
  ASSERT_TRUE(shares.Taken(l.Key(), 0, 3, t + 1ms, Allowed(994, 999ms), std::nullopt, returns));
  ASSERT_TRUE(shares.Taken(l.Key(), 1, 1, t + 1ms, Allowed(993, 999ms), std::nullopt, returns));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(shares.Begin(l.Key(), 1, t + 2ms, returns).local) << i;
  }
  EXPECT_EQ(shares.Stats().local, 4u);
  EXPECT_EQ(shares.Stats().taken, 2u);
  EXPECT_TRUE(returns.empty());
}

TEST(SharesTest, RequestsWaitForTheShareOnItsWayAndAreAnsweredFromIt) {
  Shares shares(1000);
  const Leased l = FixedWindow(1000, 3, 100ms);
  std::vector<ShareReturn> returns;
  const Timestamp t = At(kEpoch);
  ASSERT_EQ(Warm(shares, l, 4, t, Allowed(997, kSecond), returns), 3);  // A share of 2 coming.
  std::vector<std::optional<Decision>> answers;
  auto wait = [&] {
    return Shares::Waiter([&](std::optional<Decision> d) { answers.push_back(d); });
  };
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(shares.Begin(l.Key(), 1, t + 1ms, returns, wait).waiting);
  }
  std::vector<Shares::Ready> ready;
  ASSERT_TRUE(shares.Taken(l.Key(), 1, 3, t, Allowed(994, kSecond), std::nullopt, returns, &ready));
  ASSERT_EQ(ready.size(), 3u);
  for (Shares::Ready& r : ready) {
    std::move(r.waiter)(r.decision);
  }
  // Two from the share's two units, the third to be asked of Redis.
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_TRUE(answers[0] && answers[0]->allowed);
  EXPECT_TRUE(answers[1] && answers[1]->allowed);
  EXPECT_FALSE(answers[2]);
  EXPECT_EQ(shares.Stats().local, 2u);
}

TEST(SharesTest, AShareIsAtMostMaxBurstAndAQuarterOfWhatRemains) {
  std::vector<ShareReturn> returns;
  const Timestamp t = At(kEpoch);
  // The take of the `requests`th request, after Redis answered the first with `remaining`.
  auto take_after = [&](Leased l, int64_t remaining, int requests) {
    Shares shares(1000);
    return Warm(shares, l, requests, t, Allowed(remaining, kSecond), returns);
  };
  EXPECT_EQ(take_after(FixedWindow(1000, 10, 100ms), 999, 50), 10);      // max
  EXPECT_EQ(take_after(FixedWindow(1000, 100, 100ms), 999, 50), 50);     // the rate
  EXPECT_EQ(take_after(FixedWindow(1000, 100, 100ms), 41, 50), 1 + 10);  // 41 / 4 beyond it
  EXPECT_EQ(take_after(FixedWindow(1000, 100, 100ms), 3, 50), 1);        // exact near the limit
  EXPECT_EQ(take_after(FixedWindow(20, 100, 100ms), 1000, 50), 20);      // the limit itself
}

TEST(SharesTest, ARefusedShareIsAskedAgainExactly) {
  Shares shares(1000);
  const Leased l = FixedWindow(100, 10, 100ms);
  std::vector<ShareReturn> returns;
  const Timestamp t = At(kEpoch);
  shares.Begin(l.Key(), 1, t, returns);
  shares.Taken(l.Key(), 1, 1, t, Allowed(99, kSecond), std::nullopt, returns);
  const int64_t take = shares.Begin(l.Key(), 1, t, returns).take;
  ASSERT_EQ(take, 2);
  const Decision refused{.remaining = 1, .reset_after = kSecond, .retry_after = kSecond};
  EXPECT_FALSE(shares.Taken(l.Key(), 1, take, t, refused, std::nullopt, returns));
  EXPECT_EQ(shares.Stats().denied, 1u);
  // Redis said 1 remains: a quarter of it is nothing, so the next is asked exactly.
  EXPECT_EQ(shares.Begin(l.Key(), 1, t, returns).take, 1);
}

TEST(SharesTest, AShareEndsWithItsTtlAndIsReturned) {
  Shares shares(1000);
  const Leased l = FixedWindow(1000, 10, 100ms);
  std::vector<ShareReturn> returns;
  const Timestamp t = At(kEpoch);
  ASSERT_EQ(Warm(shares, l, 10, t, Allowed(999, kSecond), returns), 10);
  shares.Taken(l.Key(), 1, 10, t, Allowed(980, kSecond), std::nullopt, returns);
  EXPECT_TRUE(shares.Begin(l.Key(), 1, t + 99ms, returns).local);
  shares.Expire(t + 100ms - 1us, returns);
  EXPECT_TRUE(returns.empty());
  shares.Expire(t + 100ms, returns);
  ASSERT_EQ(returns.size(), 1u);
  EXPECT_EQ(returns[0].units, 8);
  EXPECT_EQ(returns[0].taken, 10);
  EXPECT_EQ(returns[0].sent, t);
  EXPECT_EQ(shares.Stats().units_returned, 8u);
  EXPECT_FALSE(shares.Begin(l.Key(), 1, t + 100ms, returns).local);
}

TEST(SharesTest, AShareEndsWithItsWindowAndLapses) {
  Shares shares(1000);
  const Leased l = FixedWindow(1000, 10, 100ms);
  std::vector<ShareReturn> returns;
  const Timestamp t = At(kEpoch + 950'000);  // 50 ms before the window ends.
  ASSERT_EQ(Warm(shares, l, 10, t, Allowed(999, 50ms), returns), 10);
  shares.Taken(l.Key(), 1, 10, t, Allowed(980, 50ms), std::nullopt, returns);
  EXPECT_TRUE(shares.Begin(l.Key(), 1, t + 50ms - 1us, returns).local);
  // The next window: not from the share, and Redis's remaining is no longer known.
  const Shares::Plan next = shares.Begin(l.Key(), 1, t + 50ms, returns);
  EXPECT_FALSE(next.local);
  EXPECT_EQ(next.take, 1);
  EXPECT_TRUE(returns.empty());
  EXPECT_EQ(shares.Stats().units_lapsed, 8u);
}

TEST(SharesTest, LeakyBucketUnitsKeepTheirPlaceInTheQueue) {
  Shares shares(1000);
  // 10 per second: a unit drains every 100 ms.
  const Leased l{
      .limit = MustLimit(
          {.algorithm = Algorithm::kLeakyBucket, .limit = 10, .period = 1s, .burst = 100}),
      .policy = {.max = 4, .ttl = 10s}};
  std::vector<ShareReturn> returns;
  const Timestamp t = At(kEpoch);
  ASSERT_EQ(
      Warm(shares, l, 4, t, {.allowed = true, .remaining = 99, .reset_after = 100ms}, returns), 4);
  // The share's first unit waits 300 ms (three ahead of it); this request uses it.
  std::optional<Decision> d = shares.Taken(
      l.Key(), 1, 4, t, {.allowed = true, .remaining = 93, .reset_after = 700ms, .delay = 300ms},
      std::nullopt, returns);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->delay, 300ms);
  // The next ones are 100 ms apart after it, whenever they come.
  EXPECT_EQ(shares.Begin(l.Key(), 1, t + 50ms, returns).local->delay, 350ms);
  EXPECT_EQ(shares.Begin(l.Key(), 1, t + 50ms, returns).local->delay, 450ms);
  EXPECT_EQ(shares.Begin(l.Key(), 1, t + 700ms, returns).local->delay, 0ms);
}

TEST(SharesTest, EvictionReturnsWhatTheEvictedHeld) {
  Shares shares(16);  // One entry per shard.
  std::vector<ShareReturn> returns;
  const Timestamp t = At(kEpoch);
  Leased l = FixedWindow(1000, 10, 10s);
  shares.Begin(l.Key(), 1, t, returns);
  shares.Taken(l.Key(), 1, 1, t, Allowed(999, kSecond), std::nullopt, returns);
  shares.Begin(l.Key(), 1, t, returns);
  shares.Taken(l.Key(), 1, 2, t, Allowed(997, kSecond), std::nullopt, returns);
  for (int i = 0; returns.empty() && i < 1000; ++i) {
    Leased other = l;
    other.key = "other" + std::to_string(i);
    shares.Begin(other.Key(), 1, t, returns);
  }
  ASSERT_EQ(returns.size(), 1u);
  EXPECT_EQ(returns[0].key, "k");
  EXPECT_EQ(returns[0].units, 1);
  EXPECT_LE(shares.Stats().entries, 16u);
}

// Three servers share one limit held by a pure algorithm standing for Redis, which answers
// the calls in flight in random order, at its own time, charging and giving back as the
// script does. Each server sees a request at every other step (far more than the limit).
// Returns the units admitted per second (fixed windows of 1 s), and how many were answered
// from shares.
struct FleetRun {
  std::map<int64_t, int64_t> admitted;
  int64_t requests = 0;
  int64_t denied = 0;
  int64_t calls = 0;  // Calls answered by "Redis".
  uint64_t local = 0;
  Micros span{0};
};

template <typename T>
void Shuffle(std::deque<T>& items, testing::Random& random) {
  for (size_t i = items.size(); i > 1; --i) {
    std::swap(items[i - 1],
              items[static_cast<size_t>(random.Between(0, static_cast<int64_t>(i) - 1))]);
  }
}

FleetRun RunFleet(const Leased& l, uint64_t seed) {
  testing::Random random(seed);
  constexpr int kServers = 3;
  std::vector<std::unique_ptr<Shares>> servers;
  for (int s = 0; s < kServers; ++s) {
    servers.push_back(std::make_unique<Shares>(100));
  }
  struct InFlight {
    int server;
    int64_t cost;
    int64_t take;
    Timestamp sent;
  };
  std::deque<InFlight> calls;
  AnyState redis = InitialState(l.limit.algorithm());
  FleetRun run;
  std::vector<ShareReturn> returns;
  auto window = [](Timestamp t) { return t.time_since_epoch().count() / 1'000'000; };
  Timestamp now = At(kEpoch);
  auto give_back = [&] {
    for (const ShareReturn& r : returns) {
      EXPECT_TRUE(r.receipt);
      GiveBack(l.limit, redis, now, *r.receipt);
    }
    returns.clear();
  };
  for (int step = 0; step < 60'000; ++step) {
    now += 100us;
    for (int s = 0; s < kServers; ++s) {
      servers[s]->Expire(now, returns);
      give_back();
      if (random.OneIn(2)) {
        continue;
      }
      const Shares::Plan p = servers[s]->Begin(l.Key(), 1, now, returns);
      ++run.requests;
      give_back();
      if (p.local) {
        run.admitted[window(now)] += 1;
        if (p.refill > 0) {
          calls.push_back({s, 0, p.refill, now});
        }
      } else {
        calls.push_back({s, 1, p.take, now});
      }
    }
    // Each call in flight is answered at this step or later, in any order.
    std::deque<InFlight> later;
    std::deque<InFlight> answered;
    for (const InFlight& c : calls) {
      (random.OneIn(2) ? answered : later).push_back(c);
    }
    calls.swap(later);
    Shuffle(answered, random);
    for (const InFlight& c : answered) {
      ++run.calls;
      const Decision answer = Decide(l.limit, redis, now, c.take);
      std::optional<Charge> receipt;
      if (answer.allowed) {
        receipt = ChargeOf(l.limit, redis, now, c.take);
      }
      const std::optional<Decision> d =
          servers[c.server]->Taken(l.Key(), c.cost, c.take, c.sent, answer, receipt, returns);
      give_back();
      if (!d) {
        calls.push_back({c.server, c.cost, c.cost, now});
      } else if (c.cost > 0 && d->allowed) {
        run.admitted[window(now)] += c.cost;
      } else if (c.cost > 0) {
        ++run.denied;
      }
    }
  }
  for (const auto& s : servers) {
    run.local += s->Stats().local;
  }
  run.span = now - At(kEpoch);
  return run;
}

// fixed_window: at most L in every window, and at least L less what each server may hold
// unused when the window ends (1.5 x max).
TEST(SharesTest, AFleetOnAFixedWindowAdmitsBetweenTheBoundAndTheLimit) {
  const Leased l = FixedWindow(500, 20, 300ms);
  const FleetRun run = RunFleet(l, testing::Seed(18));
  ASSERT_GE(run.admitted.size(), 5u);
  for (const auto& [w, units] : run.admitted) {
    EXPECT_LE(units, 500) << "window " << w;
    if (w != run.admitted.rbegin()->first) {
      EXPECT_GE(units, 500 - 3 * 30) << "window " << w;
    }
  }
  EXPECT_GT(run.local, 1000u);
}

// Under its limit (15,000 a second asked of 20,000, more than the bound below it), every
// request is admitted, with far fewer calls than decisions.
TEST(SharesTest, AFleetUnderTheLimitAdmitsEveryRequestWithFewCalls) {
  const Leased l = FixedWindow(20'000, 100, 300ms);
  const FleetRun run = RunFleet(l, testing::Seed(18));
  EXPECT_EQ(run.denied, 0);
  EXPECT_GT(run.requests, 80'000);
  EXPECT_LT(run.calls * 10, run.requests);
}

// sliding_window: its current window's count, so at most L in any fixed window.
TEST(SharesTest, AFleetOnASlidingWindowNeverAdmitsMoreThanTheLimit) {
  const Leased l{
      .limit = MustLimit({.algorithm = Algorithm::kSlidingWindow, .limit = 500, .period = 1s}),
      .policy = {.max = 20, .ttl = 300ms}};
  const FleetRun run = RunFleet(l, testing::Seed(18));
  for (const auto& [w, units] : run.admitted) {
    EXPECT_LE(units, 500) << "window " << w;
  }
  EXPECT_GT(run.local, 0u);
}

// gcra: over the whole run, at most the burst and the rate over the run and one ttl (a share
// taken at t may be used until t + ttl).
TEST(SharesTest, AFleetOnGcraAdmitsAtMostTheBurstAndTheRate) {
  const Leased l{
      .limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = 500, .period = 1s, .burst = 100}),
      .policy = {.max = 20, .ttl = 300ms}};
  const FleetRun run = RunFleet(l, testing::Seed(18));
  int64_t total = 0;
  for (const auto& [w, units] : run.admitted) {
    total += units;
  }
  EXPECT_LE(total, 100 + 500 * (run.span + 300ms) / 1s);
  EXPECT_GE(total, 500 * run.span / 1s / 2);  // Far from nothing.
  EXPECT_GT(run.local, 0u);                   // Near its limit a key is mostly decided exactly.
}

}  // namespace
}  // namespace sluice::internal
