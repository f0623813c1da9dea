// RedisStore in an incident: a Redis out of memory (OOM) or demoted to a replica (READONLY)
// answers each call, but cannot decide it; each failure policy answers as it says, and the
// store comes back when Redis does. What the store tells the operator meanwhile (its log
// sink): lost with the reason, and back, once per change.

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sluice/redis_store.h"
#include "tests/redis/fixtures.h"
#include "tests/redis/log_lines.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using testing::At, testing::kEpoch, testing::MustLimit, testing::MustStore, testing::OptionsFor;
using testing::Joined, testing::Lines, testing::RedisServer;

class RedisIncidentTest : public ::testing::TestWithParam<FailurePolicy> {
 protected:
  // A store under the test's policy that has already decided once (so it is connected).
  std::unique_ptr<RedisStore> ConnectedStore(const RedisServer& server) {
    RedisStoreOptions options = OptionsFor(server);
    options.on_failure = GetParam();
    options.timeout = 1s;
    options.log = lines_.Sink();
    std::unique_ptr<RedisStore> redis = MustStore(options);
    EXPECT_TRUE(redis->Decide(limit_, "warm", 1, At(kEpoch)).ok());
    return redis;
  }

  // Four requests for a fresh key, each of which writes when allowed: what the policy says.
  // `cause`: a word the deny policy's error names.
  void ExpectThePolicy(RedisStore& redis, const std::string& key, std::string_view cause) {
    const RedisStoreStats before = redis.Stats();
    for (int i = 0; i < 4; ++i) {
      absl::StatusOr<Decision> d = redis.Decide(limit_, key, 1, At(kEpoch + 1));
      switch (GetParam()) {
        case FailurePolicy::kDeny:
          EXPECT_TRUE(absl::IsUnavailable(d.status())) << d.status();
          EXPECT_THAT(std::string(d.status().message()), HasSubstr(std::string(cause)));
          break;
        case FailurePolicy::kAllow:
          ASSERT_TRUE(d.ok()) << d.status();
          EXPECT_TRUE(d->allowed);
          break;
        case FailurePolicy::kLocal:
          // A limiter in this process with the same limit, 2 per hour.
          ASSERT_TRUE(d.ok()) << d.status();
          EXPECT_EQ(d->allowed, i < 2) << i;
          break;
      }
    }
    EXPECT_EQ(redis.Stats().failures, before.failures + 4);
  }

  // Asks until Redis decides again (no failure counted), for at most 10 s.
  void ExpectServedAgain(RedisStore& redis, const std::string& key) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<Decision> d;
    do {
      const uint64_t failures = redis.Stats().failures;
      d = redis.Decide(limit_, key, 1, At(kEpoch + 2));
      if (d.ok() && redis.Stats().failures == failures) {
        break;
      }
      std::this_thread::sleep_for(20ms);
    } while (std::chrono::steady_clock::now() - start < 120s);  // A watchdog.
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(d->allowed);
    EXPECT_EQ(d->remaining, 1);  // Decided in Redis, which had not seen the key.
  }

  const Limit limit_ = MustLimit({.limit = 2, .period = 1h});
  Lines lines_;
};

TEST_P(RedisIncidentTest, ARedisOutOfMemoryIsDecidedByThePolicy) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = ConnectedStore(server);
  testing::Client client(server.port());
  client.Run({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
  client.Run({"CONFIG", "SET", "maxmemory", "1"});

  ExpectThePolicy(*redis, "oom", "OOM");
  EXPECT_EQ(lines_.Await("cannot decide: OOM"), 1) << Joined(lines_.Get());

  client.Run({"CONFIG", "SET", "maxmemory", "0"});
  ExpectServedAgain(*redis, "after");
  EXPECT_EQ(lines_.Await("is back"), 1) << Joined(lines_.Get());
}

TEST_P(RedisIncidentTest, ADemotedMasterIsDecidedByThePolicyAndFoundAgain) {
  RedisServer server;
  RedisServer other;  // The master it is demoted under.
  std::unique_ptr<RedisStore> redis = ConnectedStore(server);
  testing::Client client(server.port());
  client.Run({"REPLICAOF", "127.0.0.1", std::to_string(other.port())});

  ExpectThePolicy(*redis, "demoted", "");
  EXPECT_GE(lines_.Await("READONLY"), 1) << Joined(lines_.Get());

  // Promoted again (as a failover would, by DNS or by hand): the store reconnects and decides.
  client.Run({"REPLICAOF", "NO", "ONE"});
  ExpectServedAgain(*redis, "promoted");
  EXPECT_GE(lines_.Await("is back"), 1) << Joined(lines_.Get());
}

INSTANTIATE_TEST_SUITE_P(Policies, RedisIncidentTest, testing::EveryPolicy(), testing::PolicyName);

// A Redis frozen (SIGSTOP) with calls in flight, under the deny policy: each call is answered
// Unavailable or DeadlineExceeded at its deadline, and none of them is charged when Redis
// wakes up and reads them at last (the script refuses a call past its deadline).
TEST(RedisFrozenTest, CallsAnsweredAtTheirDeadlineAreNotChargedWhenRedisWakes) {
  RedisServer server;
  RedisStoreOptions options = OptionsFor(server);
  options.use_caller_time = false;  // Redis's clock, which runs on while it is frozen.
  options.timeout = 300ms;
  options.batch = 1;  // A script call each: every one of them in flight at once.
  std::unique_ptr<RedisStore> redis = MustStore(options);
  const Limit limit = MustLimit({.limit = 1000, .period = 1h});
  ASSERT_TRUE(redis->Decide(limit, "k", 1, At(kEpoch)).ok());

  const absl::StatusOr<Decision> query =
      testing::QueryAfterCallsWhileFrozen(server, *redis, limit, "k", 20, At(kEpoch));
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->remaining, 999);  // The one decided before the freeze alone.
}

