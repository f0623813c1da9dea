// Blocks (server/service/blocks.h): a rule's `block` turns a denial into a penalty on the
// key, kept in the store, lifted by a reset; shadow limits never block, a pool that lends
// prevents one. On the memory store and a manual clock.

#include "server/service/blocks.h"

#include <string>
#include <utility>
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

constexpr int64_t kSecond = 1'000'000;
constexpr int64_t kStart = kEpoch + 60 * kSecond - kEpoch % (60 * kSecond);

constexpr char kRules[] = R"(
domain: api
pools:
  spare: {requests_per_unit: 1, unit: minute}
descriptors:
  - key: login
    rate_limit: {unit: second, requests_per_unit: 2, block: 10s}
  - key: quiet
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, block: 10s}
  - key: job
    mode: elastic
    pool: spare
    rate_limit: {unit: second, requests_per_unit: 1, block: 10s}
  - key: other
    rate_limit: {unit: second, requests_per_unit: 5}
)";

class BlocksTest : public ::testing::Test {
 protected:
  BlocksTest() : clock_(At(kStart)), service_(store_, clock_, metrics_) {
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
  }

  CheckResult Check(std::vector<std::pair<std::string, std::string>> descriptors,
                    int64_t cost = 1) {
    CheckRequest request{.domain = "api", .cost = cost};
    for (auto& [key, value] : descriptors) {
      request.descriptors.push_back({.entries = {{key, value}}});
    }
    absl::StatusOr<CheckResult> result = service_.Check(request);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *std::move(result) : CheckResult{};
  }

  void Go(int64_t offset_us) { clock_.Set(testing::At(kStart + offset_us)); }

  MemoryStore store_;
  ManualClock clock_;
  Metrics metrics_;
  RateLimitService service_;
};

TEST_F(BlocksTest, ADenialBlocksTheKeyForTheBlockWhateverTheLimitSays) {
  Check({{"login", "ann"}});
  Check({{"login", "ann"}});
  const CheckResult denied = Check({{"login", "ann"}});
  ASSERT_FALSE(denied.combined.allowed);
  EXPECT_EQ(denied.combined.retry_after, Micros{10 * kSecond});  // The block's end.
  EXPECT_FALSE(denied.limits[0].blocked);  // Denied by the limit; the block starts now.

  Go(5 * kSecond);  // The limit's window has long reset; the block has 5 s to run.
  const CheckResult blocked = Check({{"login", "ann"}});
  EXPECT_FALSE(blocked.combined.allowed);
  EXPECT_TRUE(blocked.limits[0].blocked);
  EXPECT_EQ(blocked.combined.retry_after, Micros{5 * kSecond});
  EXPECT_EQ(metrics_.rules().Get("api.login")->blocked.load(), 1U);
  EXPECT_TRUE(Check({{"login", "bob"}}).combined.allowed);  // Another key is not blocked.

  Go(10 * kSecond - 1);
  EXPECT_EQ(Check({{"login", "ann"}}).combined.retry_after, Micros{1});
  Go(10 * kSecond);
  const CheckResult after = Check({{"login", "ann"}});
  EXPECT_TRUE(after.combined.allowed);
  EXPECT_EQ(after.combined.remaining, 1);  // Blocked requests charged nothing.
}

TEST_F(BlocksTest, RequestsABlockDeniesDoNotLengthenIt) {
  for (int i = 0; i < 3; ++i) {
    Check({{"login", "ann"}});
  }
  for (int64_t t = 1; t < 10; ++t) {
    Go(t * kSecond);
    EXPECT_EQ(Check({{"login", "ann"}}).combined.retry_after, Micros{(10 - t) * kSecond});
  }
  Go(10 * kSecond);
  EXPECT_TRUE(Check({{"login", "ann"}}).combined.allowed);
}

TEST_F(BlocksTest, AResetLiftsTheBlock) {
  for (int i = 0; i < 3; ++i) {
    Check({{"login", "ann"}});
  }
  Go(kSecond);
  ASSERT_TRUE(Check({{"login", "ann"}}).limits[0].blocked);
  CheckRequest reset{.domain = "api", .descriptors = {{.entries = {{"login", "ann"}}}}};
  ASSERT_TRUE(service_.Reset(reset).ok());
  EXPECT_TRUE(Check({{"login", "ann"}}).combined.allowed);
}

