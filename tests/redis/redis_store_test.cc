// RedisStore against a real redis-server: its URLs and key names, and the same decisions as
// MemoryStore on random traces for every algorithm, leases, large numbers and several limits
// at once, with an expiry on every key. The failures and policies, AUTH, a fleet of processes
// and Redis Cluster are in redis_store_failures_test.cc and redis_store_cluster_test.cc.

#include "sluice/redis_store.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "sluice/memory_store.h"
#include "tests/redis/fixtures.h"
#include "tests/testing/random.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/several_limits.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using testing::MustStore;
using testing::OptionsFor;
using testing::RedisServer;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------------
// URLs

TEST(RedisUrlTest, ReadsHostPortDatabaseAndCredentials) {
  absl::StatusOr<RedisStoreOptions> o = ParseRedisUrl("redis://alice:p%40ss@cache.internal:6380/3");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->cluster);
  EXPECT_EQ(o->endpoints, (std::vector<RedisEndpoint>{{"cache.internal", 6380}}));
  EXPECT_EQ(o->user, "alice");
  EXPECT_EQ(o->password, "p@ss");
  EXPECT_EQ(o->database, 3);

  o = ParseRedisUrl("redis://localhost");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->endpoints, (std::vector<RedisEndpoint>{{"localhost", 6379}}));
  EXPECT_EQ(o->password, "");
  EXPECT_EQ(o->database, 0);

  o = ParseRedisUrl("redis://:secret@[::1]:7000");  // Password only, IPv6.
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->endpoints, (std::vector<RedisEndpoint>{{"::1", 7000}}));
  EXPECT_EQ(o->user, "");
  EXPECT_EQ(o->password, "secret");

  o = ParseRedisUrl("redis+cluster://10.0.0.1:7000,10.0.0.2:7001,10.0.0.3");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->cluster);
  EXPECT_EQ(o->endpoints, (std::vector<RedisEndpoint>{
                              {"10.0.0.1", 7000}, {"10.0.0.2", 7001}, {"10.0.0.3", 6379}}));
}

TEST(RedisUrlTest, RefusesWhatItCannotReadNamingThePart) {
  auto error = [](std::string_view url) {
    absl::StatusOr<RedisStoreOptions> o = ParseRedisUrl(url);
    EXPECT_FALSE(o.ok()) << url;
    return std::string(o.status().message());
  };
  EXPECT_THAT(error("http://localhost:6379"), ::testing::HasSubstr("expected redis://"));
  EXPECT_THAT(error("redis://localhost:0"), ::testing::HasSubstr("port '0'"));
  EXPECT_THAT(error("redis://localhost:99999"), ::testing::HasSubstr("port '99999'"));
  EXPECT_THAT(error("redis://localhost:63x9"), ::testing::HasSubstr("port '63x9'"));
  EXPECT_THAT(error("redis://:6379"), ::testing::HasSubstr("no host"));
  EXPECT_THAT(error("redis://localhost/db"), ::testing::HasSubstr("database 'db'"));
  EXPECT_THAT(error("redis://a:1,b:2"), ::testing::HasSubstr("redis+cluster://"));
  EXPECT_THAT(error("redis+cluster://a:1/2"), ::testing::HasSubstr("only database 0"));
  EXPECT_THAT(error("redis://u:%zz@host"), ::testing::HasSubstr("two hex digits"));
  // The password never appears in a message.
  EXPECT_THAT(error("redis://u:hunter2@host:0"), ::testing::Not(::testing::HasSubstr("hunter2")));
  EXPECT_EQ(RedactRedisUrl("redis://u:hunter2@host:1"), "redis://u:***@host:1");
  EXPECT_EQ(RedactRedisUrl("redis://host:1"), "redis://host:1");
}

// ---------------------------------------------------------------------------------------------
// Limits, keys

