// Deterministic tests of each algorithm's pure decision function, with exact times: both sides
// of every boundary, long idles, time stepping back, cost 0, cost above the limit, and
// denied requests that must change nothing. Expected figures are worked out by hand from
// docs/algorithms.md in the comments.

#include "sluice/algorithms.h"

#include "gtest/gtest.h"

#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

constexpr int64_t kSecond = 1'000'000;

// ---------------------------------------------------------------------------- fixed_window

class FixedWindowTest : public ::testing::Test {
 protected:
  const Limit limit_ = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 3, .period = 1s});
  FixedWindowState state_;
};

TEST_F(FixedWindowTest, AdmitsTheLimitThenDeniesUntilTheWindowEnds) {
  for (int64_t remaining : {2, 1, 0}) {
    const Decision d = Decide(limit_, state_, At(kEpoch + 250'000), 1);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.remaining, remaining);
    EXPECT_EQ(d.reset_after, 750'000us);  // Windows are aligned to the epoch.
  }
  const Decision last_us = Decide(limit_, state_, At(kEpoch + kSecond - 1), 1);
  EXPECT_FALSE(last_us.allowed);
  EXPECT_EQ(last_us.retry_after, 1us);
  EXPECT_EQ(last_us.reset_after, 1us);
  EXPECT_EQ(last_us.remaining, 0);

  const Decision next_window = Decide(limit_, state_, At(kEpoch + kSecond), 1);
  EXPECT_TRUE(next_window.allowed);
  EXPECT_EQ(next_window.remaining, 2);
  EXPECT_EQ(next_window.reset_after, 1s);
}

TEST_F(FixedWindowTest, DeniedRequestAndCostZeroChangeNothing) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch), 3).allowed);
  const FixedWindowState before = state_;
  EXPECT_FALSE(Decide(limit_, state_, At(kEpoch + 10), 1).allowed);
  const Decision query = Decide(limit_, state_, At(kEpoch + 20), 0);
  EXPECT_TRUE(query.allowed);
  EXPECT_EQ(query.remaining, 0);
  EXPECT_EQ(state_, before);
}

TEST_F(FixedWindowTest, CostAboveTheLimitIsNeverAllowed) {
  const Decision d = Decide(limit_, state_, At(kEpoch), 4);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, kNeverAllowed);
  EXPECT_EQ(d.remaining, 3);
  EXPECT_EQ(d.reset_after, 0us);  // Nothing recorded.
  EXPECT_EQ(state_, FixedWindowState{});
}

TEST_F(FixedWindowTest, TimeSteppingBackIsTreatedAsTheLastAdmission) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch + kSecond + 500), 3).allowed);
  // 600us earlier is in the previous window, but it counts as the last admission's time.
  const Decision d = Decide(limit_, state_, At(kEpoch + kSecond - 100), 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, Micros(kSecond - 500));
}

TEST_F(FixedWindowTest, LongIdleStartsAFreshWindow) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch), 3).allowed);
  const Decision d = Decide(limit_, state_, At(kEpoch + 400LL * 86'400 * kSecond + 1), 1);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 2);
}

// ---------------------------------------------------------------------------- sliding_log

class SlidingLogTest : public ::testing::Test {
 protected:
  const Limit limit_ = MustLimit({.algorithm = Algorithm::kSlidingLog, .limit = 2, .period = 1s});
  SlidingLogState state_;
};

TEST_F(SlidingLogTest, AnEntryLeavesExactlyOnePeriodLater) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch), 1).allowed);
  const Decision second = Decide(limit_, state_, At(kEpoch + 500'000), 1);
  EXPECT_TRUE(second.allowed);
  EXPECT_EQ(second.remaining, 0);
  EXPECT_EQ(second.reset_after, 1s);

  // The window is (t - P, t]: at t = P - 1 the first entry is still in it.
  const Decision early = Decide(limit_, state_, At(kEpoch + kSecond - 1), 1);
  EXPECT_FALSE(early.allowed);
  EXPECT_EQ(early.retry_after, 1us);
  EXPECT_EQ(early.reset_after, 500'001us);

  const Decision on_time = Decide(limit_, state_, At(kEpoch + kSecond), 1);
  EXPECT_TRUE(on_time.allowed);
  EXPECT_EQ(on_time.remaining, 0);
}

TEST_F(SlidingLogTest, RetryAfterWaitsForEnoughEntriesToLeave) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch), 1).allowed);
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch + 300'000), 1).allowed);
  // Cost 2 needs both entries gone: the newer leaves at 1.3 s.
  const Decision d = Decide(limit_, state_, At(kEpoch + 400'000), 2);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 900'000us);
  EXPECT_EQ(Decide(limit_, state_, At(kEpoch + 5 * kSecond), 3).retry_after, kNeverAllowed);
}

