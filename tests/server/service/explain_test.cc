// Explanations (server/service/explain.h) on every path a descriptor can take: a rule matched
// (exact, wildcard, key alone), unlimited, no rule for each reason, an unknown domain; limits
// in every mode (shadow, soft, elastic with its pool), Envoy's override and counted limits,
// several limits where the second denies, a limit `replaces` dropped, a concurrency limit, an
// ad hoc limit; and at cost 0 nothing changes. On the memory store and a manual clock.

#include "server/service/explain.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

#include "server/service/key_names.h"
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
pools:
  spare: {requests_per_unit: 2, unit: minute}
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: "/search*"
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: plan
    value: free
    descriptors:
      - key: user
        limits:
          - {name: wide, requests_per_unit: 10, unit: minute}
          - {name: narrow, requests_per_unit: 1, unit: second}
  - key: soft
    mode: soft
    soft_percent: 50
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: job
    mode: elastic
    pool: spare
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: premium
    rate_limit: {unit: minute, requests_per_unit: 100, replaces: [{name: api.user}]}
  - key: export
    concurrency: 2
  - key: login
    rate_limit: {unit: minute, requests_per_unit: 1, block: 1h}
)";

class ExplainTest : public ::testing::Test {
 protected:
  ExplainTest() : clock_(At(kStart)), service_(store_, clock_, metrics_) {
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
  }

  static CheckRequest Request(std::vector<std::vector<Entry>> descriptors, int64_t cost = 1) {
    CheckRequest request{.domain = "api", .cost = cost, .explain = true};
    for (auto& entries : descriptors) {
      request.descriptors.push_back({.entries = std::move(entries)});
    }
    return request;
  }

  CheckResult Check(CheckRequest request) {
    absl::StatusOr<CheckResult> result = service_.Check(std::move(request));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *std::move(result) : CheckResult{};
  }
  CheckResult Check(std::vector<std::vector<Entry>> descriptors, int64_t cost = 1) {
    return Check(Request(std::move(descriptors), cost));
  }

  // A copy of the explanation of `result`, which must have one.
  static Explanation Explained(const CheckResult& result) {
    EXPECT_NE(result.explanation, nullptr);
    return result.explanation != nullptr ? *result.explanation : Explanation{};
  }

  MemoryStore store_;
  ManualClock clock_;
  Metrics metrics_;
  RateLimitService service_;
};

TEST_F(ExplainTest, NoExplanationUnlessAsked) {
  CheckRequest request = Request({{{"user", "ann"}}});
  request.explain = false;
  EXPECT_EQ(Check(request).explanation, nullptr);
}

TEST_F(ExplainTest, AMatchedRuleNamesItsKeyFiguresAndStateBeforeAndAfter) {
  Check({{{"user", "ann"}}});
  const Explanation& e = Explained(Check({{{"user", "ann"}}}));
  EXPECT_EQ(e.domain, "api");
  EXPECT_EQ(e.cost, 1);
  EXPECT_TRUE(e.admitted);
  ASSERT_EQ(e.descriptors.size(), 1U);
  const DescriptorExplanation& d = e.descriptors[0];
  EXPECT_EQ(d.rule, "api.user");
  EXPECT_EQ(d.match, "rule api.user");
  ASSERT_EQ(d.limits.size(), 1U);
  const LimitExplanation& l = d.limits[0];
  EXPECT_EQ(l.outcome.name, "api.user");
  EXPECT_EQ(l.source, "api.user");
  EXPECT_EQ(l.key, "api user=ann");
  ASSERT_TRUE(l.before && l.after);
  EXPECT_EQ(l.before->remaining, 2);  // One used by the first check.
  EXPECT_EQ(l.after->remaining, 1);
  EXPECT_EQ(l.outcome.decision.remaining, 1);
  EXPECT_EQ(l.verdict, "admitted");
  ASSERT_TRUE(e.decided_by);
  EXPECT_EQ(e.decided_by->descriptor, 0U);
  EXPECT_EQ(e.decided_by->limit, 0U);
  EXPECT_TRUE(e.error.empty());
}

