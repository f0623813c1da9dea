// Property tests on seeded random traces (the seed is printed; replay with SLUICE_SEED=...).
//  - gcra and token_bucket make identical decisions with identical figures;
//  - sliding_buckets with K = 1 decides exactly as fixed_window;
//  - for every algorithm, every figure of every decision means what the spec says it means:
//    `remaining` more cost-1 requests fit at that instant and no more; a denied request fits
//    after exactly retry_after and not 1 us sooner; after reset_after the key is as new.

#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "tests/testing/figures.h"
#include "tests/testing/random.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::ExpectFiguresHold;
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
