// RedisStore against a real redis-server: the same decisions as MemoryStore on random traces
// for every algorithm, expiries on every key, batching, failures and their policies, AUTH.

#include "sluice/redis_store.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "sluice/memory_store.h"
#include "tests/testing/random.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using testing::RedisServer;
using namespace std::chrono_literals;

std::unique_ptr<RedisStore> MustStore(RedisStoreOptions options) {
  absl::StatusOr<std::unique_ptr<RedisStore>> store = RedisStore::Create(std::move(options));
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

RedisStoreOptions OptionsFor(const RedisServer& server) {
  absl::StatusOr<RedisStoreOptions> options = ParseRedisUrl(server.url());
  EXPECT_TRUE(options.ok()) << options.status();
  options->use_caller_time = true;
  options->timeout = 2s;          // Sanitizer builds on a busy machine can be slow.
  options->expiry_margin = 600s;  // Test time runs ahead of real time: keep keys meanwhile.
  return *options;
}

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
  for (int round = 0; round < 30; ++round) {
    client.Run({"FLUSHALL"});
    MemoryStore memory;
    std::vector<Limit> limits;
    const int count = static_cast<int>(rnd.Between(2, 4));
    while (static_cast<int>(limits.size()) < count) {
      const Limit l = rnd.LimitFor(*redis, static_cast<Algorithm>(rnd.Between(
                                               0, static_cast<int>(Algorithm::kLeakyBucket))));
      if (std::find(limits.begin(), limits.end(), l) == limits.end()) {
        limits.push_back(l);
      }
    }
    std::vector<LimitedKey> requests;
    for (const Limit& l : limits) {
      requests.push_back({&l, "{user}:one"});
    }
    int64_t t = kEpoch;
    for (int i = 0; i < 60; ++i) {
      t += rnd.Gap(limits[static_cast<size_t>(rnd.Between(0, count - 1))]);
      const int64_t cost = rnd.Cost(limits[0]);
      std::vector<Decision> got_each(limits.size());
      std::vector<Decision> want_each(limits.size());
      absl::StatusOr<Decision> got = redis->DecideAll(requests, cost, At(t), got_each);
      absl::StatusOr<Decision> want = memory.DecideAll(requests, cost, At(t), want_each);
      ASSERT_TRUE(got.ok() && want.ok()) << got.status() << want.status();
      ASSERT_EQ(*got, *want) << "round " << round << " step " << i;
      ASSERT_EQ(got_each, want_each) << "round " << round << " step " << i;
    }
  }
  // The same limit on the same key twice cannot be decided all or nothing.
  const Limit l = MustLimit({.limit = 1, .period = 1s});
  const LimitedKey twice[] = {{&l, "k"}, {&l, "k"}};
  Decision each[2];
  EXPECT_TRUE(absl::IsInvalidArgument(redis->DecideAll(twice, 1, At(kEpoch), each).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(redis->Decide(l, "k", -1, At(kEpoch)).status()));
}

// ---------------------------------------------------------------------------------------------
// Exactness across processes: a fleet of 4 processes x 4 threads on one key.

struct Admission {
  int64_t window;     // Which window admitted it (fixed_window), or 0.
  int64_t remaining;  // Its remaining: each admission in a window has its own.
};

// Runs `work` in `processes` child processes (each builds its own store and threads after the
// fork) and gathers what each admitted.
std::vector<Admission> InChildren(int processes,
                                  const std::function<std::vector<Admission>()>& work) {
  std::vector<std::pair<pid_t, int>> children;
  for (int i = 0; i < processes; ++i) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      const std::vector<Admission> admitted = work();
      const char* data = reinterpret_cast<const char*>(admitted.data());
      size_t left = admitted.size() * sizeof(Admission);
      while (left > 0) {
        const ssize_t n = write(fds[1], data, left);
        if (n <= 0) {
          _exit(1);
        }
        data += n;
        left -= static_cast<size_t>(n);
      }
      _exit(0);
    }
    close(fds[1]);
    children.emplace_back(pid, fds[0]);
  }
  std::vector<Admission> all;
  for (auto [pid, fd] : children) {
    std::string bytes;
    char buffer[65536];
    for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) {
      bytes.append(buffer, static_cast<size_t>(n));
    }
    close(fd);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const size_t count = bytes.size() / sizeof(Admission);
    const size_t at = all.size();
    all.resize(at + count);
    std::memcpy(all.data() + at, bytes.data(), count * sizeof(Admission));
  }
  return all;
}

