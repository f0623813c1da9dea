// Top offenders as the service counts them (server/stats/top_keys.h): each rule limit's keys by
// hits and by its own denials, a shadow limit's would-be denials, ad hoc keys under "adhoc",
// nothing while off, and the counts kept across a reload. On the memory store and a manual
// clock.

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

constexpr int64_t kMinute = 60'000'000;
constexpr int64_t kStart = kEpoch + kMinute - kEpoch % kMinute;

constexpr char kRules[] = R"(
domain: api
descriptors:
  - key: user
    limits:
      - {name: wide, requests_per_unit: 100, unit: minute}
      - {name: narrow, requests_per_unit: 2, unit: minute}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
)";

class TopTest : public ::testing::Test {
 protected:
  TopTest() : clock_(At(kStart)), service_(store_, clock_, metrics_) {
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
    metrics_.top().Enable(true);
  }

  void Check(std::string key, std::string value, int64_t cost = 1) {
    CheckRequest request{.domain = "api", .cost = cost};
    request.descriptors.push_back({.entries = {{std::move(key), std::move(value)}}});
    ASSERT_TRUE(service_.Check(request).ok());
  }

  // The keys of `rule`'s top by `by`, as (key text, count).
  std::vector<std::pair<std::string, uint64_t>> Top(const std::string& rule, TopBy by) {
    std::vector<std::pair<std::string, uint64_t>> keys;
    for (const RuleTop& top : metrics_.top().Top(rule, by, 10, clock_.Now())) {
      for (const RuleTop::Key& key : top.keys) {
        keys.emplace_back(KeyNames::Readable(key.key), key.count);
      }
    }
    return keys;
  }

  using Keys = std::vector<std::pair<std::string, uint64_t>>;

  MemoryStore store_;
  ManualClock clock_;
  Metrics metrics_;
  RateLimitService service_;
};

TEST_F(TopTest, EachLimitCountsHitsAndItsOwnDenials) {
  for (int i = 0; i < 5; ++i) {
    Check("user", "mallory");
  }
  Check("user", "ann", /*cost=*/2);
  EXPECT_EQ(Top("wide", TopBy::kHits), (Keys{{"api user=mallory", 5}, {"api user=ann", 2}}));
  EXPECT_EQ(Top("narrow", TopBy::kDenied), (Keys{{"api user=mallory", 3}}));
  EXPECT_EQ(Top("wide", TopBy::kDenied), Keys{});  // Wide never denied: nothing to blame it.
}

TEST_F(TopTest, AShadowLimitsWouldBeDenialsCount) {
  for (int i = 0; i < 3; ++i) {
    Check("shadow", "s");
  }
  EXPECT_EQ(Top("api.shadow", TopBy::kDenied), (Keys{{"api shadow=s", 2}}));
}

TEST_F(TopTest, AdHocKeysAndOffMeansNothing) {
  AdHocRequest adhoc{.key = "job:7", .spec = {.limit = 1, .period = std::chrono::seconds(1)}};
  ASSERT_TRUE(service_.CheckAdHoc(adhoc).ok());
  ASSERT_TRUE(service_.CheckAdHoc(adhoc).ok());
  EXPECT_EQ(Top("adhoc", TopBy::kDenied), (Keys{{"job:7", 1}}));
  metrics_.top().Enable(false);
  Check("user", "zed");
  EXPECT_EQ(Top("wide", TopBy::kHits), Keys{});
}

TEST_F(TopTest, AReloadKeepsTheCounts) {
  Check("user", "mallory");
  Check("user", "mallory");
  Check("user", "mallory");
  service_.SetRules(
      testing::MustParseRules(kRules, metrics_.rules(), store_, "rules.yaml", service_.rules()));
  Check("user", "mallory");
  EXPECT_EQ(Top("narrow", TopBy::kDenied), (Keys{{"api user=mallory", 2}}));
  EXPECT_EQ(Top("wide", TopBy::kHits), (Keys{{"api user=mallory", 4}}));
}

}  // namespace
}  // namespace sluice::server
