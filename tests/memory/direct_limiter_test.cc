// DirectLimiter on one thread: every figure the spec's Decide gives, and the memory store's
// for one key, on seeded random traces (steps back in time included) through both of its
// paths (one atomic word; the 128-bit TAT under a lock); what it refuses; Check's clock; and
// Acquire's waits on a manual clock. Threads racing on it: direct_limiter_concurrency_test.cc.

#include "sluice/direct_limiter.h"

#include <algorithm>
#include <future>
#include <limits>
#include <memory>
#include <string>

#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "sluice/memory_store.h"
#include "src/memory/compact_state.h"
#include "tests/testing/random.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using testing::Random;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

constexpr auto kWatchdog = 60s;  // Real time only as a watchdog, as limiter_test.cc.

std::unique_ptr<DirectLimiter> MustDirect(const Limit& limit, Clock& clock) {
  absl::StatusOr<std::unique_ptr<DirectLimiter>> direct = DirectLimiter::Create(limit, clock);
  EXPECT_TRUE(direct.ok()) << direct.status();
  return direct.ok() ? *std::move(direct) : nullptr;
}

class DirectLimiterTraceTest : public ::testing::TestWithParam<Algorithm> {};

TEST_P(DirectLimiterTraceTest, DecidesAsTheSpecAndTheMemoryStoreOnRandomTraces) {
  Random random(testing::Seed(23));
  ManualClock clock{At(kEpoch)};
  int compact = 0;
  int wide = 0;
  for (int c = 0; c < 400; ++c) {
    const Limit limit = random.ValidLimit(GetParam());
    (internal::TatFitsCompact(limit) ? compact : wide)++;
    std::unique_ptr<DirectLimiter> direct = MustDirect(limit, clock);
    std::unique_ptr<DirectLimiter> yes_or_no = MustDirect(limit, clock);  // TryAcquire's.
    ASSERT_NE(direct, nullptr);
    MemoryStore store;
    AnyState spec = InitialState(GetParam());
    int64_t t = kEpoch + random.Between(0, 1'000'000);
    for (int row = 0; row < 60; ++row) {
      // Mostly forward; one step in ten goes back, as a wall clock set back would.
      t += random.OneIn(10) ? -random.Between(0, 2 * random.Gap(limit)) : random.Gap(limit);
      t = std::clamp<int64_t>(t, 0, DirectLimiter::kLatest.time_since_epoch().count() - 1);
      const int64_t cost = random.Cost(limit);
      const Decision want = Decide(limit, spec, At(t), cost);
      const absl::StatusOr<Decision> got = direct->CheckAt(cost, At(t));
      const absl::StatusOr<Decision> stored = store.Decide(limit, "k", cost, At(t));
      ASSERT_TRUE(got.ok() && stored.ok()) << got.status() << stored.status();
      ASSERT_EQ(*got, want) << limit.ToString() << " case " << c << " row " << row << " t=" << t
                            << " cost=" << cost;
      ASSERT_EQ(*stored, want) << limit.ToString() << " case " << c << " row " << row;
      if (GetParam() == Algorithm::kGcra) {  // TryAcquire admits exactly as Check does.
        const absl::StatusOr<bool> admitted = yes_or_no->TryAcquireAt(cost, At(t));
        ASSERT_TRUE(admitted.ok()) << admitted.status();
        ASSERT_EQ(*admitted, want.allowed) << limit.ToString() << " case " << c << " row " << row;
      }
    }
  }
  // Both paths were taken (the random limits reach rates of 10^9 per microsecond's period).
  EXPECT_GT(compact, 50);
  EXPECT_GT(wide, 10);
}