// `threads` threads calling `decide` until `until`; the admissions they saw.
std::vector<Admission> Hammer(int threads, std::chrono::steady_clock::time_point until,
                              const std::function<std::optional<Admission>()>& decide) {
  std::vector<std::vector<Admission>> each(static_cast<size_t>(threads));
  std::vector<std::thread> running;
  for (auto& admitted : each) {
    running.emplace_back([&] {
      while (std::chrono::steady_clock::now() < until) {
        if (std::optional<Admission> a = decide()) {
          admitted.push_back(*a);
        }
      }
    });
  }
  std::vector<Admission> all;
  for (size_t i = 0; i < running.size(); ++i) {
    running[i].join();
    all.insert(all.end(), each[i].begin(), each[i].end());
  }
  return all;
}

TEST(RedisFleetTest, FourProcessesOfFourThreadsAdmitExactlyTheLimitPerWindow) {
  RedisServer server;
  constexpr int64_t kLimit = 1000;
  constexpr int64_t kPeriod = 250'000;  // 250 ms windows on Redis's clock.
  const Limit limit = MustLimit({.limit = kLimit, .period = Micros{kPeriod}});
  const auto until = std::chrono::steady_clock::now() + 1500ms;
  const std::vector<Admission> admitted = InChildren(4, [&] {
    RedisStoreOptions options = *ParseRedisUrl(server.url());
    std::unique_ptr<RedisStore> redis = *RedisStore::Create(options);
    return Hammer(4, until, [&]() -> std::optional<Admission> {
      absl::StatusOr<Decision> d = redis->Decide(limit, "{fleet}", 1, Timestamp{});
      if (!d.ok() || !d->allowed) {
        return std::nullopt;
      }
      // Redis's clock is this machine's: the window ends at now + reset_after, give or take
      // the round trip.
      const int64_t now =
          std::chrono::duration_cast<Micros>(std::chrono::system_clock::now().time_since_epoch())
              .count();
      return Admission{.window = (now + d->reset_after.count() + kPeriod / 2) / kPeriod,
                       .remaining = d->remaining};
    });
  });
  std::map<int64_t, std::vector<int64_t>> by_window;
  for (const Admission& a : admitted) {
    by_window[a.window].push_back(a.remaining);
  }
  ASSERT_GE(by_window.size(), 5u);
  int full = 0;
  for (auto& [window, remaining] : by_window) {
    std::sort(remaining.begin(), remaining.end());
    // Never more than the limit, and each admission its own place in the window.
    EXPECT_LE(static_cast<int64_t>(remaining.size()), kLimit) << "window " << window;
    EXPECT_EQ(std::adjacent_find(remaining.begin(), remaining.end()), remaining.end());
    if (window != by_window.begin()->first && window != by_window.rbegin()->first) {
      // A window the run covered from end to end: exactly the limit.
      EXPECT_EQ(static_cast<int64_t>(remaining.size()), kLimit) << "window " << window;
      ++full;
    }
  }
  EXPECT_GE(full, 3);
}

