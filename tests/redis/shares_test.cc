// Quota leasing's bookkeeping (src/redis/shares.h) on a manual clock, without Redis: shares
// sized from the rate and capped, refused shares asked again exactly, shares that end with
// their ttl (returned) or their window (lapsed), leaky_bucket's delays, eviction; and a fleet
// of three servers over one pure algorithm standing for Redis, answering calls out of order,
// which never admits more than the limit in a window, nor less than the stated bound.

#include "src/redis/shares.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/algorithms.h"
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

TEST(SharesTest, FirstAskedExactlyThenSharesFollowTheRate) {
  Shares shares(1000);
  const Leased l = FixedWindow(1000, 10, 100ms);
  std::vector<ShareReturn> returns;
  const Timestamp t = At(kEpoch);
  // Nothing known of the key: its own cost.
  Shares::Plan p = shares.Begin(l.Key(), 1, t, returns);
  ASSERT_FALSE(p.local);
  EXPECT_EQ(p.take, 1);
  EXPECT_EQ(shares.Taken(l.Key(), 1, 1, t, Allowed(999, kSecond), returns),
            Allowed(999, kSecond));
  // Two units asked for within the ttl: a share of one beyond this request's.
  p = shares.Begin(l.Key(), 1, t, returns);
  EXPECT_EQ(p.take, 2);
  std::optional<Decision> d = shares.Taken(l.Key(), 1, 2, t, Allowed(997, kSecond), returns);
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
  ASSERT_TRUE(shares.Taken(l.Key(), 0, 3, t + 1ms, Allowed(994, 999ms), returns));
  ASSERT_TRUE(shares.Taken(l.Key(), 1, 1, t + 1ms, Allowed(993, 999ms), returns));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(shares.Begin(l.Key(), 1, t + 2ms, returns).local) << i;
  }
  EXPECT_EQ(shares.Stats().local, 4u);
  EXPECT_EQ(shares.Stats().taken, 2u);
  EXPECT_TRUE(returns.empty());
}

TEST(SharesTest, AShareIsAtMostMaxBurstAndAQuarterOfWhatRemains) {
  std::vector<ShareReturn> returns;
  const Timestamp t = At(kEpoch);
  // The take of the `requests`th request, after Redis answered the first with `remaining`.
  auto take_after = [&](Leased l, int64_t remaining, int requests) {
    Shares shares(1000);
    for (int i = 0; i < requests - 1; ++i) {
      EXPECT_EQ(shares.Begin(l.Key(), 1, t, returns).take, 1);  // Nothing known yet.
    }
    shares.Taken(l.Key(), 1, 1, t, Allowed(remaining, kSecond), returns);
    return shares.Begin(l.Key(), 1, t, returns).take;
  };
  EXPECT_EQ(take_after(FixedWindow(1000, 10, 100ms), 999, 50), 10);  // max
  EXPECT_EQ(take_after(FixedWindow(1000, 100, 100ms), 999, 50), 50);  // the rate
  EXPECT_EQ(take_after(FixedWindow(1000, 100, 100ms), 41, 50), 1 + 10);  // 41 / 4 beyond it
  EXPECT_EQ(take_after(FixedWindow(1000, 100, 100ms), 3, 50), 1);  // exact near the limit
  EXPECT_EQ(take_after(FixedWindow(20, 100, 100ms), 1000, 50), 20);  // the limit itself
}

TEST(SharesTest, ARefusedShareIsAskedAgainExactly) {
  Shares shares(1000);
  const Leased l = FixedWindow(100, 10, 100ms);
  std::vector<ShareReturn> returns;
  const Timestamp t = At(kEpoch);
  shares.Begin(l.Key(), 1, t, returns);
  shares.Taken(l.Key(), 1, 1, t, Allowed(99, kSecond), returns);
  const int64_t take = shares.Begin(l.Key(), 1, t, returns).take;
  ASSERT_EQ(take, 2);
  const Decision refused{.remaining = 1, .reset_after = kSecond, .retry_after = kSecond};
  EXPECT_FALSE(shares.Taken(l.Key(), 1, take, t, refused, returns));
  EXPECT_EQ(shares.Stats().denied, 1u);
  // Redis said 1 remains: a quarter of it is nothing, so the next is asked exactly.
  EXPECT_EQ(shares.Begin(l.Key(), 1, t, returns).take, 1);
}