TEST_F(BlocksTest, AShadowLimitNeverBlocks) {
  Check({{"quiet", "q"}});
  const CheckResult over = Check({{"quiet", "q"}});
  EXPECT_TRUE(over.combined.allowed);
  EXPECT_FALSE(over.limits[0].decision.allowed);  // Would have denied.
  Go(kSecond);
  const CheckResult next = Check({{"quiet", "q"}});
  EXPECT_TRUE(next.limits[0].decision.allowed);
  EXPECT_FALSE(next.limits[0].blocked);
}

TEST_F(BlocksTest, AnElasticLimitBlocksOnlyWhenThePoolCannotLend) {
  Check({{"job", "j"}});
  const CheckResult borrowed = Check({{"job", "j"}});  // Over its 1; the pool lends its 1.
  ASSERT_TRUE(borrowed.combined.allowed);
  Go(kSecond);
  EXPECT_TRUE(Check({{"job", "j"}}).combined.allowed);  // No block: nothing was denied.
  const CheckResult denied = Check({{"job", "j"}});     // Over, and the pool is spent.
  ASSERT_FALSE(denied.combined.allowed);
  Go(2 * kSecond);
  EXPECT_TRUE(Check({{"job", "j"}}).limits[0].blocked);
}

TEST_F(BlocksTest, ABlockedRequestChargesNoOtherLimitEither) {
  for (int i = 0; i < 3; ++i) {
    Check({{"login", "ann"}});
  }
  Go(kSecond);
  const CheckResult blocked = Check({{"login", "ann"}, {"other", "o"}});
  ASSERT_FALSE(blocked.combined.allowed);
  EXPECT_EQ(blocked.limits[1].decision.remaining, 5);
}

TEST_F(BlocksTest, TheEnvoyApiAnswersABlockedDescriptorOverLimit) {
  for (int i = 0; i < 3; ++i) {
    Check({{"login", "ann"}});
  }
  Go(kSecond);
  CheckRequest request{.domain = "api", .descriptors = {{.entries = {{"login", "ann"}}}}};
  absl::StatusOr<std::vector<DescriptorResult>> results = service_.ShouldRateLimit(request);
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_TRUE((*results)[0].over_limit);
}

TEST_F(BlocksTest, AdHocRequestsBlockTooAndAResetOfTheSameFormLiftsIt) {
  AdHocRequest request{.key = "k",
                       .spec = {.limit = 1, .period = std::chrono::seconds(1)},
                       .block = std::chrono::seconds(30)};
  ASSERT_TRUE(service_.CheckAdHoc(request)->combined.allowed);
  const absl::StatusOr<CheckResult> denied = service_.CheckAdHoc(request);
  ASSERT_FALSE(denied->combined.allowed);
  EXPECT_EQ(denied->combined.retry_after, std::chrono::seconds(30));
  Go(10 * kSecond);
  const absl::StatusOr<CheckResult> blocked = service_.CheckAdHoc(request);
  EXPECT_TRUE(blocked->limits[0].blocked);
  EXPECT_EQ(blocked->combined.retry_after, std::chrono::seconds(20));
  ASSERT_TRUE(service_.Reset(request).ok());
  EXPECT_TRUE(service_.CheckAdHoc(request)->combined.allowed);
  request.block = Micros{1};  // Below a millisecond.
  EXPECT_TRUE(absl::IsInvalidArgument(service_.CheckAdHoc(request).status()));
}

TEST(BlockRulesTest, ABlockMustBeADurationInRangeOnALimitThatCanDeny) {
  Metrics metrics;
  MemoryStore store;
  for (const char* rule : {"{unit: second, requests_per_unit: 1, block: soon}",
                           "{unit: second, requests_per_unit: 1, block: 0s}",
                           "{unit: second, requests_per_unit: 0, block: 1m}"}) {
    const std::string text =
        std::string("domain: d\ndescriptors:\n  - key: k\n    rate_limit: ") + rule + "\n";
    const absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
        RuleSet::Parse({{"rules.yaml", text}}, metrics.rules(),
                       [&store](const Limit& limit) { return store.CheckLimit(limit); });
    EXPECT_FALSE(rules.ok()) << rule;
  }
  EXPECT_EQ(BlockKey("k").substr(0, 1), "k");
  EXPECT_NE(BlockKey("k"), "k");
}

}  // namespace
}  // namespace sluice::server