TEST(RedisFleetTest, FourProcessesOfFourThreadsShareOneGcraBurstAtAFrozenTime) {
  RedisServer server;
  constexpr int64_t kBurst = 1000;
  const Limit limit =
      MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s, .burst = kBurst});
  const auto until = std::chrono::steady_clock::now() + 500ms;
  const std::vector<Admission> admitted = InChildren(4, [&] {
    RedisStoreOptions options = *ParseRedisUrl(server.url());
    options.use_caller_time = true;  // Frozen: no token comes back during the run.
    std::unique_ptr<RedisStore> redis = *RedisStore::Create(options);
    return Hammer(4, until, [&]() -> std::optional<Admission> {
      absl::StatusOr<Decision> d = redis->Decide(limit, "{fleet}", 1, At(kEpoch));
      if (!d.ok() || !d->allowed) {
        return std::nullopt;
      }
      return Admission{.window = 0, .remaining = d->remaining};
    });
  });
  std::vector<int64_t> remaining;
  for (const Admission& a : admitted) {
    remaining.push_back(a.remaining);
  }
  std::sort(remaining.begin(), remaining.end());
  ASSERT_EQ(static_cast<int64_t>(remaining.size()), kBurst);
  for (int64_t i = 0; i < kBurst; ++i) {
    EXPECT_EQ(remaining[static_cast<size_t>(i)], i);  // 999, 998, ... 0: each once.
  }
}

// ---------------------------------------------------------------------------------------------
// Redis's state of mind: a key of another type, a flushed script cache, its own clock.

TEST(RedisStoreTest, AKeyOfAnotherTypeFailsOnlyItsOwnCall) {
  RedisServer server;
  RedisStoreOptions options = OptionsFor(server);
  options.connections = 1;
  options.pipeline = 1;
  std::unique_ptr<RedisStore> redis = MustStore(options);
  const Limit limit = MustLimit({.limit = 3, .period = 1s});
  testing::Client client(server.port());
  client.Run({"RPUSH", redis->RedisKey(limit, "wrong"), "x"});
  // Sent together, so decided in one script call (the pipeline holds one call at a time).
  std::vector<std::promise<absl::StatusOr<Decision>>> done(3);
  Decision each[3];
  const char* keys[] = {"right", "wrong", "right"};
  for (int i = 0; i < 3; ++i) {
    const LimitedKey request{&limit, keys[i]};
    redis->DecideAllAsync({&request, 1}, 1, At(kEpoch), {&each[i], 1},
                          [&done, i](absl::StatusOr<Decision> d) { done[i].set_value(d); });
  }
  absl::StatusOr<Decision> first = done[0].get_future().get();
  absl::StatusOr<Decision> second = done[1].get_future().get();
  absl::StatusOr<Decision> third = done[2].get_future().get();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->remaining, 2);
  EXPECT_TRUE(absl::IsInternal(second.status())) << second.status();
  EXPECT_THAT(second.status().message(), ::testing::HasSubstr("WRONGTYPE"));
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->remaining, 1);
  EXPECT_EQ(redis->Stats().failures, 0u);  // Not a transport failure: no policy applied.
}

TEST(RedisStoreTest, LoadsTheScriptAgainAfterTheCacheIsFlushed) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = MustStore(OptionsFor(server));
  const Limit limit = MustLimit({.limit = 3, .period = 1s});
  ASSERT_EQ(redis->Decide(limit, "k", 1, At(kEpoch))->remaining, 2);
  testing::Client client(server.port());
  client.Run({"SCRIPT", "FLUSH"});
  absl::StatusOr<Decision> d = redis->Decide(limit, "k", 1, At(kEpoch));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->remaining, 1);
}