TEST_F(ExplainTest, AWildcardThatMatchesAndOneThatDoesNot) {
  const Explanation& matched = Explained(Check({{{"path", "/search/books"}}}));
  EXPECT_EQ(matched.descriptors[0].rule, "api.path_/search*");
  ASSERT_EQ(matched.descriptors[0].limits.size(), 1U);
  EXPECT_EQ(matched.descriptors[0].limits[0].after->remaining, 4);

  const Explanation& missed = Explained(Check({{{"path", "/other"}}}));
  EXPECT_TRUE(missed.descriptors[0].rule.empty());
  EXPECT_TRUE(missed.descriptors[0].limits.empty());
  EXPECT_EQ(missed.descriptors[0].match,
            "no rule: under api, key \"path\" has no descriptor for value \"/other\" (no exact "
            "value, no descriptor without a value, and no wildcard matched: /search*)");
  EXPECT_FALSE(missed.decided_by);
}

TEST_F(ExplainTest, EveryReasonForNoRule) {
  const CheckResult result = Check({{{"nobody", "x"}},
                                    {{"plan", "paid"}},
                                    {{"plan", "free"}},
                                    {{"plan", "free"}, {"user", "ann"}, {"extra", "1"}}});
  const Explanation& e = Explained(result);
  ASSERT_EQ(e.descriptors.size(), 4U);
  EXPECT_EQ(e.descriptors[0].match,
            "no rule: entry 0 (key \"nobody\") is no descriptor key under api");
  EXPECT_EQ(e.descriptors[1].match,
            "no rule: under api, key \"plan\" has no descriptor for value \"paid\" (no exact "
            "value, no descriptor without a value)");
  EXPECT_EQ(e.descriptors[2].match,
            "no rule: api.plan_free holds no limit (a rule matches only a descriptor with as "
            "many entries as its path has levels)");
  EXPECT_EQ(e.descriptors[3].match,
            "no rule: entry 2 (key \"extra\") is no descriptor key under api.plan_free.user");
  EXPECT_TRUE(result.unmatched);
}

TEST_F(ExplainTest, AnUnknownDomainAndAnUnlimitedRule) {
  CheckRequest request = Request({{{"user", "ann"}}});
  request.domain = "nowhere";
  const Explanation& unknown = Explained(Check(request));
  EXPECT_EQ(unknown.descriptors[0].match, "no rule: no rules file has domain \"nowhere\"");

  const Explanation& free = Explained(Check({{{"free", "x"}}}));
  EXPECT_EQ(free.descriptors[0].match, "rule api.free (unlimited)");
  ASSERT_EQ(free.descriptors[0].limits.size(), 1U);
  EXPECT_TRUE(free.descriptors[0].limits[0].outcome.unlimited);
  EXPECT_FALSE(free.descriptors[0].limits[0].before);  // Nothing to ask.
  EXPECT_FALSE(free.decided_by);
}

TEST_F(ExplainTest, SeveralLimitsWhereTheSecondDeniesNameTheSecond) {
  Check({{{"plan", "free"}, {"user", "ann"}}});
  const CheckResult result = Check({{{"plan", "free"}, {"user", "ann"}}});
  ASSERT_FALSE(result.combined.allowed);
  const Explanation& e = Explained(result);
  EXPECT_FALSE(e.admitted);
  const std::vector<LimitExplanation>& limits = e.descriptors[0].limits;
  ASSERT_EQ(limits.size(), 2U);
  EXPECT_EQ(limits[0].outcome.name, "wide");
  EXPECT_EQ(limits[0].verdict, "would admit; nothing charged, as the request was denied");
  EXPECT_EQ(limits[0].before->remaining, limits[0].after->remaining);  // Nothing charged.
  EXPECT_EQ(limits[1].outcome.name, "narrow");
  EXPECT_EQ(limits[1].verdict, "denied");
  ASSERT_TRUE(e.decided_by);
  EXPECT_EQ(e.decided_by->limit, 1U);
}

