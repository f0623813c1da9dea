// RedisStore's batching of calls that wait: while every connection has a script call in
// flight, the calls that arrive wait for its reply and go out together; and a call whose
// deadline passed while it waited is answered by the failure policy, as a timed-out call is,
// instead of being sent (sent, its script call would miss its deadline at once, and the
// deadline timer would fail a healthy connection with everything else it carries).
//
// Redis is frozen (SIGSTOP) to hold the first call in flight; the store's steady clock is
// moved ahead (AheadClock) to put the waiting calls past their deadline, without waiting.

#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/redis_store.h"
#include "tests/redis/fixtures.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::At, testing::kEpoch, testing::MustLimit, testing::MustStore, testing::OptionsFor;
using testing::RedisServer;

// Calls of cost 1 on one key, made asynchronously; their answers read by Get.
class Calls {
 public:
  Calls(RedisStore& redis, const Limit& limit) : redis_(redis), request_{&limit, "k"} {}

  void Make() {
    const size_t i = done_.size();
    done_.push_back(std::make_unique<std::promise<absl::StatusOr<Decision>>>());
    each_.push_back(std::make_unique<Decision>());
    std::promise<absl::StatusOr<Decision>>* done = done_[i].get();
    redis_.DecideAllAsync({&request_, 1}, 1, At(kEpoch), {each_[i].get(), 1},
                          [done](absl::StatusOr<Decision> d) { done->set_value(std::move(d)); });
  }
  absl::StatusOr<Decision> Get(size_t i) { return done_[i]->get_future().get(); }

 private:
  RedisStore& redis_;
  const LimitedKey request_;
  std::vector<std::unique_ptr<std::promise<absl::StatusOr<Decision>>>> done_;
  std::vector<std::unique_ptr<Decision>> each_;
};

TEST(RedisBatchingTest, CallsMadeWhileTheOnlyConnectionIsBusyWaitAndGoOutTogether) {
  RedisServer server;
  RedisStoreOptions options = OptionsFor(server);
  options.connections = 1;
  std::unique_ptr<RedisStore> redis = MustStore(options);
  const Limit limit = MustLimit({.limit = 1000, .period = 1h});
  ASSERT_TRUE(redis->Decide(limit, "k", 1, At(kEpoch)).ok());
  const uint64_t before = redis->Stats().script_calls;

  server.Pause();  // The first call stays in flight until Resume.
  Calls calls(*redis, limit);
  calls.Make();
  testing::AwaitScriptCalls(*redis, before + 1);
  calls.Make();
  // Not a wait for anything to happen: the answer is the same without it. It only lets the
  // I/O thread take the second call alone, which without the waiting would go out at once,
  // leaving the third a script call of its own.
  std::this_thread::sleep_for(50ms);
  calls.Make();
  server.Resume();
  for (size_t i = 0; i < 3; ++i) {
    absl::StatusOr<Decision> d = calls.Get(i);
    ASSERT_TRUE(d.ok()) << i << ": " << d.status();
  }
  // Each its own script call, the pipeline allowing it, would make 3.
  EXPECT_EQ(redis->Stats().script_calls - before, 2u);
  absl::StatusOr<Decision> query = redis->Decide(limit, "k", 0, At(kEpoch));
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->remaining, 996);
}

class RedisWaitedPastDeadlineTest : public ::testing::TestWithParam<FailurePolicy> {};

TEST_P(RedisWaitedPastDeadlineTest, AWaitingCallPastItsDeadlineIsAnsweredNotSent) {
  RedisServer server;
  testing::AheadClock clock;
  RedisStoreOptions options = OptionsFor(server);
  options.connections = 1;
  options.on_failure = GetParam();
  options.timeout = 60s;  // A watchdog on the real clock; the test moves its own past it.
  options.steady_clock_for_testing = clock.Fn();
  std::unique_ptr<RedisStore> redis = MustStore(options);
  const Limit limit = MustLimit({.limit = 1000, .period = 1h});
  ASSERT_TRUE(redis->Decide(limit, "k", 1, At(kEpoch)).ok());
  const uint64_t before = redis->Stats().script_calls;

  server.Pause();
  Calls calls(*redis, limit);
  calls.Make();
  testing::AwaitScriptCalls(*redis, before + 1);
  calls.Make();  // These two wait for the first one's reply...
  calls.Make();
  clock.Advance(61s);  // ... past their deadline.
  server.Resume();

  absl::StatusOr<Decision> first = calls.Get(0);
  ASSERT_TRUE(first.ok()) << first.status();  // Redis answered it: on its clock, in time.
  for (size_t i = 1; i < 3; ++i) {
    absl::StatusOr<Decision> d = calls.Get(i);
    if (GetParam() == FailurePolicy::kDeny) {
      EXPECT_TRUE(absl::IsDeadlineExceeded(d.status())) << i << ": " << d.status();
    } else {
      EXPECT_TRUE(d.ok()) << i << ": " << d.status();  // Allowed, or decided in the process.
    }
  }
  // Before, the two went out when the first was answered, and Redis charged them (996).
  absl::StatusOr<Decision> query = redis->Decide(limit, "k", 0, At(kEpoch));
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->remaining, 998);
  const RedisStoreStats stats = redis->Stats();
  EXPECT_EQ(stats.script_calls - before, 2u);  // The first, and the query.
  EXPECT_EQ(stats.failures, 2u);
  EXPECT_EQ(stats.reconnects, 0u);  // The connection was never failed.
}

INSTANTIATE_TEST_SUITE_P(Policies, RedisWaitedPastDeadlineTest, testing::EveryPolicy(),
                         testing::PolicyName);

}  // namespace
}  // namespace sluice