TEST(RedisStoreTest, DecidesOnRedisTimeByDefault) {
  RedisServer server;
  RedisStoreOptions options = OptionsFor(server);
  options.use_caller_time = false;
  options.expiry_margin = 50ms;
  std::unique_ptr<RedisStore> redis = MustStore(options);
  const Limit limit = MustLimit({.limit = 2, .period = 1h});
  // The caller's `now` (the epoch itself) is ignored: Redis's clock says 2026.
  absl::StatusOr<Decision> d = redis->Decide(limit, "k", 1, At(0));
  ASSERT_TRUE(d.ok()) << d.status();
  testing::Client client(server.port());
  testing::Reply time = client.Run({"TIME"});
  ASSERT_TRUE(time && time->elements == 2);
  const int64_t now =
      std::stoll(time->element[0]->str) * 1'000'000 + std::stoll(time->element[1]->str);
  const int64_t window_end = (now / 3'600'000'000 + 1) * 3'600'000'000;
  EXPECT_NEAR(static_cast<double>(d->reset_after.count()), static_cast<double>(window_end - now),
              1e6);
  // Its expiry follows: the window's end plus the margin.
  testing::Reply ttl = client.Run({"PTTL", redis->RedisKey(limit, "k")});
  ASSERT_TRUE(ttl);
  EXPECT_NEAR(static_cast<double>(ttl->integer),
              static_cast<double>((window_end - now) / 1000 + 50), 1000);
}

// ---------------------------------------------------------------------------------------------
// Failures and the policies

class RedisFailureTest : public ::testing::TestWithParam<FailurePolicy> {
 protected:
  // A store under the test's policy that has already decided once (so it is connected).
  std::unique_ptr<RedisStore> ConnectedStore(const RedisServer& server,
                                             std::chrono::milliseconds timeout) {
    RedisStoreOptions options = OptionsFor(server);
    options.on_failure = GetParam();
    options.timeout = timeout;
    std::unique_ptr<RedisStore> redis = MustStore(options);
    EXPECT_TRUE(redis->Decide(limit_, "k", 1, At(kEpoch)).ok());
    return redis;
  }

  const Limit limit_ = MustLimit({.limit = 2, .period = 1h});
};

TEST_P(RedisFailureTest, RedisGoneIsDecidedByThePolicyAndServiceResumes) {
  RedisServer server;
  constexpr auto kTimeout = 200ms;
  std::unique_ptr<RedisStore> redis = ConnectedStore(server, kTimeout);
  const Limit& limit = limit_;

  server.Stop();
  std::vector<absl::StatusOr<Decision>> during;
  for (int i = 0; i < 4; ++i) {
    const auto start = std::chrono::steady_clock::now();
    during.push_back(redis->Decide(limit, "k", 1, At(kEpoch + 1)));
    // Bounded by the timeout (with room for a slow machine), never hanging.
    EXPECT_LT(std::chrono::steady_clock::now() - start, kTimeout + 500ms);
  }
  switch (GetParam()) {
    case FailurePolicy::kDeny:
      for (const auto& d : during) {
        EXPECT_TRUE(absl::IsUnavailable(d.status()) || absl::IsDeadlineExceeded(d.status()))
            << d.status();
      }
      EXPECT_EQ(redis->Stats().fallbacks, 0u);
      break;
    case FailurePolicy::kAllow:
      for (const auto& d : during) {
        ASSERT_TRUE(d.ok()) << d.status();
        EXPECT_TRUE(d->allowed);
      }
      EXPECT_EQ(redis->Stats().fallbacks, 4u);
      break;
    case FailurePolicy::kLocal:
      // A limiter in this process with the same limit: 2 allowed, then denied.
      for (int i = 0; i < 4; ++i) {
        ASSERT_TRUE(during[static_cast<size_t>(i)].ok()) << during[static_cast<size_t>(i)].status();
        EXPECT_EQ(during[static_cast<size_t>(i)]->allowed, i < 2) << i;
      }
      EXPECT_EQ(redis->Stats().fallbacks, 4u);
      break;
  }
  EXPECT_EQ(redis->Stats().failures, 4u);

  // A new server on the same port: the store reconnects within its backoff (at most 250 ms).
  server.Start();
  const auto back = std::chrono::steady_clock::now();
  while (redis->Stats().connections_ready == 0 && std::chrono::steady_clock::now() - back < 3s) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - back, 1s);
  const RedisStoreStats before = redis->Stats();
  absl::StatusOr<Decision> d = redis->Decide(limit, "k", 1, At(kEpoch + 2));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->remaining, 1);  // Decided in the new Redis, which has not seen "k".
  EXPECT_EQ(redis->Stats().failures, before.failures);
  EXPECT_EQ(redis->Stats().fallbacks, before.fallbacks);
}

