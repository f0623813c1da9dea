// The denial cache in RedisStore, against a real redis-server: several stores (a fleet) share
// one Redis, some with the cache and some without, on seeded random traces of every algorithm,
// one limit and two; each decision is checked against a reference store without the cache
// deciding the same trace on keys of its own. Then an abusive key at 50 times its limit.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/give_back.h"
#include "sluice/redis_store.h"
#include "tests/redis/fixtures.h"
#include "tests/testing/random.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using namespace std::chrono_literals;

// Three stores of a fleet on the keys "fleet:...", the first two with the cache, and a
// reference without it on "ref:...".
struct Fleet {
  explicit Fleet(const testing::RedisServer& server) {
    for (int i = 0; i < 3; ++i) {
      RedisStoreOptions options = testing::OptionsFor(server);
      options.key_prefix = "fleet:";
      options.deny_cache_entries = i < 2 ? 1000 : 0;
      options.deny_cache_max_ttl = std::chrono::hours(24 * 1000);  // Test time runs days.
      stores.push_back(testing::MustStore(options));
    }
    RedisStoreOptions options = testing::OptionsFor(server);
    options.key_prefix = "ref:";
    reference = testing::MustStore(options);
  }
  uint64_t answered_locally() const {
    uint64_t n = 0;
    for (const auto& s : stores) {
      n += s->Stats().denials_answered_locally;
    }
    return n;
  }
  std::vector<std::unique_ptr<RedisStore>> stores;
  std::unique_ptr<RedisStore> reference;
};

// Decides `requests` at `t` on `store` and on the reference; checks what docs/redis.md says of
// a denial answered locally, and that Redis's own answers are the reference's, figure for
// figure. Returns whether it was answered locally.
bool DecideBoth(RedisStore& store, RedisStore& reference, std::span<const LimitedKey> requests,
                int64_t cost, int64_t t, const std::string& where) {
  const uint64_t before = store.Stats().denials_answered_locally;
  std::vector<Decision> got_each(requests.size());
  std::vector<Decision> want_each(requests.size());
  absl::StatusOr<Decision> got = store.DecideAll(requests, cost, At(t), got_each);
  absl::StatusOr<Decision> want = reference.DecideAll(requests, cost, At(t), want_each);
  EXPECT_TRUE(got.ok() && want.ok()) << got.status() << want.status() << where;
  if (!got.ok() || !want.ok()) {
    return false;
  }
  EXPECT_EQ(got->allowed, want->allowed) << where;  // The decision: always exact.
  const bool local = store.Stats().denials_answered_locally > before;
  if (!local) {
    EXPECT_EQ(*got, *want) << where;
    EXPECT_EQ(got_each, want_each) << where;
    return false;
  }
  // Answered locally: a denial, whose figures are bounds of Redis's.
  EXPECT_FALSE(got->allowed) << where;
  EXPECT_EQ(got->never_allowed(), want->never_allowed()) << where;
  if (!want->never_allowed()) {
    EXPECT_GE(got->retry_after, 1us) << where;
    EXPECT_LE(got->retry_after, want->retry_after) << where;
  }
  EXPECT_LE(got->reset_after, want->reset_after) << where;
  EXPECT_EQ(got->delay, 0us) << where;
  for (size_t i = 0; i < requests.size(); ++i) {
    // A limit denied here is denied by Redis too; the others' figures are last known.
    if (!got_each[i].allowed) {
      EXPECT_FALSE(want_each[i].allowed) << where << " limit " << i;
      if (!got_each[i].never_allowed()) {
        EXPECT_LE(got_each[i].retry_after, want_each[i].retry_after) << where << " limit " << i;
        EXPECT_LT(got_each[i].remaining, cost) << where << " limit " << i;
      }
    }
    EXPECT_LE(got_each[i].reset_after, want_each[i].reset_after) << where << " limit " << i;
    EXPECT_GE(got_each[i].remaining, 0) << where << " limit " << i;
  }
  return true;
}

class DenyCacheFleetTest : public ::testing::TestWithParam<Algorithm> {};

// A random limit for `store`; in three draws of four, one of at most 100 units, which a trace
// of 120 steps can exhaust.
Limit SmallLimitMostly(testing::Random& rnd, const Store& store, Algorithm algorithm) {
  const bool small = !rnd.OneIn(4);
  while (true) {
    if (const Limit l = rnd.LimitFor(store, algorithm); !small || l.burst() <= 100) {
      return l;
    }
  }
}