TEST_F(ExplainTest, ShadowSoftAndElastic) {
  Check({{{"shadow", "s"}}});
  const Explanation& shadow = Explained(Check({{{"shadow", "s"}}}));
  EXPECT_TRUE(shadow.admitted);
  EXPECT_EQ(shadow.descriptors[0].limits[0].verdict, "would deny; admitted (shadow mode)");

  Check({{{"soft", "s"}}});
  Check({{{"soft", "s"}}});
  const Explanation& soft = Explained(Check({{{"soft", "s"}}}));  // 3 of 2, soft to 3.
  EXPECT_TRUE(soft.admitted);
  const LimitExplanation& over = soft.descriptors[0].limits[0];
  EXPECT_EQ(over.verdict, "admitted past its nominal limit (soft mode)");
  EXPECT_EQ(over.before->remaining, 0);  // As clients are told: nominal, not stored, room.

  Check({{{"job", "j"}}});
  const Explanation& elastic = Explained(Check({{{"job", "j"}}}));
  EXPECT_TRUE(elastic.admitted);
  const std::vector<LimitExplanation>& limits = elastic.descriptors[0].limits;
  ASSERT_EQ(limits.size(), 2U);
  EXPECT_EQ(limits[0].verdict, "over its own limit; admitted on its pool");
  EXPECT_EQ(limits[1].source, "pool spare");
  EXPECT_EQ(limits[1].key, "api pool spare");
  EXPECT_EQ(limits[1].before->remaining, 2);
  EXPECT_EQ(limits[1].after->remaining, 1);
  ASSERT_TRUE(elastic.decided_by);
  EXPECT_EQ(elastic.decided_by->limit, 1U);  // The pool's figures are the answer's.
}

TEST_F(ExplainTest, ALimitReplacedIsSaidSo) {
  const Explanation& e = Explained(Check({{{"user", "ann"}}, {{"premium", "p"}}}));
  ASSERT_EQ(e.descriptors.size(), 2U);
  ASSERT_EQ(e.descriptors[0].limits.size(), 1U);
  const LimitExplanation& replaced = e.descriptors[0].limits[0];
  EXPECT_FALSE(replaced.decided);
  EXPECT_EQ(replaced.verdict, "replaced by api.premium: not asked");
  EXPECT_EQ(e.descriptors[1].limits[0].after->remaining, 99);
}

TEST_F(ExplainTest, AConcurrencyLimitShowsItsLeases) {
  const CheckResult result = Check({{{"export", "e"}}});
  const Explanation& e = Explained(result);
  ASSERT_EQ(e.descriptors[0].limits.size(), 1U);
  const LimitExplanation& l = e.descriptors[0].limits[0];
  EXPECT_EQ(l.outcome.concurrency, 2);
  EXPECT_EQ(l.key, "api export=e");
  EXPECT_EQ(l.before->remaining, 2);
  EXPECT_EQ(l.after->remaining, 1);  // The lease this check holds.
  EXPECT_FALSE(result.lease.empty());
}

TEST_F(ExplainTest, AtCostZeroNothingChanges) {
  Check({{{"user", "ann"}}});
  Check({{{"login", "l"}}});
  for (int i = 0; i < 3; ++i) {
    const CheckResult result = Check({{{"user", "ann"}}, {{"login", "l"}}}, /*cost=*/0);
    const Explanation& e = Explained(result);
    EXPECT_EQ(e.cost, 0);
    for (const DescriptorExplanation& d : e.descriptors) {
      ASSERT_EQ(d.limits.size(), 1U);
      ASSERT_TRUE(d.limits[0].before && d.limits[0].after);
      EXPECT_EQ(d.limits[0].before->remaining, d.limits[0].after->remaining);
      EXPECT_EQ(d.limits[0].after->remaining, d.rule == "api.user" ? 2 : 0);
    }
  }
  // Neither charged (3 of 3 left for two more) nor blocked (login, at its limit, still at it
  // and no block started: the next hour is not lost).
  EXPECT_TRUE(Check({{{"user", "ann"}}}).combined.allowed);
  EXPECT_TRUE(Check({{{"user", "ann"}}}).combined.allowed);
  clock_.Set(At(kStart + kMinute));
  EXPECT_TRUE(Check({{{"login", "l"}}}).combined.allowed);
}

