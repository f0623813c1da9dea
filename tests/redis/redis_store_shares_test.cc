// Quota leasing against a real redis-server: three RedisStores with shares on (three servers
// of a fleet) on one hot key, hammered by threads. Windows are attributed without timing
// assumptions: the stores decide at the caller's time, and every request of window w is
// answered before any of window w + 1 is made (the threads of a window are joined), so Redis
// and the shares both see each request in the window its time names. The threads read one
// clock, as servers do: a count of the window's requests, which spreads them over it.

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/clock.h"
#include "sluice/limit.h"
#include "sluice/redis_store.h"
#include "sluice/store.h"
#include "tests/redis/fixtures.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using testing::MustStore;
using testing::RedisServer;
using namespace std::chrono_literals;

constexpr int kStores = 3;
constexpr int kThreadsPerStore = 2;

// A store on `redis` with shares on, as the tests' others are otherwise.
std::unique_ptr<RedisStore> LeasingStore(const RedisServer& redis) {
  RedisStoreOptions options = testing::OptionsFor(redis);
  options.shares = true;
  return MustStore(options);
}

struct WindowCount {
  int64_t admitted = 0;
  int64_t requests = 0;
};

// Runs `windows` windows of 1 s of `requests` requests per thread, spread over the window, on
// `limit` with `policy`, through kStores stores; what each window admitted.
// Adds the stores' stats to `stats`.
std::vector<WindowCount> Hammer(const RedisServer& redis, const Limit& limit,
                                const SharePolicy& policy, int windows, int requests,
                                RedisStoreStats& stats) {
  std::vector<std::unique_ptr<RedisStore>> stores;
  for (int s = 0; s < kStores; ++s) {
    stores.push_back(LeasingStore(redis));
  }
  const LimitedKey key{.limit = &limit, .key = "hot", .share = &policy};
  std::vector<WindowCount> counts;
  for (int w = 0; w < windows; ++w) {
    const int64_t start = kEpoch + w * 1'000'000;
    std::atomic<int64_t> admitted{0};
    std::atomic<int64_t> made{0};
    const int64_t total = int64_t{requests} * kStores * kThreadsPerStore;
    std::vector<std::thread> threads;
    for (int t = 0; t < kStores * kThreadsPerStore; ++t) {
      threads.emplace_back([&, t] {
        RedisStore& store = *stores[static_cast<size_t>(t % kStores)];
        for (int i = 0; i < requests; ++i) {
          Decision each;
          const Timestamp now = At(start + made.fetch_add(1) * 1'000'000 / total);
          const absl::StatusOr<Decision> d = store.DecideAll({&key, 1}, 1, now, {&each, 1});
          ASSERT_TRUE(d.ok()) << d.status();
          admitted += d->allowed ? 1 : 0;
        }
      });
    }
    for (std::thread& t : threads) {
      t.join();
    }
    counts.push_back({.admitted = admitted.load(), .requests = total});
  }
  for (const auto& store : stores) {
    const RedisStoreStats s = store->Stats();
    stats.script_calls += s.script_calls;
    stats.share_decisions += s.share_decisions;
    stats.shares_taken += s.shares_taken;
  }
  return counts;
}

// Three times the limit asked for in every window, with shares living `ttl`: at most L
// admitted, and at least L less what each store may hold unused when the window ends
// (1.5 x max). Returns the stores' stats.
RedisStoreStats ExpectWithinTheBound(Micros ttl, int windows) {
  RedisServer redis;
  const Limit limit = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 300, .period = 1s});
  const SharePolicy policy{.max = 20, .ttl = ttl};
  RedisStoreStats stats;
  const std::vector<WindowCount> counts = Hammer(redis, limit, policy, windows, 150, stats);
  for (size_t w = 0; w < counts.size(); ++w) {
    EXPECT_LE(counts[w].admitted, 300) << "window " << w;
    EXPECT_GE(counts[w].admitted, 300 - kStores * 30) << "window " << w;
  }
  return stats;
}

// Shares that live to the end of their window (their ttl is longer).
TEST(RedisSharesTest, AHotKeyOverItsLimitAdmitsBetweenTheBoundAndTheLimitPerWindow) {
  EXPECT_GT(ExpectWithinTheBound(10s, 6).share_decisions, 0u);
}

// Shares that end by their ttl within the window, giving back what they did not use as the
// load goes on.
TEST(RedisSharesTest, ShortSharesGivenBackKeepTheSameBounds) { ExpectWithinTheBound(30ms, 4); }

// Under its limit every request is admitted, with far fewer script calls than decisions.
TEST(RedisSharesTest, AHotKeyUnderItsLimitIsAdmittedWithFewRedisCalls) {
  RedisServer redis;
  const Limit limit =
      MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 5000, .period = 1s});
  const SharePolicy policy{.max = 100, .ttl = 10s};
  RedisStoreStats stats;
  const std::vector<WindowCount> counts = Hammer(redis, limit, policy, 4, 500, stats);
  int64_t decisions = 0;
  for (size_t w = 0; w < counts.size(); ++w) {
    EXPECT_EQ(counts[w].admitted, counts[w].requests) << "window " << w;
    decisions += counts[w].requests;
  }
  EXPECT_LT(stats.script_calls * 4, static_cast<uint64_t>(decisions))
      << stats.script_calls << " script calls for " << decisions << " decisions";
  EXPECT_GT(stats.shares_taken, 0u);
}

