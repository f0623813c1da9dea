// RedisStore when Redis is not as expected: a key of another type, a flushed script cache,
// Redis's own clock; Redis gone, frozen or never there, under each failure policy; AUTH and
// SELECT.

#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sluice/redis_store.h"
#include "tests/redis/fixtures.h"
#include "tests/testing/redis_server.h"
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
  // A store under the test's policy that has already decided once on "k", in Redis (so it is
  // connected and its script loaded). A loaded machine may miss the first deadlines while it
  // connects: the store is warmed up on another key until Redis answers (a watchdog of 60 s).
  std::unique_ptr<RedisStore> ConnectedStore(const RedisServer& server,
                                             std::chrono::milliseconds timeout) {
    RedisStoreOptions options = OptionsFor(server);
    options.on_failure = GetParam();
    options.timeout = timeout;
    std::unique_ptr<RedisStore> redis = MustStore(options);
    const auto watchdog = std::chrono::steady_clock::now() + 120s;
    bool answered = false;
    while (!answered && std::chrono::steady_clock::now() < watchdog) {
      const uint64_t failures = redis->Stats().failures;
      answered =
          redis->Decide(limit_, "warm", 1, At(kEpoch)).ok() && redis->Stats().failures == failures;
    }
    EXPECT_TRUE(answered) << "Redis never answered";
    const uint64_t failures = redis->Stats().failures;
    EXPECT_TRUE(redis->Decide(limit_, "k", 1, At(kEpoch)).ok());
    EXPECT_EQ(redis->Stats().failures, failures) << "the first decision on k was not Redis's";
    return redis;
  }

  // A deadline that a loaded machine meets (the call after a restart loads the script again),
  // so that only a Redis gone or frozen misses it. Nothing asserts how long a call took: that
  // a call ended by its deadline is what its error says (DeadlineExceeded), and a call that
  // never ended would hang the test.
  static constexpr auto kTimeout = 5s;

  const Limit limit_ = MustLimit({.limit = 2, .period = 1h});
};

TEST_P(RedisFailureTest, RedisGoneIsDecidedByThePolicyAndServiceResumes) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = ConnectedStore(server, kTimeout);
  const Limit& limit = limit_;
  const RedisStoreStats at_start = redis->Stats();

  server.Stop();
  std::vector<absl::StatusOr<Decision>> during;
  for (int i = 0; i < 4; ++i) {
    during.push_back(redis->Decide(limit, "k", 1, At(kEpoch + 1)));
  }
  switch (GetParam()) {
    case FailurePolicy::kDeny:
      for (const auto& d : during) {
        EXPECT_TRUE(absl::IsUnavailable(d.status()) || absl::IsDeadlineExceeded(d.status()))
            << d.status();
      }
      EXPECT_EQ(redis->Stats().fallbacks - at_start.fallbacks, 0u);
      break;
    case FailurePolicy::kAllow:
      for (const auto& d : during) {
        ASSERT_TRUE(d.ok()) << d.status();
        EXPECT_TRUE(d->allowed);
      }
      EXPECT_EQ(redis->Stats().fallbacks - at_start.fallbacks, 4u);
      break;
    case FailurePolicy::kLocal:
      // A limiter in this process with the same limit: 2 allowed, then denied.
      for (int i = 0; i < 4; ++i) {
        ASSERT_TRUE(during[static_cast<size_t>(i)].ok()) << during[static_cast<size_t>(i)].status();
        EXPECT_EQ(during[static_cast<size_t>(i)]->allowed, i < 2) << i;
      }
      EXPECT_EQ(redis->Stats().fallbacks - at_start.fallbacks, 4u);
      break;
  }
  EXPECT_EQ(redis->Stats().failures - at_start.failures, 4u);

  // A new server on the same port: the store reconnects by itself (its backoff is at most
  // 250 ms; the watchdog allows a loaded machine far more).
  server.Start();
  const auto back = std::chrono::steady_clock::now();
  while (redis->Stats().connections_ready == 0 && std::chrono::steady_clock::now() - back < 120s) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_GT(redis->Stats().connections_ready, 0) << "never reconnected";
  const RedisStoreStats before = redis->Stats();
  absl::StatusOr<Decision> d = redis->Decide(limit, "k", 1, At(kEpoch + 2));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->remaining, 1);  // Decided in the new Redis, which has not seen "k".
  EXPECT_EQ(redis->Stats().failures, before.failures);
  EXPECT_EQ(redis->Stats().fallbacks, before.fallbacks);
}

TEST_P(RedisFailureTest, ARedisThatStopsAnsweringMissesTheDeadlineNotTheCaller) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = ConnectedStore(server, kTimeout);
  const Limit& limit = limit_;

  server.Pause();  // The socket stays open; nothing answers.
  const uint64_t failed_before = redis->Stats().failures;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<Decision> d = redis->Decide(limit, "k", 1, At(kEpoch + 1));
    if (GetParam() == FailurePolicy::kDeny) {
      // The first ended by its deadline, the socket open and silent; the others by it too, or
      // refused at once as the store gives up on the connection.
      EXPECT_TRUE(i == 0 ? absl::IsDeadlineExceeded(d.status())
                         : absl::IsDeadlineExceeded(d.status()) || absl::IsUnavailable(d.status()))
          << i << ": " << d.status();
    } else {
      EXPECT_TRUE(d.ok()) << d.status();
    }
  }
  EXPECT_EQ(redis->Stats().failures - failed_before, 3u);  // Each a failure, none Redis's answer.
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
  } while (std::chrono::steady_clock::now() - back < 120s);  // A watchdog.
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->remaining, 0);  // Redis kept the first admission: this is the second.
}

INSTANTIATE_TEST_SUITE_P(Policies, RedisFailureTest, testing::EveryPolicy(), testing::PolicyName);

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
    // A watchdog, not a bound: the first call opens, authenticates, selects and loads the
    // scripts, which the default 100 ms does not cover on a loaded machine.
    options->timeout = 30s;
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
  wrong->timeout = 30s;  // The refusal comes at once; this only guards against a hang.
  std::unique_ptr<RedisStore> redis = MustStore(*wrong);
  absl::StatusOr<Decision> d = redis->Decide(limit, "k", 1, At(kEpoch));
  EXPECT_TRUE(absl::IsUnavailable(d.status())) << d.status();
  EXPECT_THAT(d.status().message(), ::testing::HasSubstr("AUTH"));
}

}  // namespace
}  // namespace sluice