// The same, the calls spread over half the timeout on one connection: it fails the later
// ones with the first, before their own deadline, and Redis, woken at once, reads them before
// it. Each carries the connection's earliest deadline as its `expires`, so none is charged.
TEST(RedisFrozenTest, CallsAnsweredBeforeTheirOwnDeadlineAreNotChargedWhenRedisWakes) {
  RedisServer server;
  RedisStoreOptions options = OptionsFor(server);
  options.use_caller_time = false;
  options.timeout = 2s;  // Calls at 0, 0.5 s and 1 s: the last is answered 1 s early.
  options.batch = 1;
  options.connections = 1;
  std::unique_ptr<RedisStore> redis = MustStore(options);
  const Limit limit = MustLimit({.limit = 1000, .period = 1h});
  ASSERT_TRUE(redis->Decide(limit, "k", 1, At(kEpoch)).ok());

  const absl::StatusOr<Decision> query =
      testing::QueryAfterCallsWhileFrozen(server, *redis, limit, "k", 3, At(kEpoch), 500ms);
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->remaining, 999);
}

// A Redis that dies and comes back: one line when it is lost (naming why), one when it is
// back, however many calls failed between.
TEST(RedisStoreLogTest, LostAndBackAreSaidOncePerChangeNotPerCall) {
  RedisServer server;
  Lines lines;
  RedisStoreOptions options = OptionsFor(server);
  options.on_failure = FailurePolicy::kAllow;
  // No timeout of its own on a busy machine; a refused connection fails at once anyway.
  options.timeout = 1s;
  options.log = lines.Sink();
  std::unique_ptr<RedisStore> redis = MustStore(options);
  const Limit limit = MustLimit({.limit = 100, .period = 1h});
  ASSERT_TRUE(redis->Decide(limit, "k", 1, At(kEpoch)).ok());
  EXPECT_TRUE(lines.Get().empty()) << Joined(lines.Get());

  server.Stop();
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(redis->Decide(limit, "k", 1, At(kEpoch)).ok());
    std::this_thread::sleep_for(10ms);
  }
  server.Start();
  for (int i = 0; i < 300 && lines.Count("is back") == 0; ++i) {
    ASSERT_TRUE(redis->Decide(limit, "k", 1, At(kEpoch)).ok());
    std::this_thread::sleep_for(10ms);
  }
  const std::vector<std::string> said = lines.Get();
  const std::string port = std::to_string(server.port());
  ASSERT_FALSE(said.empty());
  EXPECT_THAT(said.front(), HasSubstr("W Redis at 127.0.0.1:" + port + " lost: "));
  EXPECT_EQ(lines.Count("is back"), 1) << Joined(said);
  // Lost, perhaps still lost for another reason (closed, then refused), then back: a few lines
  // for 30 and more calls.
  EXPECT_LE(said.size(), 4u) << Joined(said);
  EXPECT_THAT(said.back(), HasSubstr("I Redis at 127.0.0.1:" + port + " is back after"));
}

TEST(RedisStoreLogTest, AnAuthRefusedIsSaidWithRedisError) {
  RedisServer server({"--requirepass", "s3cret"});
  Lines lines;
  absl::StatusOr<RedisStoreOptions> options =
      ParseRedisUrl("redis://:nope@127.0.0.1:" + std::to_string(server.port()));
  ASSERT_TRUE(options.ok());
  options->timeout = 500ms;
  options->log = lines.Sink();
  std::unique_ptr<RedisStore> redis = MustStore(*options);
  const Limit limit = MustLimit({.limit = 2, .period = 1h});
  for (int i = 0; i < 10; ++i) {
    EXPECT_FALSE(redis->Decide(limit, "k", 1, At(kEpoch)).ok());
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(lines.Await("refused AUTH: WRONGPASS"), 1) << Joined(lines.Get());
  EXPECT_EQ(lines.Get().size(), 1u) << Joined(lines.Get());
}

}  // namespace
}  // namespace sluice