TEST_F(SlidingLogTest, SameTimestampIsOneEntry) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch), 1).allowed);
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch), 1).allowed);
  EXPECT_EQ(state_.log.entries().size(), 1u);
  EXPECT_EQ(state_.log.total(), 2);
}

TEST_F(SlidingLogTest, DeniedAndTimeSteppingBackChangeNothing) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch + 100), 2).allowed);
  const SlidingLogState before = state_;
  // Earlier than the last admission: treated as it, so still full.
  const Decision back = Decide(limit_, state_, At(kEpoch - kSecond), 1);
  EXPECT_FALSE(back.allowed);
  EXPECT_EQ(back.retry_after, 1s);
  EXPECT_EQ(state_, before);
}

// ---------------------------------------------------------------------------- sliding_window

class SlidingWindowTest : public ::testing::Test {
 protected:
  const Limit limit_ =
      MustLimit({.algorithm = Algorithm::kSlidingWindow, .limit = 10, .period = 1s});
  SlidingWindowState state_;
};

TEST_F(SlidingWindowTest, PreviousWindowWeighsByTheTimeLeftOfIt) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch + 500'000), 10).allowed);
  // A quarter into the next window the previous one weighs 3/4: 7.5 + 1 <= 10.
  const Decision d = Decide(limit_, state_, At(kEpoch + 1'250'000), 1);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 1);  // floor((10 - 7.5 - 1) / 1)
  EXPECT_EQ(d.reset_after, 1'750'000us);
  // Cost 2 needs 10 * (1 - r) + 3 <= 10, r >= 0.3: 50 ms from now, not 1 us sooner.
  const Decision two = Decide(limit_, state_, At(kEpoch + 1'250'000), 2);
  EXPECT_FALSE(two.allowed);
  EXPECT_EQ(two.retry_after, 50'000us);
  SlidingWindowState copy = state_;
  EXPECT_FALSE(Decide(limit_, copy, At(kEpoch + 1'299'999), 2).allowed);
  EXPECT_TRUE(Decide(limit_, copy, At(kEpoch + 1'300'000), 2).allowed);
}

TEST_F(SlidingWindowTest, RetryReachesIntoTheNextWindows) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch + 900'000), 10).allowed);
  // Same window, full: only the next window helps, where prev = 10 weighs (P - r') / P.
  // Cost 1 fits when 10 * (P - r') <= 9 * P: r' >= 100 ms.
  const Decision d = Decide(limit_, state_, At(kEpoch + 950'000), 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 150'000us);
  // Cost 10 fits only when the previous window has no weight left: two windows on.
  const Decision full = Decide(limit_, state_, At(kEpoch + 950'000), 10);
  EXPECT_EQ(full.retry_after, 1'050'000us);
}

TEST_F(SlidingWindowTest, IdleOverTwoWindowsForgetsEverything) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch), 10).allowed);
  const Decision d = Decide(limit_, state_, At(kEpoch + 2 * kSecond), 10);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 0);
}

TEST_F(SlidingWindowTest, DeniedChangesNothingAndCostAboveLimitNeverFits) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch), 10).allowed);
  const SlidingWindowState before = state_;
  EXPECT_FALSE(Decide(limit_, state_, At(kEpoch + 1), 1).allowed);
  EXPECT_EQ(Decide(limit_, state_, At(kEpoch + 1), 11).retry_after, kNeverAllowed);
  EXPECT_EQ(state_, before);
}

// ---------------------------------------------------------------------------- sliding_buckets