TEST_F(ExplainTest, EnvoysApiExplainsEachDescriptorAtItsOwnCost) {
  CheckRequest request = Request({{{"user", "ann"}}, {{"nobody", "x"}}});
  request.envoy = true;
  request.descriptors[0].cost = 2;
  request.descriptors.push_back(
      {.entries = {{"user", "bob"}}, .limit = LimitOverride{7, Unit::kHour}});
  absl::StatusOr<std::vector<DescriptorResult>> results = service_.ShouldRateLimit(request);
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 3U);
  for (const DescriptorResult& r : *results) {
    ASSERT_NE(r.explanation, nullptr);
    ASSERT_EQ(r.explanation->descriptors.size(), 1U);
  }
  const Explanation& ann = *(*results)[0].explanation;
  EXPECT_EQ(ann.cost, 2);
  // The Envoy API counts every hit on a counter: the state is told against the limit.
  EXPECT_EQ(ann.descriptors[0].limits[0].before->remaining, 3);
  EXPECT_EQ(ann.descriptors[0].limits[0].after->remaining, 1);
  EXPECT_EQ((*results)[1].explanation->descriptors[0].match,
            "no rule: entry 0 (key \"nobody\") is no descriptor key under api");
  const Explanation& bob = *(*results)[2].explanation;
  EXPECT_EQ(bob.descriptors[0].rule, "api.override");
  EXPECT_EQ(bob.descriptors[0].match,
            "Envoy's limit in the request, 7 per HOUR: the rules are not asked");
  ASSERT_EQ(bob.descriptors[0].limits.size(), 1U);  // The override alone: no rule's limit.
  EXPECT_EQ(bob.descriptors[0].limits[0].after->remaining, 6);
}

TEST_F(ExplainTest, AnAdHocLimit) {
  AdHocRequest request{
      .key = "job:1", .spec = {.limit = 2, .period = std::chrono::seconds(1)}, .explain = true};
  absl::StatusOr<CheckResult> result = service_.CheckAdHoc(request);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_NE(result->explanation, nullptr);
  const Explanation& e = *result->explanation;
  EXPECT_TRUE(e.domain.empty());
  ASSERT_EQ(e.descriptors.size(), 1U);
  EXPECT_EQ(e.descriptors[0].limits[0].key, "job:1");
  EXPECT_EQ(e.descriptors[0].limits[0].before->remaining, 2);
  EXPECT_EQ(e.descriptors[0].limits[0].after->remaining, 1);
}

TEST_F(ExplainTest, HiddenKeysAreKeyedHashesTheSameWithinAProcess) {
  service_.SetKeyNames(KeyNames(/*hide=*/true));
  const std::string first = Explained(Check({{{"user", "ann"}}})).descriptors[0].limits[0].key;
  const std::string again = Explained(Check({{{"user", "ann"}}})).descriptors[0].limits[0].key;
  const std::string other = Explained(Check({{{"user", "bob"}}})).descriptors[0].limits[0].key;
  EXPECT_EQ(first.size(), 17U);
  EXPECT_EQ(first[0], '#');
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
  EXPECT_EQ(first.find("ann"), std::string::npos);
  // Another secret (another process) names the same key otherwise: no table of names holds.
  service_.SetKeyNames(KeyNames(/*hide=*/true));
  EXPECT_NE(Explained(Check({{{"user", "ann"}}})).descriptors[0].limits[0].key, first);
}

TEST(KeyNamesTest, ReadableTakesTheEscapesOut) {
  EXPECT_EQ(KeyNames::Readable(RuleKey("api", {{"user", "ann"}, {"path", "/a=b c"}})),
            "api user=ann path=/a=b c");
  EXPECT_EQ(KeyNames::Readable(RuleKey("api", {{"k", std::string("a\x1e"
                                                                 "b")}})),
            std::string("api k=a\x1e"
                        "b"));
  EXPECT_EQ(KeyNames::Readable("job:1"), "job:1");
  const std::string bounded = KeyNames::Readable(RuleKey("api", {{"k", std::string(600, 'v')}}));
  EXPECT_LT(bounded.size(), 260U);
  EXPECT_NE(bounded.find('#'), std::string::npos);
}

}  // namespace
}  // namespace sluice::server