TEST(SharesTest, AShareEndsWithItsTtlAndIsReturned) {
  Shares shares(1000);
  const Leased l = FixedWindow(1000, 10, 100ms);
  std::vector<ShareReturn> returns;
  const Timestamp t = At(kEpoch);
  for (int i = 0; i < 9; ++i) {
    shares.Begin(l.Key(), 1, t, returns);
  }
  shares.Taken(l.Key(), 1, 1, t, Allowed(999, kSecond), returns);
  ASSERT_EQ(shares.Begin(l.Key(), 1, t, returns).take, 10);
  shares.Taken(l.Key(), 1, 10, t, Allowed(980, kSecond), returns);
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
  for (int i = 0; i < 9; ++i) {
    shares.Begin(l.Key(), 1, t, returns);
  }
  shares.Taken(l.Key(), 1, 1, t, Allowed(999, 50ms), returns);
  ASSERT_EQ(shares.Begin(l.Key(), 1, t, returns).take, 10);
  shares.Taken(l.Key(), 1, 10, t, Allowed(980, 50ms), returns);
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
      .limit = MustLimit({.algorithm = Algorithm::kLeakyBucket, .limit = 10, .period = 1s,
                          .burst = 100}),
      .policy = {.max = 4, .ttl = 10s}};
  std::vector<ShareReturn> returns;
  const Timestamp t = At(kEpoch);
  for (int i = 0; i < 3; ++i) {
    shares.Begin(l.Key(), 1, t, returns);
  }
  shares.Taken(l.Key(), 1, 1, t,
               {.allowed = true, .remaining = 99, .reset_after = 100ms, .delay = 0ms}, returns);
  ASSERT_EQ(shares.Begin(l.Key(), 1, t, returns).take, 4);
  // The share's first unit waits 300 ms (three ahead of it); this request uses it.
  std::optional<Decision> d = shares.Taken(
      l.Key(), 1, 4, t, {.allowed = true, .remaining = 93, .reset_after = 700ms, .delay = 300ms},
      returns);
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
  shares.Taken(l.Key(), 1, 1, t, Allowed(999, kSecond), returns);
  shares.Begin(l.Key(), 1, t, returns);
  shares.Taken(l.Key(), 1, 2, t, Allowed(997, kSecond), returns);
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

// Three servers share one fixed window held by a pure algorithm standing for Redis, which
// answers the calls in flight in random order, at its own time (it decides the window), and
// every server sees a request at every step: the fleet admits at most L in every window, and
// at least L minus what each server may hold unused when the window ends (1.5 x max).
TEST(SharesTest, AFleetAdmitsBetweenTheBoundAndTheLimitInEveryWindow) {
  testing::Random random(testing::Seed(18));
  const Leased l = FixedWindow(500, 20, 300ms);
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
  std::map<int64_t, int64_t> admitted;  // Window -> units.
  std::vector<ShareReturn> returns;
  auto window = [](Timestamp t) { return t.time_since_epoch().count() / 1'000'000; };
  Timestamp now = At(kEpoch);
  // What a give-back does to a fixed window: the units leave its count if it is the window
  // that charged them.
  auto give_back = [&] {
    for (const ShareReturn& r : returns) {
      auto& state = std::get<FixedWindowState>(redis);
      if (state.last / 1'000'000 == r.sent.time_since_epoch().count() / 1'000'000) {
        state.count -= r.units;
      }
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
      if (p.local) {
        admitted[window(now)] += 1;
        if (p.refill > 0) {
          calls.push_back({s, 0, p.refill, now});
        }
      } else {
        calls.push_back({s, 1, p.take, now});
      }
    }
    // Each call in flight is answered at this step or later, in any order.
    std::deque<InFlight> later;
    std::deque<InFlight> now_answered;
    for (const InFlight& c : calls) {
      (random.OneIn(2) ? now_answered : later).push_back(c);
    }
    calls.swap(later);
    for (size_t i = now_answered.size(); i > 1; --i) {
      std::swap(now_answered[i - 1],
                now_answered[static_cast<size_t>(random.Between(0, static_cast<int64_t>(i) - 1))]);
    }
    for (const InFlight& c : now_answered) {
      const Decision answer = Decide(l.limit, redis, now, c.take);
      const std::optional<Decision> d =
          servers[c.server]->Taken(l.Key(), c.cost, c.take, c.sent, answer, returns);
      if (!d) {
        calls.push_back({c.server, c.cost, c.cost, now});
      } else if (c.cost > 0 && d->allowed) {
        admitted[window(now)] += c.cost;
      }
    }
  }
  uint64_t local = 0;
  for (const auto& s : servers) {
    local += s->Stats().local;
  }
  ASSERT_GE(admitted.size(), 5u);
  for (const auto& [w, units] : admitted) {
    EXPECT_LE(units, 500) << "window " << w;
    if (w != admitted.rbegin()->first) {
      EXPECT_GE(units, 500 - kServers * 30) << "window " << w;
    }
  }
  EXPECT_GT(local, 1000u);
}

}  // namespace
}  // namespace sluice::internal