TEST(RedisStoreTest, RefusesLimitsItCannotDecideExactlyInDoubles) {
  RedisServer server;
  std::unique_ptr<RedisStore> store = MustStore(OptionsFor(server));
  // 7 per 13 hours with a burst of 10^9: B x P' = 10^9 x 4.68e10 / 1, far past 2^52.
  const Limit odd =
      MustLimit({.algorithm = Algorithm::kGcra, .limit = 7, .period = 13h, .burst = 1'000'000'000});
  const absl::Status s = store->CheckLimit(odd);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), ::testing::HasSubstr("2^52"));
  EXPECT_FALSE(store->Decide(odd, "k", 1, At(kEpoch)).ok());
  // The same burst at a round rate is fine: 10^9 per 1000 s is 10^6 per second, P' = 1 us.
  EXPECT_TRUE(store
                  ->CheckLimit(MustLimit(
                      {.algorithm = Algorithm::kGcra, .limit = 1'000'000'000, .period = 1000s}))
                  .ok());
  // The memory store's own bound on sliding_log holds here too.
  EXPECT_FALSE(store
                   ->CheckLimit(MustLimit({.algorithm = Algorithm::kSlidingLog,
                                           .limit = MemoryStore::kMaxSlidingLogLimit + 1,
                                           .period = 1s}))
                   .ok());
  EXPECT_FALSE(store
                   ->CheckLimit(MustLimit({.algorithm = Algorithm::kSlidingBuckets,
                                           .limit = 10,
                                           .period = 1s,
                                           .buckets = 20'000}))
                   .ok());
}

TEST(RedisStoreTest, KeysNameTheLimitAndCarryAHashTag) {
  RedisServer server;
  std::unique_ptr<RedisStore> store = MustStore(OptionsFor(server));
  const Limit gcra =
      MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s, .burst = 20});
  const Limit window = MustLimit({.limit = 5, .period = 1min});
  EXPECT_EQ(store->RedisKey(gcra, "alice"), "sluice:g10/1000000b20:{alice}");
  EXPECT_EQ(store->RedisKey(window, "alice"), "sluice:f5/60000000:{alice}");
  // A key with its own tag keeps it: "{alice}:ip" and "{alice}:user" share a slot.
  EXPECT_EQ(store->RedisKey(window, "{alice}:ip"), "sluice:f5/60000000:={alice}:ip");
  // A '}' that would end the tag early: the tag is a digest, and the key follows.
  const std::string odd = store->RedisKey(window, "a}b");
  EXPECT_TRUE(odd.starts_with("sluice:f5/60000000:#{")) << odd;
  EXPECT_TRUE(odd.ends_with("}a}b")) << odd;
  EXPECT_EQ(odd.size(), std::string("sluice:f5/60000000:#{0123456789abcdef}a}b").size());
}

// Each form of Redis key starts with its own character: no caller key can reach another's
// state ("{alice}" is not "alice").
TEST(RedisStoreTest, KeysThatLookAlikeKeepStatesApart) {
  RedisServer server;
  std::unique_ptr<RedisStore> store = MustStore(OptionsFor(server));
  const Limit window = MustLimit({.limit = 3, .period = 1min});
  const std::vector<std::string> keys = {"alice", "{alice}", "=alice", "#{x}alice", "a}b"};
  for (const std::string& key : keys) {
    absl::StatusOr<Decision> d = store->Decide(window, key, 1, At(kEpoch));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->remaining, 2) << key;  // Each key's first request.
  }
}

// ---------------------------------------------------------------------------------------------
// The differential test: Redis and memory, same trace, same figures.

struct Step {
  int64_t time;
  int key;
  int64_t cost;
};

class RedisDifferentialTest : public ::testing::TestWithParam<Algorithm> {};

// Random limits of the algorithm, each with a trace over three keys: gaps from none to days,
// now and then a step back in time, costs 0, 1 and past the burst. The trace goes to Redis
// asynchronously, all at once, on one connection (so in order) with batching; the same
// trace goes through a MemoryStore one call at a time.
TEST_P(RedisDifferentialTest, DecidesAsTheMemoryStoreDoesFigureForFigure) {
  RedisServer server;
  RedisStoreOptions options = OptionsFor(server);
  options.connections = 1;
  options.pipeline = 2;
  options.batch = 8;
  std::unique_ptr<RedisStore> redis = MustStore(options);
  testing::Random rnd(testing::Seed(20261122) + static_cast<uint64_t>(GetParam()));
  const std::vector<std::string> keys = {"alice", "bob", "{carol}:x"};
  int compared = 0;
  int allowed = 0;
  int denied = 0;
  testing::Client client(server.port());
  for (int round = 0; round < 25; ++round) {
    client.Run({"FLUSHALL"});  // Each round starts afresh, as its MemoryStore does.
    MemoryStore memory;
    const Limit limit = rnd.LimitFor(*redis, GetParam());
    std::vector<Step> trace;
    int64_t t = kEpoch + rnd.Between(0, 1'000'000'000);
    for (int i = 0; i < 120; ++i) {
      t += rnd.OneIn(25) ? -rnd.Between(1, 2 * limit.period().count()) : rnd.Gap(limit);
      trace.push_back({t, static_cast<int>(rnd.Between(0, 2)), rnd.Cost(limit)});
    }
    std::vector<Decision> from_redis(trace.size());
    std::vector<std::promise<absl::StatusOr<Decision>>> done(trace.size());
    for (size_t i = 0; i < trace.size(); ++i) {
      const LimitedKey request{&limit, keys[static_cast<size_t>(trace[i].key)]};
      redis->DecideAllAsync({&request, 1}, trace[i].cost, At(trace[i].time), {&from_redis[i], 1},
                            [&done, i](absl::StatusOr<Decision> d) { done[i].set_value(d); });
    }
    // Every answer first (the callbacks write into this frame), then the comparison.
    std::vector<absl::StatusOr<Decision>> got;
    for (auto& d : done) {
      got.push_back(d.get_future().get());
    }
    for (size_t i = 0; i < trace.size(); ++i) {
      ASSERT_TRUE(got[i].ok()) << got[i].status();
      absl::StatusOr<Decision> want = memory.Decide(limit, keys[static_cast<size_t>(trace[i].key)],
                                                    trace[i].cost, At(trace[i].time));
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_EQ(*got[i], *want) << limit.ToString() << " round " << round << " step " << i << " at "
                                << trace[i].time << " key " << trace[i].key << " cost "
                                << trace[i].cost;
      ++compared;
      (want->allowed ? allowed : denied) += 1;
    }
  }
  EXPECT_EQ(compared, 25 * 120);
  EXPECT_GT(allowed, 300);  // The traces exercise both answers.
  EXPECT_GT(denied, 100);
  const RedisStoreStats stats = redis->Stats();
  EXPECT_EQ(stats.calls, 25u * 120);
  EXPECT_LT(stats.script_calls, stats.calls);  // Calls in flight together shared script calls.
  EXPECT_EQ(stats.failures, 0u);

  // No key lives forever: every key the store wrote (in the last round) carries an expiry.
  testing::Reply keys_reply = client.Run({"KEYS", "sluice:*"});
  ASSERT_TRUE(keys_reply && keys_reply->type == REDIS_REPLY_ARRAY);
  EXPECT_GT(keys_reply->elements, 0u);
  for (size_t i = 0; i < keys_reply->elements; ++i) {
    const std::string key = keys_reply->element[i]->str;
    testing::Reply ttl = client.Run({"PTTL", key});
    ASSERT_TRUE(ttl);
    EXPECT_GT(ttl->integer, 0) << key;
  }
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, RedisDifferentialTest,
                         ::testing::ValuesIn(testing::AllAlgorithms()), testing::AlgorithmTestName);

// Leases: random takes, queries and releases of five ids on one or two of three keys, with
// steps back in time, sent all at once as above; the same figures as the memory store's.
TEST(RedisStoreTest, LeasesDecideAsTheMemoryStoreDoesFigureForFigure) {
  RedisServer server;
  RedisStoreOptions options = OptionsFor(server);
  options.connections = 1;
  options.pipeline = 2;
  options.batch = 8;
  std::unique_ptr<RedisStore> redis = MustStore(options);
  testing::Random rnd(testing::Seed(20261123));
  const std::vector<std::string> keys = {"jobs", "{mail}:eu", "user:alice"};
  const std::vector<std::string> ids = {"a", "b", "c", "d", "lease-e"};
  struct LeaseStep {
    LeaseOp op;
    std::vector<LeasedKey> keys;
    std::string_view id;
    Micros ttl;
    Timestamp at;
  };
  std::map<std::pair<LeaseOp, bool>, int> seen;  // (op, allowed) -> count
  testing::Client client(server.port());
  for (int round = 0; round < 20; ++round) {
    client.Run({"FLUSHALL"});
    MemoryStore memory;
    const std::vector<int64_t> capacity = {rnd.Between(1, 3), rnd.Between(1, 3), rnd.Between(1, 3)};
    std::vector<LeaseStep> trace;
    int64_t t = kEpoch + rnd.Between(0, 1'000'000'000);
    for (int i = 0; i < 100; ++i) {
      t += rnd.OneIn(25) ? -rnd.Between(1, 3'000'000) : rnd.Between(0, 1'500'000);
      LeaseStep& step = trace.emplace_back();
      const int64_t op = rnd.Between(0, 3);
      step.op = op == 0 ? LeaseOp::kQuery : op == 1 ? LeaseOp::kRelease : LeaseOp::kTake;
      const size_t first = static_cast<size_t>(rnd.Between(0, 2));
      step.keys.push_back({keys[first], capacity[first]});
      if (rnd.OneIn(3)) {
        const size_t second = (first + static_cast<size_t>(rnd.Between(1, 2))) % 3;
        step.keys.push_back({keys[second], capacity[second]});
      }
      step.id = ids[static_cast<size_t>(rnd.Between(0, 4))];
      step.ttl = Micros{rnd.Between(1, 5'000'000)};
      step.at = At(t);
    }
    std::vector<std::vector<Decision>> from_redis(trace.size());
    std::vector<std::promise<absl::StatusOr<Decision>>> done(trace.size());
    for (size_t i = 0; i < trace.size(); ++i) {
      from_redis[i].resize(trace[i].keys.size());
      redis->LeaseAllAsync(trace[i].op, trace[i].keys, trace[i].id, trace[i].ttl, trace[i].at,
                           from_redis[i],
                           [&done, i](absl::StatusOr<Decision> d) { done[i].set_value(d); });
    }
    std::vector<absl::StatusOr<Decision>> got;
    for (auto& d : done) {
      got.push_back(d.get_future().get());
    }
    for (size_t i = 0; i < trace.size(); ++i) {
      ASSERT_TRUE(got[i].ok()) << got[i].status();
      std::vector<Decision> each(trace[i].keys.size());
      absl::StatusOr<Decision> want =
          memory.LeaseAll(trace[i].op, trace[i].keys, trace[i].id, trace[i].ttl, trace[i].at, each);
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_EQ(*got[i], *want) << "round " << round << " step " << i;
      ASSERT_EQ(from_redis[i], each) << "round " << round << " step " << i;
      ++seen[{trace[i].op, want->allowed}];
    }
  }
  for (LeaseOp op : {LeaseOp::kQuery, LeaseOp::kTake, LeaseOp::kRelease}) {
    EXPECT_GT((seen[{op, true}]), 20) << static_cast<int>(op);  // Both answers, every op.
    EXPECT_GT((seen[{op, false}]), 20) << static_cast<int>(op);
  }
  // A key of leases lives no longer than its last lease (plus the margin).
  testing::Reply keys_reply = client.Run({"KEYS", "sluice:lease:*"});
  ASSERT_TRUE(keys_reply && keys_reply->type == REDIS_REPLY_ARRAY);
  for (size_t i = 0; i < keys_reply->elements; ++i) {
    testing::Reply ttl = client.Run({"PTTL", keys_reply->element[i]->str});
    ASSERT_TRUE(ttl);
    EXPECT_GT(ttl->integer, 0) << keys_reply->element[i]->str;
  }
  EXPECT_EQ(redis->LeaseKey("jobs"), "sluice:lease:{jobs}");
}

// Large numbers: limits at the edge of what the store accepts, where a double that is not
// kept exact would round a figure.
TEST(RedisStoreTest, StaysExactAtTheEdgeOfTheAcceptedLimits) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = MustStore(OptionsFor(server));
  MemoryStore memory;
  const std::vector<Limit> limits = {
      // B x P' just under 2^52: P' = 1,000,003 us (a prime), B = 2^52 / P'.
      MustLimit({.algorithm = Algorithm::kGcra,
                 .limit = 1,
                 .period = Micros{1'000'003},
                 .burst = (int64_t{1} << 52) / 1'000'003}),
      MustLimit({.algorithm = Algorithm::kTokenBucket,
                 .limit = 3,
                 .period = Micros{1'000'003},
                 .burst = (int64_t{1} << 52) / 1'000'003}),
      MustLimit({.algorithm = Algorithm::kLeakyBucket,
                 .limit = 7,
                 .period = Micros{13'000'003},
                 .burst = (int64_t{1} << 52) / 13'000'003}),
      // N x P far past 2^53: sliding_window's products go through mul_div.
      MustLimit({.algorithm = Algorithm::kSlidingWindow,
                 .limit = Limit::kMaxCount,
                 .period = 3650 * 24h}),
      MustLimit({.algorithm = Algorithm::kSlidingWindow,
                 .limit = 999'999'999'989,
                 .period = Micros{86'399'999'999}}),
      MustLimit({.algorithm = Algorithm::kFixedWindow,
                 .limit = Limit::kMaxCount,
                 .period = Limit::kMaxPeriod}),
  };
  testing::Random rnd(testing::Seed(7));
  for (const Limit& limit : limits) {
    ASSERT_TRUE(redis->CheckLimit(limit).ok()) << limit.ToString();
    int64_t t = kEpoch;
    for (int i = 0; i < 200; ++i) {
      t += rnd.Between(0, std::min<int64_t>(limit.period().count() / 50, 86'400'000'000));
      const int64_t cost =
          rnd.OneIn(3) ? rnd.Between(0, limit.burst()) : rnd.Between(0, limit.burst() / 1000 + 1);
      absl::StatusOr<Decision> got = redis->Decide(limit, "big", cost, At(t));
      absl::StatusOr<Decision> want = memory.Decide(limit, "big", cost, At(t));
      ASSERT_TRUE(got.ok() && want.ok()) << got.status() << want.status();
      ASSERT_EQ(*got, *want) << limit.ToString() << " step " << i << " cost " << cost;
    }
  }
}

// sliding_window's figures divide products far past 2^53 (prev x r, (N - c) x P), where a
// double quotient is off by one whenever the true one lies just below an integer. Each case:
// fill one window with A, then in the next ask for just more than the weighted count leaves.
TEST(RedisStoreTest, SlidingWindowFiguresStayExactWithProductsPast2To53) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = MustStore(OptionsFor(server));
  MemoryStore memory;
  testing::Random rnd(testing::Seed(13));
  for (int i = 0; i < 400; ++i) {
    const int64_t n = rnd.Between(100'000'000'000'000, Limit::kMaxCount);
    const int64_t p = rnd.Between(10'000'000'000'000, 300'000'000'000'000);
    const Limit limit =
        MustLimit({.algorithm = Algorithm::kSlidingWindow, .limit = n, .period = Micros{p}});
    const std::string key = std::to_string(i);
    const int64_t start = (kEpoch / p + 1) * p;  // A window's first microsecond.
    const int64_t a = rnd.Between(n / 2, n);
    const int64_t r = rnd.Between(1, p - 1);
    const int64_t cost = n - a + static_cast<int64_t>(Int128{a} * r / p) + rnd.Between(1, 1000);
    // On a second key, a full current window and no previous one: the wait is in the next.
    const int64_t more = std::min(n, n - a + rnd.Between(1, 1000));
    for (const auto& [k, t, c] :
         {std::tuple{key, start + rnd.Between(0, p - 1), a},
          std::tuple{key, start + p + r, std::min(cost, n)},
          std::tuple{key, start + p + r, int64_t{1}}, std::tuple{key + "'", start + r, a},
          std::tuple{key + "'", start + r, more}}) {
      absl::StatusOr<Decision> got = redis->Decide(limit, k, c, At(t));
      absl::StatusOr<Decision> want = memory.Decide(limit, k, c, At(t));
      ASSERT_TRUE(got.ok() && want.ok()) << got.status() << want.status();
      ASSERT_EQ(*got, *want) << limit.ToString() << " case " << i << " cost " << c;
    }
  }
}

// Several limits on one request, all or nothing, as MemoryStore::DecideAll.
TEST(RedisStoreTest, DecidesSeveralLimitsAllOrNothingAsTheMemoryStore) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = MustStore(OptionsFor(server));
  testing::Random rnd(testing::Seed(11));
  testing::Client client(server.port());
  testing::ExpectSeveralLimitsAsTheMemoryStore(*redis, rnd, /*rounds=*/30, /*steps=*/60,
                                               [&client](int) {
                                                 client.Run({"FLUSHALL"});
                                                 return std::string("{user}:one");
                                               });
}

}  // namespace
}  // namespace sluice