TEST_P(RedisFailureTest, ARedisThatStopsAnsweringMissesTheDeadlineNotTheCaller) {
  RedisServer server;
  constexpr auto kTimeout = 100ms;
  std::unique_ptr<RedisStore> redis = ConnectedStore(server, kTimeout);
  const Limit& limit = limit_;

  server.Pause();  // The socket stays open; nothing answers.
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<Decision> d = redis->Decide(limit, "k", 1, At(kEpoch + 1));
    EXPECT_LT(std::chrono::steady_clock::now() - start, kTimeout + 400ms);
    if (GetParam() == FailurePolicy::kDeny) {
      EXPECT_TRUE(absl::IsDeadlineExceeded(d.status()) || absl::IsUnavailable(d.status()))
          << d.status();
    } else {
      EXPECT_TRUE(d.ok()) << d.status();
    }
  }
  server.Resume();
  const auto back = std::chrono::steady_clock::now();
  absl::StatusOr<Decision> d;
  do {
    const uint64_t failures = redis->Stats().failures;
    d = redis->Decide(limit, "k", 1, At(kEpoch + 1));
    if (redis->Stats().failures == failures && d.ok()) {
      break;
    }
    std::this_thread::sleep_for(5ms);
  } while (std::chrono::steady_clock::now() - back < 3s);
  EXPECT_LT(std::chrono::steady_clock::now() - back, 1s);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->remaining, 0);  // Redis kept the first admission: this is the second.
}

INSTANTIATE_TEST_SUITE_P(Policies, RedisFailureTest,
                         ::testing::Values(FailurePolicy::kDeny, FailurePolicy::kAllow,
                                           FailurePolicy::kLocal),
                         [](const auto& info) {
                           return std::string(FailurePolicyName(info.param));
                         });

TEST(RedisStoreTest, NoServerAtAllFailsFastUnderThePolicy) {
  RedisStoreOptions options;
  options.endpoints = {{"127.0.0.1", static_cast<uint16_t>(testing::FreePort())}};
  options.timeout = 1s;
  std::unique_ptr<RedisStore> redis = MustStore(options);
  const Limit limit = MustLimit({.limit = 2, .period = 1h});
  absl::StatusOr<Decision> d = redis->Decide(limit, "k", 1, At(kEpoch));
  EXPECT_TRUE(absl::IsUnavailable(d.status())) << d.status();
  EXPECT_THAT(d.status().message(), ::testing::HasSubstr("cannot connect"));
}

// ---------------------------------------------------------------------------------------------
// AUTH and databases

TEST(RedisStoreTest, AuthenticatesWithAPasswordOrAUserAndSelectsTheDatabase) {
  RedisServer server(
      {"--requirepass", "s3cret", "--user", "worker", "on", ">w0rk", "~*", "&*", "+@all"});
  const Limit limit = MustLimit({.limit = 2, .period = 1h});
  const std::string port = std::to_string(server.port());
  for (const std::string& url : {"redis://:s3cret@127.0.0.1:" + port + "/2",
                                 "redis://worker:w0rk@127.0.0.1:" + port + "/2"}) {
    absl::StatusOr<RedisStoreOptions> options = ParseRedisUrl(url);
    ASSERT_TRUE(options.ok()) << options.status();
    std::unique_ptr<RedisStore> redis = MustStore(*options);
    absl::StatusOr<Decision> d = redis->Decide(limit, "k", 1, At(kEpoch));
    ASSERT_TRUE(d.ok()) << url << ": " << d.status();
  }
  testing::Client client(server.port());
  client.Run({"AUTH", "s3cret"});
  client.Run({"SELECT", "2"});
  testing::Reply keys = client.Run({"DBSIZE"});
  ASSERT_TRUE(keys);
  EXPECT_EQ(keys->integer, 1);  // Both stores wrote the one key, in database 2.

  absl::StatusOr<RedisStoreOptions> wrong = ParseRedisUrl("redis://:nope@127.0.0.1:" + port);
  ASSERT_TRUE(wrong.ok());
  wrong->timeout = 500ms;
  std::unique_ptr<RedisStore> redis = MustStore(*wrong);
  absl::StatusOr<Decision> d = redis->Decide(limit, "k", 1, At(kEpoch));
  EXPECT_TRUE(absl::IsUnavailable(d.status())) << d.status();
  EXPECT_THAT(d.status().message(), ::testing::HasSubstr("AUTH"));
}