class SlidingBucketsTest : public ::testing::Test {
 protected:
  // Four buckets of 250 ms.
  const Limit limit_ =
      MustLimit({.algorithm = Algorithm::kSlidingBuckets, .limit = 4, .period = 1s, .buckets = 4});
  SlidingBucketsState state_;
};

TEST_F(SlidingBucketsTest, ABucketLeavesWholeAtItsEdge) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch + 100'000), 2).allowed);  // bucket 0
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch + 300'000), 2).allowed);  // bucket 1
  const Decision d = Decide(limit_, state_, At(kEpoch + 900'000), 1);    // bucket 3
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 100'000us);  // Bucket 0 leaves at 1 s.
  EXPECT_EQ(d.reset_after, 350'000us);  // Bucket 1 leaves at 1.25 s.

  EXPECT_FALSE(Decide(limit_, state_, At(kEpoch + 999'999), 1).allowed);
  const Decision at_edge = Decide(limit_, state_, At(kEpoch + kSecond), 1);
  EXPECT_TRUE(at_edge.allowed);
  EXPECT_EQ(at_edge.remaining, 1);
  EXPECT_EQ(at_edge.reset_after, 1s);  // Newest bucket 4 leaves at 2 s.
}

TEST_F(SlidingBucketsTest, DefaultBucketsMustDivideThePeriod) {
  // 60 buckets: fine for a minute, not for a second (1,000,000 us is not a multiple of 60).
  EXPECT_TRUE(
      Limit::Create({.algorithm = Algorithm::kSlidingBuckets, .limit = 1, .period = 1min}).ok());
  EXPECT_FALSE(
      Limit::Create({.algorithm = Algorithm::kSlidingBuckets, .limit = 1, .period = 1s}).ok());
}

// ---------------------------------------------------------------------------- token_bucket

// 10 per second with a burst of 2: a token every 100 ms.
constexpr LimitSpec kTenPerSecondBurstTwo{.limit = 10, .period = 1s, .burst = 2};

class TokenBucketTest : public ::testing::Test {
 protected:
  const Limit limit_ = MustLimit([] {
    LimitSpec spec = kTenPerSecondBurstTwo;
    spec.algorithm = Algorithm::kTokenBucket;
    return spec;
  }());
  TokenBucketState state_;
};

TEST_F(TokenBucketTest, ANewKeyStartsFullAndRefillsOneTokenPerInterval) {
  const Decision burst = Decide(limit_, state_, At(kEpoch), 2);
  EXPECT_TRUE(burst.allowed);
  EXPECT_EQ(burst.remaining, 0);
  EXPECT_EQ(burst.reset_after, 200'000us);

  const Decision early = Decide(limit_, state_, At(kEpoch + 99'999), 1);
  EXPECT_FALSE(early.allowed);
  EXPECT_EQ(early.retry_after, 1us);
  EXPECT_EQ(early.reset_after, 100'001us);
  EXPECT_TRUE(Decide(limit_, state_, At(kEpoch + 100'000), 1).allowed);
}

TEST_F(TokenBucketTest, LongIdleRefillsOnlyUpToTheBurst) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch), 2).allowed);
  const int64_t later = kEpoch + 400LL * 86'400 * kSecond;
  EXPECT_TRUE(Decide(limit_, state_, At(later), 2).allowed);
  EXPECT_FALSE(Decide(limit_, state_, At(later), 1).allowed);
}

TEST_F(TokenBucketTest, TimeSteppingBackGainsNothing) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch + kSecond), 2).allowed);
  const TokenBucketState before = state_;
  const Decision d = Decide(limit_, state_, At(kEpoch), 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 100'000us);
  EXPECT_EQ(state_, before);
}

TEST_F(TokenBucketTest, CostAboveTheBurstIsNeverAllowed) {
  const Decision d = Decide(limit_, state_, At(kEpoch), 3);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, kNeverAllowed);
  EXPECT_EQ(d.remaining, 2);
  EXPECT_EQ(state_, TokenBucketState{});
}

// ---------------------------------------------------------------------------- gcra

class GcraTest : public ::testing::Test {
 protected:
  const Limit limit_ = MustLimit([] {
    LimitSpec spec = kTenPerSecondBurstTwo;
    spec.algorithm = Algorithm::kGcra;
    return spec;
  }());
  GcraState state_;
};

TEST_F(GcraTest, DeniesUntilExactlyOneIntervalHasPassed) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch), 2).allowed);
  const Decision early = Decide(limit_, state_, At(kEpoch + 99'999), 1);
  EXPECT_FALSE(early.allowed);
  EXPECT_EQ(early.retry_after, 1us);
  const Decision on_time = Decide(limit_, state_, At(kEpoch + 100'000), 1);
  EXPECT_TRUE(on_time.allowed);
  EXPECT_EQ(on_time.remaining, 0);
  EXPECT_EQ(on_time.reset_after, 200'000us);
}

TEST_F(GcraTest, StateIsOneNumberAndDenialsLeaveItAlone) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch), 2).allowed);
  // TAT = t*N' + c*P' with the rate in lowest terms, 10/1s = 1/100ms: kEpoch + 2 x 100 ms.
  EXPECT_TRUE(state_.tat == Int128{kEpoch} + 2 * 100'000);
  const GcraState before = state_;
  EXPECT_FALSE(Decide(limit_, state_, At(kEpoch + 1), 1).allowed);
  EXPECT_EQ(Decide(limit_, state_, At(kEpoch + 1), 3).retry_after, kNeverAllowed);
  EXPECT_EQ(Decide(limit_, state_, At(kEpoch + 1), 0).remaining, 0);
  EXPECT_EQ(state_, before);
}

TEST_F(GcraTest, TimeSteppingBackGainsNothing) {
  ASSERT_TRUE(Decide(limit_, state_, At(kEpoch + kSecond), 2).allowed);
  // gcra keeps no time: an earlier t only makes the backlog look longer.
  const Decision d = Decide(limit_, state_, At(kEpoch), 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_GE(d.retry_after, 100'000us);
}

// ---------------------------------------------------------------------------- leaky_bucket

TEST(LeakyBucketTest, SpacesABurstOutAndDeniesWhatDoesNotFit) {
  // The spec's example: B = 5, five requests at one instant get delays 0, P/N, ... 4P/N
  // (rounded up); a sixth is denied. N = 3 per second makes the rounding visible.
  const Limit limit =
      MustLimit({.algorithm = Algorithm::kLeakyBucket, .limit = 3, .period = 1s, .burst = 5});
  LeakyBucketState state;
  const int64_t delays[] = {0, 333'334, 666'667, 1'000'000, 1'333'334};
  for (int k = 0; k < 5; ++k) {
    const Decision d = Decide(limit, state, At(kEpoch), 1);
    EXPECT_TRUE(d.allowed) << k;
    EXPECT_EQ(d.delay, Micros(delays[k])) << k;
    EXPECT_EQ(d.remaining, 4 - k) << k;
  }
  const LeakyBucketState before = state;
  const Decision sixth = Decide(limit, state, At(kEpoch), 1);
  EXPECT_FALSE(sixth.allowed);
  EXPECT_EQ(sixth.delay, 0us);
  EXPECT_EQ(sixth.retry_after, 333'334us);
  EXPECT_EQ(sixth.reset_after, 1'666'667us);
  EXPECT_EQ(state, before);
  // One drain interval later there is room for exactly one more, queued behind four.
  const Decision later = Decide(limit, state, At(kEpoch + 333'334), 1);
  EXPECT_TRUE(later.allowed);
  EXPECT_EQ(later.delay, 1'333'333us);  // ceil((5P - 333334 * 3) / 3)
}

// ---------------------------------------------------------------------------- 128-bit figures

// A burst of 10^9 refilled at 3 per 13 hours takes 1.56 x 10^19 us (half a million years) to
// refill from empty: beyond a Decision's 64 bits. DecideWide is exact; Decide saturates.
class HugeFiguresTest : public ::testing::TestWithParam<Algorithm> {};

TEST_P(HugeFiguresTest, WideIsExactAndNarrowSaturates) {
  const Limit limit =
      MustLimit({.algorithm = GetParam(), .limit = 3, .period = 13h, .burst = 1'000'000'000});
  AnyState state = InitialState(GetParam());
  const WideDecision empty = DecideWide(limit, state, At(kEpoch), 1'000'000'000);
  ASSERT_TRUE(empty.allowed);
  const Int128 expected = (Int128{1'000'000'000} * 46'800'000'000 + 2) / 3;  // ceil(B*P/N)
  EXPECT_TRUE(empty.reset_after_us == expected);
  EXPECT_EQ(Narrow(empty).reset_after, Micros::max());

  const WideDecision more = DecideWide(limit, state, At(kEpoch), 999'999'999);
  EXPECT_FALSE(more.allowed);
  EXPECT_TRUE(more.retry_after_us == (Int128{999'999'999} * 46'800'000'000 + 2) / 3);
  EXPECT_EQ(Decide(limit, state, At(kEpoch), 999'999'999).retry_after, Micros::max());
  EXPECT_EQ(Decide(limit, state, At(kEpoch), 1).retry_after, Micros(15'600'000'000));
}

INSTANTIATE_TEST_SUITE_P(Buckets, HugeFiguresTest,
                         ::testing::Values(Algorithm::kTokenBucket, Algorithm::kGcra,
                                           Algorithm::kLeakyBucket),
                         testing::AlgorithmTestName);

// ---------------------------------------------------------------------------- every algorithm

// For every algorithm and for periods from 1 us to 400 days and limits up to 10^9: a full
// request at one instant empties the limit; one more unit is denied with a retry_after that is
// exact (1 us earlier still denied, at it allowed); reset_after is exact (1 us earlier a trace
// remains, at it none).
struct Extreme {
  Algorithm algorithm;
  int64_t limit;
  Micros period;
};

class ExtremesTest : public ::testing::TestWithParam<Extreme> {};

TEST_P(ExtremesTest, BoundariesAreExactAtEveryScale) {
  const Extreme& e = GetParam();
  const Limit limit = MustLimit({.algorithm = e.algorithm,
                                 .limit = e.limit,
                                 .period = e.period,
                                 .buckets = e.period.count() % 60 == 0 ? 60 : 1});
  const int64_t t = kEpoch + 123'457;  // Not aligned to any window.
  AnyState state = InitialState(e.algorithm);
  const Decision full = Decide(limit, state, At(t), e.limit);
  ASSERT_TRUE(full.allowed);
  EXPECT_EQ(full.remaining, 0);

  AnyState probe = state;
  const Decision one_more = Decide(limit, probe, At(t), 1);
  ASSERT_FALSE(one_more.allowed);
  ASSERT_GE(one_more.retry_after, 1us);
  const int64_t retry = one_more.retry_after.count();
  if (retry > 1) {
    probe = state;
    EXPECT_FALSE(Decide(limit, probe, At(t + retry - 1), 1).allowed);
  }
  probe = state;
  EXPECT_TRUE(Decide(limit, probe, At(t + retry), 1).allowed);

  const int64_t reset = full.reset_after.count();
  ASSERT_GE(reset, 1);
  probe = state;
  EXPECT_EQ(Decide(limit, probe, At(t + reset - 1), 0).reset_after, 1us);
  const Decision after_reset = Decide(limit, probe, At(t + reset), 0);
  EXPECT_EQ(after_reset.reset_after, 0us);
  EXPECT_EQ(after_reset.remaining, e.limit);

  EXPECT_EQ(Decide(limit, probe, At(t), e.limit + 1).retry_after, kNeverAllowed);
}

std::vector<Extreme> AllExtremes() {
  std::vector<Extreme> out;
  for (Algorithm algorithm : testing::AllAlgorithms()) {
    for (int64_t limit : {int64_t{1}, int64_t{7}, int64_t{1'000'000'000}}) {
      for (Micros period : {Micros{1}, Micros{1'000'000}, Micros{400LL * 86'400'000'000}}) {
        out.push_back({algorithm, limit, period});
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, ExtremesTest, ::testing::ValuesIn(AllExtremes()),
                         [](const ::testing::TestParamInfo<Extreme>& info) {
                           return std::string(AlgorithmName(info.param.algorithm)) + "_" +
                                  std::to_string(info.param.limit) + "_per_" +
                                  std::to_string(info.param.period.count()) + "us";
                         });

}  // namespace
}  // namespace sluice
