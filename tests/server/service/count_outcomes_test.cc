// CountOutcomes' hit counters (RuleCounters::total_hits ... shadow_mode_hits): what
// envoyproxy/ratelimit's base_limiter.go counts for the same hits, including the partial
// counting of a request that crosses the limit or the near-limit threshold.
//
// Most sequences of hits on one key end at the request that crosses the limit, or have the
// limit reached before every request past it: the counts are then the same whether or not
// the hits of a denied request are recorded in the store (EnvoySettings::count_over_limit).
// The last two tests show each setting past a crossing.

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "server/service/service.h"
#include "sluice/memory_store.h"
#include "tests/testing/rules.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

using ::sluice::testing::At;
using ::sluice::testing::kEpoch;

constexpr int64_t kDay = 86'400'000'000;
constexpr int64_t kStart = kEpoch + kDay - kEpoch % kDay;  // Windows start with the test.

constexpr char kRules[] = R"(
domain: api
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: team
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: free
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: day, requests_per_unit: 0}
  - key: client
    detailed_metric: true
    rate_limit: {unit: day, requests_per_unit: 3}
)";

struct Hits {
  uint64_t total = 0;
  uint64_t over = 0;
  uint64_t near = 0;
  uint64_t within = 0;
  uint64_t shadow = 0;
  friend bool operator==(const Hits&, const Hits&) = default;
};

void PrintTo(const Hits& h, std::ostream* os) {
  *os << "{total " << h.total << ", over " << h.over << ", near " << h.near << ", within "
      << h.within << ", shadow " << h.shadow << "}";
}

class CountOutcomesTest : public ::testing::Test {
 protected:
  explicit CountOutcomesTest(EnvoySettings settings = {})
      : clock_(At(kStart)), service_(store_, clock_, metrics_, nullptr, settings) {
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
  }

  // Envoy's ShouldRateLimit of one descriptor `key`=`value` with `hits`: whether it was over.
  bool Envoy(const std::string& key, const std::string& value, int64_t hits) {
    CheckRequest request{.domain = "api", .cost = 1};
    request.descriptors.push_back({.entries = {{key, value}}, .cost = hits});
    absl::StatusOr<std::vector<DescriptorResult>> results = service_.ShouldRateLimit(request);
    EXPECT_TRUE(results.ok()) << results.status();
    return results.ok() && (*results)[0].over_limit;
  }

  Hits Of(const std::string& name) {
    const RuleCounters& c = *metrics_.rules().Get(name);
    return {.total = c.total_hits.load(),
            .over = c.over_limit_hits.load(),
            .near = c.near_limit_hits.load(),
            .within = c.within_limit_hits.load(),
            .shadow = c.shadow_mode_hits.load()};
  }

  MemoryStore store_;
  ManualClock clock_;
  Metrics metrics_;
  RateLimitService service_;
};

TEST_F(CountOutcomesTest, WithinTheLimitPastTheNearThresholdAndAcrossTheLimit) {
  // Limit 10, near threshold floor(10 * 0.8) = 8.
  EXPECT_FALSE(Envoy("user", "a", 6));  // 0 -> 6: within 6.
  EXPECT_EQ(Of("api.user"), (Hits{.total = 6, .within = 6}));
  EXPECT_FALSE(Envoy("user", "a", 3));  // 6 -> 9: within 3, of which past 8: 1.
  EXPECT_EQ(Of("api.user"), (Hits{.total = 9, .near = 1, .within = 9}));
  EXPECT_TRUE(Envoy("user", "a", 3));  // 9 -> 12: over 2; near 10 - max(8, 9) = 1; within 0.
  EXPECT_EQ(Of("api.user"), (Hits{.total = 12, .over = 2, .near = 2, .within = 9}));
}

TEST_F(CountOutcomesTest, EveryHitIsOverOnceTheLimitIsReached) {
  EXPECT_FALSE(Envoy("user", "b", 10));  // 0 -> 10: within 10; near 10 - 8 = 2.
  EXPECT_TRUE(Envoy("user", "b", 4));    // Already at the limit: all 4 over, none near.
  EXPECT_TRUE(Envoy("user", "b", 1));
  EXPECT_EQ(Of("api.user"), (Hits{.total = 15, .over = 5, .near = 2, .within = 10}));
  EXPECT_EQ(metrics_.rules().Get("api.user")->denied.load(), 2U);  // Requests, beside.
}

TEST_F(CountOutcomesTest, AllOfABigRequestPastTheThresholdIsNearWhenItStartedPastIt) {
  EXPECT_FALSE(Envoy("user", "c", 9));  // 0 -> 9: near 1.
  EXPECT_FALSE(Envoy("user", "c", 1));  // 9 -> 10: started past 8, so all of it: near 1.
  EXPECT_EQ(Of("api.user"), (Hits{.total = 10, .near = 2, .within = 10}));
}

TEST_F(CountOutcomesTest, ShadowModeCountsItsOverLimitHitsAgain) {
  EXPECT_FALSE(Envoy("shadow", "s", 6));
  EXPECT_FALSE(Envoy("shadow", "s", 5));  // 6 -> 11: over 1 (admitted), near 2.
  EXPECT_EQ(Of("api.shadow"), (Hits{.total = 11, .over = 1, .near = 2, .within = 6, .shadow = 1}));
}