// ---------------------------------------------------------------------------------------------
// Redis Cluster: three masters the test creates, and a slot migrated during traffic.

class RedisClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string create = "redis-cli --cluster create";
    for (int i = 0; i < 3; ++i) {
      nodes_[i] = new RedisServer({"--cluster-enabled", "yes", "--cluster-config-file",
                                   "nodes.conf", "--cluster-node-timeout", "5000"});
      create += " 127.0.0.1:" + std::to_string(nodes_[i]->port());
    }
    ASSERT_EQ(std::system((create + " --cluster-replicas 0 --cluster-yes >/dev/null").c_str()), 0);
    for (int i = 0; i < 3; ++i) {
      testing::Client client(nodes_[i]->port());
      for (int tries = 0; tries < 500; ++tries) {
        testing::Reply info = client.Run({"CLUSTER", "INFO"});
        if (info && std::string(info->str).find("cluster_state:ok") != std::string::npos) {
          break;
        }
        std::this_thread::sleep_for(10ms);
      }
    }
  }
  static void TearDownTestSuite() {
    for (RedisServer*& node : nodes_) {
      delete node;
      node = nullptr;
    }
  }

  static std::string Url() {
    return "redis+cluster://127.0.0.1:" + std::to_string(nodes_[0]->port());
  }
  static RedisStoreOptions ClusterOptions() {
    absl::StatusOr<RedisStoreOptions> options = ParseRedisUrl(Url());
    EXPECT_TRUE(options.ok()) << options.status();
    options->use_caller_time = true;
    options->timeout = 2s;
    options->expiry_margin = 600s;
    return *options;
  }
  static std::string Id(int node) {
    testing::Client client(nodes_[node]->port());
    return client.Run({"CLUSTER", "MYID"})->str;
  }
  // The node serving `slot`, by its index here.
  static int Owner(int slot) {
    for (int i = 0; i < 3; ++i) {
      testing::Client client(nodes_[i]->port());
      testing::Reply count = client.Run({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)});
      testing::Reply nodes = client.Run({"CLUSTER", "NODES"});
      // This node's own line ("myself") lists the slot ranges it serves.
      std::istringstream lines(nodes->str);
      for (std::string line; std::getline(lines, line);) {
        if (line.find("myself") == std::string::npos) {
          continue;
        }
        std::istringstream fields(line);
        std::string field;
        for (int f = 0; fields >> field; ++f) {
          if (f < 8) {
            continue;
          }
          const size_t dash = field.find('-');
          const int first = std::stoi(field.substr(0, dash));
          const int last = dash == std::string::npos ? first : std::stoi(field.substr(dash + 1));
          if (slot >= first && slot <= last) {
            return i;
          }
        }
      }
    }
    return -1;
  }

  static inline RedisServer* nodes_[3] = {};
};