// Random limits of the algorithm, each with a trace over three keys made by the three stores
// in turn at random, times never going back (as Redis's clock): one limit, then two (the
// algorithm's and another's, on a user key and an address key).
TEST_P(DenyCacheFleetTest, DecidesAsRedisAloneOnRandomTracesOfSeveralServers) {
  testing::RedisServer server;
  Fleet fleet(server);
  testing::Random rnd(testing::Seed(20261210) + static_cast<uint64_t>(GetParam()));
  const std::vector<std::string> users = {"{alice}", "{bob}", "{carol}"};
  int local = 0;
  int local_two = 0;
  for (int round = 0; round < 24; ++round) {
    std::vector<Limit> limits = {SmallLimitMostly(rnd, *fleet.reference, GetParam())};
    const bool two = round % 2 == 1;
    if (two) {
      const auto other = static_cast<Algorithm>(rnd.Between(0, 6));
      limits.push_back(SmallLimitMostly(rnd, *fleet.reference, other));
    }
    int64_t t = kEpoch + rnd.Between(0, 1'000'000'000) + round * 1'000'000'000'000LL;
    for (int i = 0; i < 120; ++i) {
      // Costs 1 mostly, to repeat denials; gaps mostly short, to repeat them soon.
      t += rnd.OneIn(3) ? rnd.Gap(limits[0]) : rnd.Between(0, 3);
      const int64_t cost = rnd.OneIn(4) ? rnd.Cost(limits[0]) : 1;
      const std::string& user = users[static_cast<size_t>(rnd.Between(0, 2))];
      const std::string ip = user + ":ip" + std::to_string(rnd.Between(0, 1));
      std::vector<LimitedKey> requests = {{&limits[0], user}};
      if (two) {
        requests.push_back({&limits[1], ip});
      }
      RedisStore& store = *fleet.stores[static_cast<size_t>(rnd.Between(0, 2))];
      const std::string where = limits[0].ToString() + (two ? " + " + limits[1].ToString() : "") +
                                " round " + std::to_string(round) + " step " + std::to_string(i);
      if (DecideBoth(store, *fleet.reference, requests, cost, t, where)) {
        ++local;
        local_two += two ? 1 : 0;
      }
      if (::testing::Test::HasFailure()) {
        return;
      }
    }
  }
  EXPECT_GT(local, 50);      // The traces exercise the cache,
  EXPECT_GT(local_two, 10);  // on two limits too.  // The traces exercise the cache.
  EXPECT_EQ(fleet.answered_locally(), static_cast<uint64_t>(local));
  EXPECT_EQ(fleet.stores[2]->Stats().denials_answered_locally, 0u);  // No cache, none.
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, DenyCacheFleetTest,
                         ::testing::ValuesIn(testing::AllAlgorithms()), testing::AlgorithmTestName);

// One key at 50 times its limit (10 per second, 500 requests a second for 3 s), every algorithm: a
// store with the cache asks Redis far less often, and decides exactly as one without it.
TEST(RedisDenyCacheTest, AnAbusiveKeyCostsFewerScriptCalls) {
  testing::RedisServer server;
  RedisStoreOptions options = testing::OptionsFor(server);
  options.key_prefix = "with:";
  options.deny_cache_entries = 100;
  std::unique_ptr<RedisStore> with = testing::MustStore(options);
  options.key_prefix = "without:";
  options.deny_cache_entries = 0;
  std::unique_ptr<RedisStore> without = testing::MustStore(options);
  for (Algorithm a : testing::AllAlgorithms()) {
    const Limit limit =
        testing::MustLimit({.algorithm = a, .limit = 10, .period = 1s, .buckets = 10});
    const RedisStoreStats with_before = with->Stats();
    const RedisStoreStats without_before = without->Stats();
    int allowed = 0;
    for (int64_t t = kEpoch; t < kEpoch + 3'000'000; t += 2'000) {
      absl::StatusOr<Decision> a1 = with->Decide(limit, "abuser", 1, At(t));
      absl::StatusOr<Decision> a2 = without->Decide(limit, "abuser", 1, At(t));
      ASSERT_TRUE(a1.ok() && a2.ok()) << a1.status() << a2.status();
      ASSERT_EQ(a1->allowed, a2->allowed) << limit.ToString() << " at " << t - kEpoch;
      allowed += a1->allowed ? 1 : 0;
    }
    const RedisStoreStats w = with->Stats();
    const RedisStoreStats wo = without->Stats();
    const uint64_t saved = w.denials_answered_locally - with_before.denials_answered_locally;
    const uint64_t with_calls = w.script_calls - with_before.script_calls;
    const uint64_t without_calls = wo.script_calls - without_before.script_calls;
    EXPECT_LE(allowed, 40) << limit.ToString();  // At most the limit per second, and a burst.
    EXPECT_GT(saved, 0u) << limit.ToString();
    EXPECT_EQ(with_calls + saved, without_calls) << limit.ToString();
    EXPECT_LT(with_calls * 5, without_calls) << limit.ToString();  // Far fewer.
  }
}

// The same on Redis's clock and the store's steady clock, from two threads: the cache answers
// some denials, and the key is never allowed more than its limit per window.
TEST(RedisDenyCacheTest, OnRedisTimeAnAbusiveKeyStaysWithinItsLimit) {
  testing::RedisServer server;
  RedisStoreOptions options = testing::OptionsFor(server);
  options.use_caller_time = false;
  options.deny_cache_entries = 100;
  std::unique_ptr<RedisStore> store = testing::MustStore(options);
  const Limit limit = testing::MustLimit({.limit = 5, .period = 200ms});
  std::atomic<int> allowed{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  // Until the cache has answered a denial (which needs a window filled, however slow the
  // machine), for at least 1 s; 60 s is only a watchdog.
  const auto go_on = [&] {
    const auto elapsed = std::chrono::steady_clock::now() - start;
    return elapsed < 1s || (store->Stats().denials_answered_locally == 0 && elapsed < 60s);
  };
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&] {
      while (go_on()) {
        absl::StatusOr<Decision> d = store->Decide(limit, "abuser", 1, At(kEpoch));
        ASSERT_TRUE(d.ok()) << d.status();
        allowed += d->allowed ? 1 : 0;
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  const int64_t windows = elapsed / 200ms + 2;  // Those the run touched.
  EXPECT_LE(allowed.load(), 5 * windows);
  const RedisStoreStats stats = store->Stats();
  EXPECT_GT(stats.denials_answered_locally, 0u);
  EXPECT_LE(stats.script_calls, stats.calls - stats.denials_answered_locally);
}

// A give-back of this store frees units sooner than time: its limit's denial is forgotten, and
// the next request goes to Redis, which allows it. A charge denied from memory charged nothing.
TEST(RedisDenyCacheTest, AGiveBackOfThisStoreIsNotAnsweredFromAnOlderDenial) {
  testing::RedisServer server;
  RedisStoreOptions options = testing::OptionsFor(server);
  options.deny_cache_entries = 10;
  std::unique_ptr<RedisStore> store = testing::MustStore(options);
  const Limit limit = testing::MustLimit({.limit = 2, .period = 1s});
  const LimitedKey request{&limit, "carl"};
  const int64_t t = kEpoch;
  Decision each;
  Charge charges[2];
  ASSERT_TRUE(store->ChargeAll({&request, 1}, 1, At(t), {&each, 1}, {&charges[0], 1})->allowed);
  ASSERT_TRUE(store->ChargeAll({&request, 1}, 1, At(t), {&each, 1}, {&charges[1], 1})->allowed);
  EXPECT_EQ(charges[1].units, 1);
  EXPECT_FALSE(store->Decide(limit, "carl", 1, At(t + 10))->allowed);  // Redis: denied.
  EXPECT_FALSE(store->Decide(limit, "carl", 1, At(t + 20))->allowed);  // From memory.
  Charge none{.units = 7};
  EXPECT_FALSE(store->ChargeAll({&request, 1}, 1, At(t + 30), {&each, 1}, {&none, 1})->allowed);
  EXPECT_EQ(none, Charge{});
  EXPECT_EQ(store->Stats().denials_answered_locally, 2u);
  ASSERT_TRUE(store->GiveBackAll({&request, 1}, {&charges[1], 1}, At(t + 40), {&each, 1}).ok());
  absl::StatusOr<Decision> after = store->Decide(limit, "carl", 1, At(t + 50));
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(after->allowed);
  EXPECT_EQ(store->Stats().denials_answered_locally, 2u);
}

}  // namespace
}  // namespace sluice