TEST_F(CountOutcomesTest, UnlimitedAndZeroHitsCountNothing) {
  EXPECT_FALSE(Envoy("free", "f", 5));
  EXPECT_EQ(Of("api.free"), Hits{});
  EXPECT_FALSE(Envoy("user", "z", 0));
  EXPECT_EQ(Of("api.user"), Hits{});
  EXPECT_EQ(metrics_.rules().Get("api.user")->checks.load(), 1U);  // The request is counted.
}

TEST_F(CountOutcomesTest, ALimitOfZeroHasEveryHitOver) {
  EXPECT_TRUE(Envoy("banned", "b", 2));
  EXPECT_EQ(Of("api.banned"), (Hits{.total = 2, .over = 2}));
}

TEST_F(CountOutcomesTest, DetailedMetricCountsUnderTheRequestsValues) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(Envoy("client", "x", 1));  // Limit 3, threshold floor(2.4) = 2.
  }
  EXPECT_TRUE(Envoy("client", "x", 1));
  EXPECT_EQ(Of("api.client_x"), (Hits{.total = 4, .over = 1, .near = 1, .within = 3}));
  EXPECT_EQ(Of("api.client"), Hits{});
}

TEST_F(CountOutcomesTest, TheNearLimitRatioIsTheRegistrys) {
  metrics_.rules().set_near_limit_ratio(0.5F);  // Threshold 5, for counters made before.
  EXPECT_FALSE(Envoy("user", "r", 7));
  EXPECT_EQ(Of("api.user"), (Hits{.total = 7, .near = 2, .within = 7}));
  metrics_.rules().set_near_limit_ratio(1.0F);  // Threshold 10: nothing is near before over.
  EXPECT_FALSE(Envoy("user", "r", 3));
  EXPECT_EQ(Of("api.user"), (Hits{.total = 10, .near = 2, .within = 10}));
  EXPECT_EQ(metrics_.rules().Get("api.new")->near_limit_ratio->load(), 1.0F);
}

TEST_F(CountOutcomesTest, ALimitThatWouldHaveAllowedADeniedRequestCountsItsHitsWithin) {
  // Sluice's all-or-nothing check: team denies, user is not charged but its hits are within.
  CheckRequest request{.domain = "api", .cost = 1};
  request.descriptors.push_back({.entries = {{"team", "t"}}});
  ASSERT_TRUE(service_.Check(request).ok());
  request.descriptors.push_back({.entries = {{"user", "t"}}});
  absl::StatusOr<CheckResult> denied = service_.Check(request);
  ASSERT_TRUE(denied.ok());
  EXPECT_FALSE(denied->combined.allowed);
  // A limit of 1: floor(0.8) = 0, so its first hit is already near.
  EXPECT_EQ(Of("api.team"), (Hits{.total = 2, .over = 1, .near = 1, .within = 1}));
  EXPECT_EQ(Of("api.user"), (Hits{.total = 1, .within = 1}));
}

TEST_F(CountOutcomesTest, TheirCountGoesOnPastTheLimitSoLaterHitsAreOver) {
  EXPECT_FALSE(Envoy("user", "g", 9));
  EXPECT_TRUE(Envoy("user", "g", 3));  // 9 -> 12: over 2, near 1.
  EXPECT_TRUE(Envoy("user", "g", 1));  // 12 -> 13: over 1.
  EXPECT_EQ(Of("api.user"), (Hits{.total = 13, .over = 3, .near = 2, .within = 9}));
}

TEST_F(CountOutcomesTest, GlobalShadowModeCountsTheAnswersItMadeOk) {
  RateLimitService shadow(store_, clock_, metrics_, nullptr, {.shadow_mode = true});
  shadow.SetRules(service_.rules());
  auto answer = [&](const std::string& key) {
    absl::StatusOr<std::vector<DescriptorResult>> results =
        shadow.ShouldRateLimit({.domain = "api", .descriptors = {{.entries = {{key, "s"}}}}});
    EXPECT_TRUE(results.ok()) << results.status();
    return results.ok() && shadow.OverallOverLimit(*results);
  };
  EXPECT_FALSE(answer("banned"));  // Over, made OK: counted.
  EXPECT_FALSE(answer("user"));    // Within: not.
  EXPECT_EQ(metrics_.global_shadow_mode(), 1U);
  EXPECT_EQ(Of("api.banned"), (Hits{.total = 1, .over = 1}));  // The rule's own, as ever.
}

class StopCountingOverLimitTest : public CountOutcomesTest {
 protected:
  StopCountingOverLimitTest() : CountOutcomesTest({.count_over_limit = false}) {}
};

TEST_F(StopCountingOverLimitTest, ADeniedRequestLeavesTheCountWhereItWas) {
  EXPECT_FALSE(Envoy("user", "g", 9));
  EXPECT_TRUE(Envoy("user", "g", 3));   // 9 -> 12 would pass 10: over 2, near 1; not kept.
  EXPECT_FALSE(Envoy("user", "g", 1));  // 9 -> 10: within, near.
  EXPECT_EQ(Of("api.user"), (Hits{.total = 13, .over = 2, .near = 3, .within = 10}));
}

}  // namespace
}  // namespace sluice::server
