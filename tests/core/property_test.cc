// Property tests on seeded random traces (the seed is printed; replay with SLUICE_SEED=...).
//  - gcra and token_bucket make identical decisions with identical figures;
//  - sliding_buckets with K = 1 decides exactly as fixed_window;
//  - for every algorithm, every figure of every decision means what the spec says it means:
//    `remaining` more cost-1 requests fit at that instant and no more; a denied request fits
//    after exactly retry_after and not 1 us sooner; after reset_after the key is as new.

#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "tests/testing/random.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using testing::Random;

constexpr int kCases = 300;
constexpr int kRows = 60;

TEST(PropertyTest, GcraAndTokenBucketAgreeOnEveryFigure) {
  Random random(testing::Seed(1));
  for (int c = 0; c < kCases; ++c) {
    const Limit gcra = random.ValidLimit(Algorithm::kGcra);
    const Limit token_bucket = MustLimit({.algorithm = Algorithm::kTokenBucket,
                                          .limit = gcra.limit(),
                                          .period = gcra.period(),
                                          .burst = gcra.burst()});
    AnyState g = GcraState{};
    AnyState tb = TokenBucketState{};
    int64_t t = kEpoch + random.Between(0, 1'000'000);
    for (int row = 0; row < kRows; ++row) {
      t += random.Gap(gcra);
      const int64_t cost = random.Cost(gcra);
      const WideDecision a = DecideWide(gcra, g, At(t), cost);
      const WideDecision b = DecideWide(token_bucket, tb, At(t), cost);
      ASSERT_TRUE(a == b) << gcra.ToString() << " case " << c << " row " << row << " t=" << t
                          << " cost=" << cost;
    }
  }
}

TEST(PropertyTest, SlidingBucketsWithOneBucketIsAFixedWindow) {
  Random random(testing::Seed(2));
  for (int c = 0; c < kCases; ++c) {
    const Limit fixed = random.ValidLimit(Algorithm::kFixedWindow);
    const Limit buckets = MustLimit({.algorithm = Algorithm::kSlidingBuckets,
                                     .limit = fixed.limit(),
                                     .period = fixed.period(),
                                     .buckets = 1});
    FixedWindowState f;
    SlidingBucketsState s;
    int64_t t = kEpoch + random.Between(0, 1'000'000);
    for (int row = 0; row < kRows; ++row) {
      t += random.Gap(fixed);
      const int64_t cost = random.Cost(fixed);
      const Decision a = Decide(fixed, f, At(t), cost);
      const Decision b = Decide(buckets, s, At(t), cost);
      ASSERT_EQ(a, b) << fixed.ToString() << " case " << c << " row " << row << " t=" << t
                      << " cost=" << cost;
    }
  }
}

// Whether t + d is a time the clock can show (past 2^63 - 1 us it cannot: year 294,247).
bool Representable(int64_t t, Int128 d) { return t + d <= std::numeric_limits<int64_t>::max(); }

// Checks what each figure of `d`, decided on `before` at `t`, promises. Figures are the exact
// 128-bit ones; a promise about a time too far away to represent is not checked.
void ExpectFiguresHold(const Limit& limit, const AnyState& before, const AnyState& after, int64_t t,
                       int64_t cost, const WideDecision& d) {
  const int64_t capacity = limit.burst();
  if (!d.allowed) {
    EXPECT_TRUE(before == after) << "a denied request changed the state";
    EXPECT_TRUE(d.delay_us == 0);
    EXPECT_EQ(d.retry_after_us == -1, cost > capacity);
    if (d.retry_after_us != -1 && Representable(t, d.retry_after_us)) {
      ASSERT_TRUE(d.retry_after_us >= 1);
      const auto retry = static_cast<int64_t>(d.retry_after_us);
      AnyState probe = before;
      EXPECT_TRUE(Decide(limit, probe, At(t + retry), cost).allowed)
          << "not allowed at retry_after";
      if (retry > 1) {
        probe = before;
        EXPECT_FALSE(Decide(limit, probe, At(t + retry - 1), cost).allowed)
            << "already allowed 1us before retry_after " << retry;
      }
    }
  } else {
    EXPECT_TRUE(d.retry_after_us == 0);
  }
  // `remaining` cost-1 requests fit at this instant, and not one more.
  ASSERT_TRUE(d.remaining >= 0);
  if (d.remaining <= 200) {
    AnyState probe = after;
    for (Int128 i = 0; i < d.remaining; ++i) {
      ASSERT_TRUE(Decide(limit, probe, At(t), 1).allowed) << "fewer fit than remaining";
    }
    EXPECT_FALSE(Decide(limit, probe, At(t), 1).allowed) << "more fit than remaining";
  }
  // After reset_after the key holds no trace: a query sees a full, untouched limit.
  if (Representable(t, d.reset_after_us)) {
    AnyState probe = after;
    const WideDecision later =
        DecideWide(limit, probe, At(t + static_cast<int64_t>(d.reset_after_us)), 0);
    EXPECT_TRUE(later.reset_after_us == 0);
    EXPECT_TRUE(later.remaining == capacity);
  }
}

class FiguresTest : public ::testing::TestWithParam<Algorithm> {};

TEST_P(FiguresTest, EveryFigureIsExact) {
  const Algorithm algorithm = GetParam();
  Random random(testing::Seed(3 + static_cast<uint64_t>(algorithm)));
  for (int c = 0; c < kCases / 3; ++c) {
    const Limit limit = random.ValidLimit(algorithm);
    AnyState state = InitialState(algorithm);
    int64_t t = kEpoch + random.Between(0, 1'000'000);
    for (int row = 0; row < kRows; ++row) {
      t += random.Gap(limit);
      const int64_t cost = random.Cost(limit);
      const AnyState before = state;
      const WideDecision d = DecideWide(limit, state, At(t), cost);
      SCOPED_TRACE(limit.ToString() + " case " + std::to_string(c) + " row " + std::to_string(row) +
                   " t=" + std::to_string(t) + " cost=" + std::to_string(cost));
      ExpectFiguresHold(limit, before, state, t, cost, d);
      if (HasFatalFailure() || HasNonfatalFailure()) {
        return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, FiguresTest, ::testing::ValuesIn(testing::AllAlgorithms()),
                         testing::AlgorithmTestName);

}  // namespace
}  // namespace sluice