TEST_F(RedisClusterTest, DecidesAsTheMemoryStoreWithKeysOnEveryNode) {
  std::unique_ptr<RedisStore> redis = MustStore(ClusterOptions());
  MemoryStore memory;
  const Limit gcra = MustLimit({.algorithm = Algorithm::kGcra, .limit = 3, .period = 1s});
  const Limit daily = MustLimit({.limit = 5, .period = 24h});
  testing::Random rnd(testing::Seed(17));
  int64_t t = kEpoch;
  for (int i = 0; i < 600; ++i) {
    t += rnd.Between(0, 400'000);
    const std::string key = "user" + std::to_string(rnd.Between(0, 59));
    // Both limits on one key: one slot, decided all or nothing.
    const LimitedKey requests[] = {{&gcra, key}, {&daily, key}};
    Decision got_each[2];
    Decision want_each[2];
    absl::StatusOr<Decision> got = redis->DecideAll(requests, 1, At(t), got_each);
    absl::StatusOr<Decision> want = memory.DecideAll(requests, 1, At(t), want_each);
    ASSERT_TRUE(got.ok() && want.ok()) << got.status() << want.status();
    ASSERT_EQ(*got, *want) << "step " << i << " key " << key;
  }
  // The 60 keys landed on all three masters.
  for (RedisServer* node : nodes_) {
    testing::Client client(node->port());
    EXPECT_GT(client.Run({"DBSIZE"})->integer, 0) << node->port();
  }
  EXPECT_EQ(redis->Stats().failures, 0u);
}

TEST_F(RedisClusterTest, OneRequestMustKeepToOneSlot) {
  std::unique_ptr<RedisStore> redis = MustStore(ClusterOptions());
  const Limit limit = MustLimit({.limit = 5, .period = 1h});
  const Limit other = MustLimit({.limit = 9, .period = 1h});
  Decision each[2];
  const LimitedKey apart[] = {{&limit, "alice"}, {&other, "bob"}};
  absl::StatusOr<Decision> d = redis->DecideAll(apart, 1, At(kEpoch), each);
  EXPECT_TRUE(absl::IsInvalidArgument(d.status())) << d.status();
  EXPECT_THAT(d.status().message(), ::testing::HasSubstr("same {tag}"));
  const LimitedKey tagged[] = {{&limit, "{alice}:ip"}, {&other, "{alice}:user"}};
  d = redis->DecideAll(tagged, 1, At(kEpoch), each);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(each[0].remaining, 4);
  EXPECT_EQ(each[1].remaining, 8);
}

// redis:// at a cluster node: keys on other nodes are refused with a hint, never followed.
TEST_F(RedisClusterTest, APlainUrlToAClusterNodeSaysToUseTheClusterUrl) {
  RedisStoreOptions options = ClusterOptions();
  options.cluster = false;
  std::unique_ptr<RedisStore> redis = MustStore(options);
  const Limit limit = MustLimit({.limit = 5, .period = 1h});
  int refused = 0;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<Decision> d = redis->Decide(limit, "user" + std::to_string(i), 1, At(kEpoch));
    if (!d.ok()) {
      EXPECT_TRUE(absl::IsUnavailable(d.status())) << d.status();
      EXPECT_THAT(d.status().message(), ::testing::HasSubstr("use redis+cluster://"));
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);  // Two thirds of the slots are elsewhere.
  EXPECT_LT(refused, 20);
}

// redis+cluster:// at a server without cluster support: calls fail at once, saying why.
TEST(RedisStoreTest, AClusterUrlToAPlainServerFailsSayingWhy) {
  RedisServer server;
  absl::StatusOr<RedisStoreOptions> options =
      ParseRedisUrl("redis+cluster://127.0.0.1:" + std::to_string(server.port()));
  ASSERT_TRUE(options.ok());
  options->timeout = 5s;
  std::unique_ptr<RedisStore> redis = MustStore(*options);
  const Limit limit = MustLimit({.limit = 5, .period = 1h});
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Decision> d = redis->Decide(limit, "k", 1, At(kEpoch));
  EXPECT_TRUE(absl::IsUnavailable(d.status())) << d.status();
  EXPECT_THAT(d.status().message(), ::testing::HasSubstr("CLUSTER SLOTS"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);  // Well before the 5 s timeout.
}

TEST_F(RedisClusterTest, FollowsASlotMigratedDuringTrafficAndLosesNoCount) {
  std::unique_ptr<RedisStore> redis = MustStore(ClusterOptions());
  constexpr int64_t kLimit = 1'000'000;
  const Limit limit = MustLimit({.limit = kLimit, .period = 24h});
  const std::string key = "{migrating}";
  testing::Client any(nodes_[0]->port());
  const int slot = static_cast<int>(any.Run({"CLUSTER", "KEYSLOT", key})->integer);
  ASSERT_TRUE(redis->Decide(limit, key, 1, At(kEpoch)).ok());  // The key exists before.
  const int from = Owner(slot);
  ASSERT_GE(from, 0);
  const int to = (from + 1) % 3;

  std::atomic<bool> stop{false};
  std::atomic<int64_t> admitted{1};
  std::atomic<int64_t> errors{0};
  std::mutex first_error_mutex;
  std::string first_error;
  std::vector<std::thread> traffic;
  for (int i = 0; i < 4; ++i) {
    traffic.emplace_back([&] {
      while (!stop) {
        absl::StatusOr<Decision> d = redis->Decide(limit, key, 1, At(kEpoch));
        if (!d.ok()) {
          if (errors++ == 0) {
            std::lock_guard lock(first_error_mutex);
            first_error = d.status().ToString();
          }
        } else if (d->allowed) {
          ++admitted;
        }
      }
    });
  }
  // The slot moves as redis-cli --cluster reshard moves it: importing, migrating, the keys,
  // then the new owner announced to every node. Traffic runs throughout.
  testing::Client source(nodes_[from]->port());
  testing::Client target(nodes_[to]->port());
  const std::string slot_text = std::to_string(slot);
  std::this_thread::sleep_for(100ms);
  ASSERT_EQ(std::string(target.Run({"CLUSTER", "SETSLOT", slot_text, "IMPORTING", Id(from)})->str),
            "OK");
  ASSERT_EQ(std::string(source.Run({"CLUSTER", "SETSLOT", slot_text, "MIGRATING", Id(to)})->str),
            "OK");
  std::this_thread::sleep_for(100ms);
  testing::Reply keys = source.Run({"CLUSTER", "GETKEYSINSLOT", slot_text, "100"});
  ASSERT_EQ(keys->elements, 1u);
  testing::Reply moved = source.Run({"MIGRATE", "127.0.0.1", std::to_string(nodes_[to]->port()),
                                     keys->element[0]->str, "0", "5000"});
  ASSERT_EQ(std::string(moved->str), "OK");
  std::this_thread::sleep_for(100ms);  // ASK now sends the calls to the target.
  for (RedisServer* node : nodes_) {
    testing::Client client(node->port());
    client.Run({"CLUSTER", "SETSLOT", slot_text, "NODE", Id(to)});
  }
  std::this_thread::sleep_for(200ms);  // MOVED now, and a new slot map.
  stop = true;
  for (std::thread& t : traffic) {
    t.join();
  }
  EXPECT_EQ(errors.load(), 0) << "the first: " << first_error;
  EXPECT_EQ(Owner(slot), to);
  // Calls followed ASK while the key had moved and the slot had not, then MOVED.
  const RedisStoreStats stats = redis->Stats();
  EXPECT_GT(stats.asks, 0u);
  EXPECT_GT(stats.redirects, stats.asks);
  // Every admission counted once, wherever it was decided.
  absl::StatusOr<Decision> query = redis->Decide(limit, key, 0, At(kEpoch));
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->remaining, kLimit - admitted.load());
  EXPECT_GT(admitted.load(), 100);
}

}  // namespace
}  // namespace sluice