// A share refused by Redis (others took what remained) leaves the request to be decided
// exactly: with the limit nearly spent by another store, the leasing one still gets the
// last units, and no more.
TEST(RedisSharesTest, NearItsLimitAKeyIsDecidedExactly) {
  RedisServer redis;
  const Limit limit = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 100, .period = 1s});
  const SharePolicy policy{.max = 50, .ttl = 10s};
  auto leasing = LeasingStore(redis);
  auto exact = MustStore(testing::OptionsFor(redis));
  const LimitedKey leased{.limit = &limit, .key = "k", .share = &policy};
  const LimitedKey plain{.limit = &limit, .key = "k"};
  int64_t admitted = 0;
  Decision each;
  for (int i = 0; i < 20; ++i) {  // The leasing store learns the key and takes shares.
    admitted += leasing->DecideAll({&leased, 1}, 1, At(kEpoch + i), {&each, 1})->allowed;
  }
  while (exact->DecideAll({&plain, 1}, 1, At(kEpoch + 100), {&each, 1})->allowed) {
    ++admitted;
  }
  for (int i = 0; i < 200; ++i) {
    admitted += leasing->DecideAll({&leased, 1}, 1, At(kEpoch + 200 + i), {&each, 1})->allowed;
  }
  EXPECT_EQ(admitted, 100);
}

// A share whose ttl ends gives back what it did not use: Redis's count comes back to what was
// admitted.
TEST(RedisSharesTest, WhatAShareDidNotUseIsGivenBackWhenItsTtlEnds) {
  RedisServer redis;
  const Limit limit =
      MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 1000, .period = 1s});
  const SharePolicy policy{.max = 10, .ttl = 10ms};
  auto leasing = LeasingStore(redis);
  auto exact = MustStore(testing::OptionsFor(redis));
  const LimitedKey leased{.limit = &limit, .key = "k", .share = &policy};
  Decision each;
  int64_t admitted = 0;
  for (int i = 0; i < 12; ++i) {
    admitted += leasing->DecideAll({&leased, 1}, 1, At(kEpoch + i), {&each, 1})->allowed;
  }
  ASSERT_EQ(admitted, 12);
  ASSERT_GT(leasing->Stats().shares_taken, 0u);
  // Later in the window, on another key: the store's time moves past the share's ttl.
  const LimitedKey other{.limit = &limit, .key = "other", .share = &policy};
  ASSERT_TRUE(leasing->DecideAll({&other, 1}, 1, At(kEpoch + 500'000), {&each, 1}).ok());
  int64_t remaining = 0;
  for (int tries = 0; tries < 6000; ++tries) {  // A watchdog of 60 s.
    remaining = exact->Decide(limit, "k", 0, At(kEpoch + 500'000))->remaining;
    if (remaining == 1000 - admitted) {
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(remaining, 1000 - admitted);
  EXPECT_GT(leasing->Stats().share_units_returned, 0u);
}

// sluiced passes the system clock's time; set back, that clock must not keep a share alive
// past the window Redis charged it in, which ends on Redis's clock (TIME, as in production).
TEST(RedisSharesTest, AClockSetBackDoesNotStretchAShareIntoTheNextWindow) {
  RedisServer redis;
  RedisStoreOptions options = testing::OptionsFor(redis);
  options.use_caller_time = false;
  options.shares = true;
  std::unique_ptr<RedisStore> store = MustStore(options);
  // Windows of 1 s and shares that would live a minute: only the window can end one.
  const Limit limit = MustLimit({.limit = 100'000, .period = 1s});
  const SharePolicy policy{.max = 100, .ttl = 60s};
  const LimitedKey key{.limit = &limit, .key = "stepped", .share = &policy};
  Decision each;
  // Until shares have grown (refilled at half used) and the last request, at `last`, was
  // answered from one: a share is held, in its window at `last`, with units left.
  Timestamp last;
  uint64_t before_last = 0;
  for (int i = 0; i < 10'000; ++i) {
    last = SystemClock().Now();
    before_last = store->Stats().share_decisions;
    ASSERT_TRUE(store->DecideAll({&key, 1}, 1, last, {&each, 1}).ok());
    if (store->Stats().share_decisions >= 300 && store->Stats().share_decisions > before_last) {
      break;
    }
  }
  ASSERT_GE(store->Stats().share_decisions, 300u) << "shares were not used";
  std::this_thread::sleep_for(1100ms);  // The share's window has ended, on every clock.
  // The clock set back to `last`, when the share was still in its window.
  const uint64_t from_shares = store->Stats().share_decisions;
  ASSERT_TRUE(store->DecideAll({&key, 1}, 1, last, {&each, 1}).ok());
  EXPECT_EQ(store->Stats().share_decisions, from_shares)
      << "answered from a share of a window that has ended";
}

}  // namespace
}  // namespace sluice
