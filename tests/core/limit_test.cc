#include "sluice/limit.h"

#include "gtest/gtest.h"

#include "tests/testing/util.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

// The error message of creating `spec`, or "" when it succeeds.
std::string ErrorOf(const LimitSpec& spec) {
  absl::StatusOr<Limit> limit = Limit::Create(spec);
  EXPECT_TRUE(limit.ok() || limit.status().code() == absl::StatusCode::kInvalidArgument);
  return limit.ok() ? "" : std::string(limit.status().message());
}

TEST(LimitTest, DefaultsBurstToTheLimitAndBucketsToSixty) {
  const Limit gcra = *Limit::Create({.algorithm = Algorithm::kGcra, .limit = 7, .period = 1s});
  EXPECT_EQ(gcra.burst(), 7);
  const Limit buckets =
      *Limit::Create({.algorithm = Algorithm::kSlidingBuckets, .limit = 7, .period = 1h});
  EXPECT_EQ(buckets.buckets(), 60);
  EXPECT_EQ(buckets.ToString(), "sliding_buckets 7/1h buckets 60");
}

TEST(LimitTest, IgnoresOptionsTheAlgorithmDoesNotUse) {
  const Limit fixed = *Limit::Create(
      {.algorithm = Algorithm::kFixedWindow, .limit = 7, .period = 1s, .burst = 99, .buckets = 7});
  EXPECT_EQ(fixed.burst(), 7);
  EXPECT_EQ(fixed.buckets(), 1);
  EXPECT_EQ(fixed.ToString(), "fixed_window 7/1s");
}

TEST(LimitTest, RejectsNonPositiveAndOversizedValuesNamingThem) {
  EXPECT_EQ(ErrorOf({.limit = 0, .period = 1s}),
            "limit must be between 1 and 1000000000000000, not 0");
  EXPECT_EQ(ErrorOf({.limit = -5, .period = 1s}),
            "limit must be between 1 and 1000000000000000, not -5");
  EXPECT_EQ(ErrorOf({.limit = Limit::kMaxCount + 1, .period = 1s}),
            "limit must be between 1 and 1000000000000000, not 1000000000000001");
  EXPECT_EQ(ErrorOf({.limit = 1, .period = 0s}), "period must be between 1us and 36500d, not 0us");
  EXPECT_EQ(ErrorOf({.limit = 1, .period = Limit::kMaxPeriod + 1us}),
            "period must be between 1us and 36500d, not 3153600000000001us");
  EXPECT_EQ(ErrorOf({.algorithm = Algorithm::kTokenBucket, .limit = 1, .period = 1s, .burst = 0}),
            "burst must be between 1 and 1000000000000000, not 0");
  EXPECT_EQ(
      ErrorOf({.algorithm = Algorithm::kSlidingBuckets, .limit = 1, .period = 1s, .buckets = -1}),
      "buckets must be positive, not -1");
}

TEST(LimitTest, RejectsBucketsThatDoNotDivideThePeriod) {
  EXPECT_EQ(
      ErrorOf({.algorithm = Algorithm::kSlidingBuckets, .limit = 1, .period = 1s, .buckets = 7}),
      "buckets 7 does not divide the period 1s (1000000us); choose a divisor such as 10 or "
      "100");
  EXPECT_EQ(
      ErrorOf({.algorithm = Algorithm::kSlidingBuckets, .limit = 1, .period = 1s, .buckets = 10}),
      "");
}

TEST(LimitTest, AcceptsTheExtremes) {
  // B * P / N can exceed 64-bit microseconds (the figures are 128-bit inside); still valid.
  EXPECT_EQ(ErrorOf({.algorithm = Algorithm::kGcra,
                     .limit = 1,
                     .period = Limit::kMaxPeriod,
                     .burst = Limit::kMaxCount}),
            "");
  EXPECT_EQ(
      ErrorOf({.algorithm = Algorithm::kSlidingLog, .limit = Limit::kMaxCount, .period = 1us}), "");
}

TEST(LimitTest, AlgorithmNamesRoundTrip) {
  for (int a = 0; a <= static_cast<int>(Algorithm::kLeakyBucket); ++a) {
    const auto algorithm = static_cast<Algorithm>(a);
    EXPECT_EQ(*ParseAlgorithm(AlgorithmName(algorithm)), algorithm);
  }
  EXPECT_EQ(ParseAlgorithm("leaky").status().message(),
            "unknown algorithm 'leaky'; expected one of fixed_window, sliding_log, "
            "sliding_window, sliding_buckets, token_bucket, gcra, leaky_bucket");
}

}  // namespace
}  // namespace sluice
