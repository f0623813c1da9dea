#include "sluice/limiter.h"

#include <future>

#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

// Real time serves only as a watchdog: a waiting Acquire that never returns fails the test
// instead of hanging it.
constexpr auto kWatchdog = 60s;

class LimiterTest : public ::testing::Test {
 protected:
  ManualClock clock_{At(kEpoch)};
  MemoryStore store_;
  // One every 100 ms, no burst beyond one.
  Limiter gcra_{MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s, .burst = 1}),
                store_, clock_};
};

TEST_F(LimiterTest, CheckUsesTheClockAndCheckAtTheTimeGiven) {
  EXPECT_TRUE(gcra_.Check("k")->allowed);
  EXPECT_FALSE(gcra_.Check("k")->allowed);
  clock_.Advance(100ms);
  EXPECT_TRUE(gcra_.Check("k")->allowed);
  // The time passed in wins over the clock.
  EXPECT_TRUE(gcra_.CheckAt("k", 1, At(kEpoch + 200'000)).value().allowed);
  EXPECT_EQ(gcra_.Check("k", -1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(LimiterTest, SeveralLimitsAreAllOrNothing) {
  Limiter both({MustLimit({.algorithm = Algorithm::kTokenBucket, .limit = 2, .period = 1s}),
                MustLimit({.algorithm = Algorithm::kSlidingLog, .limit = 3, .period = 1h})},
               store_, clock_);
  EXPECT_TRUE(both.Check("u")->allowed);
  EXPECT_TRUE(both.Check("u")->allowed);
  EXPECT_FALSE(both.Check("u")->allowed);  // The token bucket is empty; the log keeps 1 room.
  clock_.Advance(500ms);
  const Decision d = *both.Check("u");
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 0);  // The log is now full.
  clock_.Advance(10s);
  const Decision full = *both.Check("u");
  EXPECT_FALSE(full.allowed);
  EXPECT_EQ(full.retry_after, 1h - 10500ms);  // The log's oldest entry leaves then.
}

TEST_F(LimiterTest, AcquireWaitsUntilAllowed) {
  ASSERT_TRUE(gcra_.Check("k")->allowed);
  auto result =
      std::async(std::launch::async, [&] { return gcra_.Acquire("k", 1, At(kEpoch) + 1s); });
  clock_.AwaitSleepers(1);
  clock_.Advance(99'999us);
  EXPECT_EQ(result.wait_for(50ms), std::future_status::timeout) << "returned before its time";
  clock_.Advance(1us);
  ASSERT_EQ(result.wait_for(kWatchdog), std::future_status::ready);
  const absl::StatusOr<Decision> d = result.get();
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->allowed);
  EXPECT_FALSE(gcra_.Check("k")->allowed) << "Acquire did not record its admission";
}

TEST_F(LimiterTest, AcquireFailsAtOnceWhenTheDeadlineCannotBeMet) {
  ASSERT_TRUE(gcra_.Check("k")->allowed);
  auto result =
      std::async(std::launch::async, [&] { return gcra_.Acquire("k", 1, At(kEpoch) + 99'999us); });
  ASSERT_EQ(result.wait_for(kWatchdog), std::future_status::ready) << "it waited";
  const Decision d = *result.get();
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 100ms);
}

TEST_F(LimiterTest, AcquireFailsAtOnceWhenTheRequestCanNeverBeAllowed) {
  auto result =
      std::async(std::launch::async, [&] { return gcra_.Acquire("k", 2, At(kEpoch) + 1h); });
  ASSERT_EQ(result.wait_for(kWatchdog), std::future_status::ready) << "it waited";
  EXPECT_EQ(result.get()->retry_after, kNeverAllowed);
}

TEST_F(LimiterTest, AcquireWaitsOutALeakyBucketDelay) {
  Limiter leaky(
      MustLimit({.algorithm = Algorithm::kLeakyBucket, .limit = 10, .period = 1s, .burst = 5}),
      store_, clock_);
  ASSERT_EQ(leaky.Check("q")->delay, 0us);
  auto result =
      std::async(std::launch::async, [&] { return leaky.Acquire("q", 1, At(kEpoch) + 1s); });
  clock_.AwaitSleepers(1);
  EXPECT_EQ(result.wait_for(50ms), std::future_status::timeout);
  clock_.Advance(100ms);  // Its place in the queue.
  ASSERT_EQ(result.wait_for(kWatchdog), std::future_status::ready);
  const Decision d = *result.get();
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.delay, 100ms);
}

TEST_F(LimiterTest, AcquireDoesNotJoinALeakyQueueItCannotLeaveInTime) {
  Limiter leaky(
      MustLimit({.algorithm = Algorithm::kLeakyBucket, .limit = 10, .period = 1s, .burst = 5}),
      store_, clock_);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(leaky.Check("q")->allowed);
  }
  // A fifth would wait 400 ms; the deadline allows 150 ms.
  auto result =
      std::async(std::launch::async, [&] { return leaky.Acquire("q", 1, At(kEpoch) + 150ms); });
  ASSERT_EQ(result.wait_for(kWatchdog), std::future_status::ready) << "it waited";
  const Decision d = *result.get();
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 250ms);
  EXPECT_EQ(leaky.Check("q")->delay, 400ms) << "the refused Acquire took a place in the queue";
}

}  // namespace
}  // namespace sluice