// The edges the random traces do not reach: the last microseconds before kLatest and the first
// after the epoch, with steps back; costs of 0, the burst, one more, and beyond 2^61 (the
// 128-bit arithmetic inside a one-word limiter); rates either side of what one word holds.
TEST_P(DirectLimiterTraceTest, DecidesAsTheSpecAtTheEdges) {
  ManualClock clock;
  const int64_t last = DirectLimiter::kLatest.time_since_epoch().count() - 1;
  int compact = 0;
  for (int64_t n : {1, 7, 1000, 1270, 1271, 1'000'003}) {
    for (int64_t burst : {int64_t{1}, int64_t{1000}, int64_t{1'000'000'000'000'000}}) {
      for (Micros period : {Micros(1), Micros(1'000'000), Limit::kMaxPeriod}) {
        const absl::StatusOr<Limit> limit =
            Limit::Create({.algorithm = GetParam(), .limit = n, .period = period, .burst = burst});
        if (!limit.ok()) {
          continue;
        }
        compact += internal::TatFitsCompact(*limit) ? 1 : 0;
        std::unique_ptr<DirectLimiter> direct = MustDirect(*limit, clock);
        std::unique_ptr<DirectLimiter> yes_or_no = MustDirect(*limit, clock);
        ASSERT_NE(direct, nullptr);
        AnyState spec = InitialState(GetParam());
        for (int64_t t : {last - 6, last - 2, last - 5, last, last - 1, int64_t{0}, int64_t{3},
                          int64_t{1}, last}) {
          for (int64_t cost : {int64_t{0}, int64_t{1}, burst, burst + 1, int64_t{1} << 62,
                               std::numeric_limits<int64_t>::max()}) {
            const Decision want = Decide(*limit, spec, At(t), cost);
            const absl::StatusOr<Decision> got = direct->CheckAt(cost, At(t));
            ASSERT_TRUE(got.ok()) << got.status();
            ASSERT_EQ(*got, want) << limit->ToString() << " t=" << t << " cost=" << cost;
            if (GetParam() == Algorithm::kGcra) {
              ASSERT_EQ(*yes_or_no->TryAcquireAt(cost, At(t)), want.allowed)
                  << limit->ToString() << " t=" << t << " cost=" << cost;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(compact, 10);
}

INSTANTIATE_TEST_SUITE_P(Tat, DirectLimiterTraceTest,
                         ::testing::Values(Algorithm::kGcra, Algorithm::kLeakyBucket),
                         testing::AlgorithmTestName);

TEST(DirectLimiterTest, RefusesAnAlgorithmWhoseStateIsNotOneNumber) {
  ManualClock clock;
  for (Algorithm a : testing::AllAlgorithms()) {
    const absl::StatusOr<std::unique_ptr<DirectLimiter>> direct =
        DirectLimiter::Create(MustLimit({.algorithm = a, .limit = 5, .period = 60s}), clock);
    if (a == Algorithm::kGcra || a == Algorithm::kLeakyBucket) {
      EXPECT_TRUE(direct.ok()) << direct.status();
      continue;
    }
    ASSERT_FALSE(direct.ok()) << AlgorithmName(a);
    EXPECT_EQ(direct.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(direct.status().message().find("gcra"), std::string::npos) << direct.status();
  }
}

TEST(DirectLimiterTest, RefusesANegativeCostAndATimeOutOfRangeAndRecordsNothing) {
  ManualClock clock{At(kEpoch)};
  auto direct =
      MustDirect(MustLimit({.algorithm = Algorithm::kGcra, .limit = 1, .period = 1s}), clock);
  EXPECT_EQ(direct->Check(-1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(direct->CheckAt(1, DirectLimiter::kLatest).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(direct->CheckAt(1, DirectLimiter::kEarliest - 1us).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(direct->Check()->allowed) << "a refused request took the one place";
  EXPECT_FALSE(direct->Check()->allowed);
}

TEST(DirectLimiterTest, TryAcquireIsForGcraAndRefusesWhatCheckRefuses) {
  ManualClock clock{At(kEpoch)};
  auto gcra = MustDirect(
      MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s, .burst = 2}), clock);
  EXPECT_EQ(gcra->TryAcquire(-1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gcra->TryAcquireAt(1, DirectLimiter::kLatest).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(*gcra->TryAcquire(3)) << "more than the burst is never allowed";
  EXPECT_TRUE(*gcra->TryAcquire(2));
  EXPECT_FALSE(*gcra->TryAcquire());
  clock.Advance(100ms);
  EXPECT_TRUE(*gcra->TryAcquire());
  EXPECT_EQ(gcra->Check(0)->remaining, 0) << "TryAcquire recorded what it admitted";
  auto leaky = MustDirect(
      MustLimit({.algorithm = Algorithm::kLeakyBucket, .limit = 10, .period = 1s}), clock);
  const absl::StatusOr<bool> queued = leaky->TryAcquire();
  EXPECT_EQ(queued.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(queued.status().message().find("delay"), std::string::npos) << queued.status();
}

TEST(DirectLimiterTest, CheckReadsTheClockAndCheckAtTakesTheTimeGiven) {
  ManualClock clock{At(kEpoch)};
  auto direct = MustDirect(
      MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s, .burst = 1}), clock);
  EXPECT_TRUE(direct->Check()->allowed);
  EXPECT_FALSE(direct->Check()->allowed);
  clock.Advance(100ms);
  EXPECT_TRUE(direct->Check()->allowed);
  EXPECT_TRUE(direct->CheckAt(1, At(kEpoch + 200'000))->allowed);
  EXPECT_FALSE(direct->CheckAt(1, At(kEpoch + 299'999))->allowed);
  // Cost 0 asks without recording.
  EXPECT_EQ(direct->CheckAt(0, At(kEpoch + 300'000))->remaining, 1);
  EXPECT_TRUE(direct->CheckAt(1, At(kEpoch + 300'000))->allowed);
}

TEST(DirectLimiterTest, AcquireWaitsUntilAllowedAndGivesUpWhenItCannotBe) {
  ManualClock clock{At(kEpoch)};
  auto direct = MustDirect(
      MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s, .burst = 1}), clock);
  ASSERT_TRUE(direct->Check()->allowed);
  EXPECT_EQ(direct->Acquire(1, At(kEpoch) + 99'999us)->retry_after, 100ms) << "it should not wait";
  EXPECT_EQ(direct->Acquire(2, At(kEpoch) + 1h)->retry_after, kNeverAllowed);
  auto result = std::async(std::launch::async, [&] { return direct->Acquire(1, At(kEpoch) + 1s); });
  clock.AwaitSleepers(1);
  clock.Advance(99'999us);
  EXPECT_EQ(result.wait_for(50ms), std::future_status::timeout) << "returned before its time";
  clock.Advance(1us);
  ASSERT_EQ(result.wait_for(kWatchdog), std::future_status::ready);
  EXPECT_TRUE(result.get()->allowed);
  EXPECT_FALSE(direct->Check()->allowed) << "Acquire did not record its admission";
}

// Time stands still; a wait returns at once and is only counted. So an Acquire that joined a
// queue returns at once too, and one that joined past its deadline fails the test, not hangs it.
class StillClock final : public Clock {
 public:
  Timestamp Now() const override { return At(kEpoch); }
  void SleepUntil(Timestamp) override { ++sleeps; }
  int sleeps = 0;
};

// Acquire joins a leaky_bucket queue only where its place is served by the deadline, in the
// same step as it takes the place: with 99 places held and a deadline 100 ms away (one place a
// millisecond), places 99 and 100 are taken and the next Acquire is told at once, as if it had
// asked first, that the queue is too long: by 1 ms for that deadline.
TEST(DirectLimiterTest, AcquireTakesOnlyAPlaceServedByTheDeadline) {
  StillClock clock;
  auto leaky = MustDirect(
      MustLimit({.algorithm = Algorithm::kLeakyBucket, .limit = 1, .period = 1ms, .burst = 1000}),
      clock);
  for (int i = 0; i < 99; ++i) {
    ASSERT_TRUE(leaky->Check()->allowed);
  }
  for (Micros place : {99ms, 100ms}) {
    const absl::StatusOr<Decision> joined = leaky->Acquire(1, At(kEpoch) + 100ms);
    ASSERT_TRUE(joined.ok() && joined->allowed);
    EXPECT_EQ(joined->delay, place);
  }
  EXPECT_EQ(clock.sleeps, 2) << "each waited out its place";
  const absl::StatusOr<Decision> late = leaky->Acquire(1, At(kEpoch) + 100ms);
  ASSERT_TRUE(late.ok());
  EXPECT_FALSE(late->allowed);
  EXPECT_EQ(late->retry_after, 1ms);
  EXPECT_EQ(late->delay, 0us);
  EXPECT_EQ(clock.sleeps, 2);
  EXPECT_EQ(leaky->Check(0)->delay, 101ms) << "the refused Acquire took a place";
}

TEST(DirectLimiterTest, AcquireWaitsOutALeakyBucketDelay) {
  ManualClock clock{At(kEpoch)};
  auto leaky = MustDirect(
      MustLimit({.algorithm = Algorithm::kLeakyBucket, .limit = 10, .period = 1s, .burst = 5}),
      clock);
  ASSERT_EQ(leaky->Check()->delay, 0us);
  auto result = std::async(std::launch::async, [&] { return leaky->Acquire(1, At(kEpoch) + 1s); });
  clock.AwaitSleepers(1);
  EXPECT_EQ(result.wait_for(50ms), std::future_status::timeout);
  clock.Advance(100ms);  // Its place in the queue.
  ASSERT_EQ(result.wait_for(kWatchdog), std::future_status::ready);
  const Decision d = *result.get();
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.delay, 100ms);
}

}  // namespace
}  // namespace sluice
