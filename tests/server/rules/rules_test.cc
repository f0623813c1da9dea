#include "server/rules/rules.h"

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "server/service/ip.h"
#include "sluice/memory_store.h"
#include "src/core/status.h"
#include "tests/testing/rules.h"

namespace sluice::server {
namespace {

using ::testing::HasSubstr;

// The store whose CheckLimit every test file is checked against.
const MemoryStore& CheckingStore() {
  static const MemoryStore store;
  return store;
}

absl::StatusOr<std::shared_ptr<const RuleSet>> ParseText(const std::string& text,
                                                         CounterRegistry& counters) {
  return RuleSet::Parse({{"rules.yaml", text}}, counters,
                        [](const Limit& limit) { return CheckingStore().CheckLimit(limit); });
}

std::shared_ptr<const RuleSet> MustParse(const std::string& text, CounterRegistry& counters) {
  return testing::MustParseRules(text, counters, CheckingStore());
}

// The path of the rule `entries` match in the first domain, or "none".
std::string MatchPath(const RuleSet& rules, std::vector<Entry> entries) {
  const Rule* rule = RuleSet::Match(*rules.domains().front(), entries);
  return rule == nullptr ? "none" : rule->path;
}

constexpr char kMatching[] = R"(
domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: user
    value: alice
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: user
    value: bot-*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /search
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /a*
    descriptors:
      - key: method
        value: POST
        rate_limit: {unit: second, requests_per_unit: 1}
)";

TEST(RuleMatchTest, ExactValueThenWildcardThenKeyOnly) {
  CounterRegistry counters;
  auto rules = MustParse(kMatching, counters);
  EXPECT_EQ(MatchPath(*rules, {{"user", "alice"}}), "api.user_alice");
  EXPECT_EQ(MatchPath(*rules, {{"user", "bot-7"}}), "api.user_bot-*");
  EXPECT_EQ(MatchPath(*rules, {{"user", "bob"}}), "api.user");
  EXPECT_EQ(MatchPath(*rules, {{"user", ""}}), "api.user");
  EXPECT_EQ(MatchPath(*rules, {{"team", "x"}}), "none");
}

TEST(RuleMatchTest, DepthOfTheRequestMustEqualTheRule) {
  CounterRegistry counters;
  auto rules = MustParse(kMatching, counters);
  EXPECT_EQ(MatchPath(*rules, {{"path", "/search"}, {"user", "bob"}}), "api.path_/search.user");
  // The /search node has no limit of its own.
  EXPECT_EQ(MatchPath(*rules, {{"path", "/search"}}), "none");
  // Deeper than any rule.
  EXPECT_EQ(MatchPath(*rules, {{"user", "bob"}, {"path", "/x"}}), "none");
  EXPECT_EQ(MatchPath(*rules, {{"path", "/search"}, {"user", "bob"}, {"x", "y"}}), "none");
  // A wildcard level, then an exact one.
  EXPECT_EQ(MatchPath(*rules, {{"path", "/admin"}, {"method", "POST"}}),
            "api.path_/a*.method_POST");
  EXPECT_EQ(MatchPath(*rules, {{"path", "/admin"}, {"method", "GET"}}), "none");
  EXPECT_EQ(MatchPath(*rules, {{"path", "/b"}, {"method", "POST"}}), "none");
}

TEST(RuleMatchTest, NoBacktrackingFromAnExactValue) {
  // As envoyproxy/ratelimit: once /search matched exactly, its subtree decides.
  CounterRegistry counters;
  auto rules = MustParse(R"(
domain: d
descriptors:
  - key: path
    value: /search
    descriptors:
      - {key: user, value: alice, rate_limit: {unit: second, requests_per_unit: 1}}
  - key: path
    descriptors:
      - {key: user, rate_limit: {unit: second, requests_per_unit: 1}}
)",
                         counters);
  EXPECT_EQ(MatchPath(*rules, {{"path", "/search"}, {"user", "bob"}}), "none");
  EXPECT_EQ(MatchPath(*rules, {{"path", "/other"}, {"user", "bob"}}), "d.path.user");
}

// ExplainMatch (an explanation's account of matching) walks as Match does: on random
// descriptors over the keys and values of kMatching (and some that are not there), it names
// the rule Match returns, and says why when there is none.
TEST(RuleMatchTest, ExplainMatchNamesTheRuleMatchReturns) {
  CounterRegistry counters;
  auto rules = MustParse(kMatching, counters);
  const Domain& domain = *rules->domains().front();
  const std::vector<std::string> keys = {"user", "path", "method", "team"};
  const std::vector<std::string> values = {"alice",  "bob", "bot-7", "bot-", "/search", "/a",
                                           "/admin", "/b",  "POST",  "GET",  ""};
  std::mt19937 random(20261128);
  for (int i = 0; i < 20'000; ++i) {
    std::vector<Entry> entries(random() % 4);
    for (Entry& entry : entries) {
      entry = {keys[random() % keys.size()], values[random() % values.size()]};
    }
    const Rule* rule = RuleSet::Match(domain, entries);
    const MatchReport report = ExplainMatch(domain, entries);
    ASSERT_EQ(report.rule, rule) << i;
    const std::string described = DescribeMatch(domain, entries, report);
    if (rule != nullptr) {
      EXPECT_EQ(described, "rule " + rule->path);
      EXPECT_EQ(report.path.size(), entries.size());
    } else {
      EXPECT_TRUE(described.starts_with("no rule: ")) << described;
      EXPECT_NE(report.outcome, MatchReport::Outcome::kRule);
    }
  }
}

TEST(RuleMatchTest, ExplainMatchSaysWhereItStopped) {
  CounterRegistry counters;
  auto rules = MustParse(kMatching, counters);
  const Domain& domain = *rules->domains().front();
  const auto describe = [&](std::vector<Entry> entries) {
    return DescribeMatch(domain, entries, ExplainMatch(domain, entries));
  };
  EXPECT_EQ(describe({{"path", "/admin"}, {"method", "GET"}}),
            "no rule: under api.path_/a*, key \"method\" has no descriptor for value \"GET\" (no "
            "exact value, no descriptor without a value)");
  EXPECT_EQ(describe({{"path", "/b"}}),
            "no rule: under api, key \"path\" has no descriptor for value \"/b\" (no exact value, "
            "no descriptor without a value, and no wildcard matched: /a*)");
  EXPECT_EQ(describe({}), "no rule: the descriptor has no entries");
  const MatchReport report = ExplainMatch(domain, {{"path", "/search"}, {"user", "x"}});
  EXPECT_EQ(report.path, (std::vector<std::string>{"path_/search", "user"}));
}

TEST(RuleParseTest, EnvoyFieldsAndExtensions) {
  CounterRegistry counters;
  auto rules = MustParse(R"(
domain: api
pools:
  spare: {requests_per_unit: 100, unit: second}
descriptors:
  - key: a
    rate_limit: {unit: HOUR, requests_per_unit: 7, name: seven}
  - key: b
    rate_limit: {algorithm: gcra, requests_per_unit: 10, period: 250ms, burst: 30}
  - key: c
    limits:
      - {requests_per_unit: 10, unit: second}
      - {requests_per_unit: 1000, unit: day, algorithm: sliding_window}
  - key: d
    mode: soft
    soft_percent: 50
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: e
    mode: elastic
    pool: spare
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: f
    shadow_mode: true
    rate_limit: {unit: week, requests_per_unit: 0, replaces: [{name: seven}]}
  - key: g
    rate_limit: {unlimited: true}
)",
                         counters);
  const Domain& domain = *rules->domains().front();
  auto rule = [&](const char* key) { return RuleSet::Match(domain, {{key, "x"}}); };

  ASSERT_NE(rule("a"), nullptr);
  EXPECT_EQ(rule("a")->limits[0].name, "seven");
  EXPECT_EQ(rule("a")->limits[0].limit->period(), Micros{3'600'000'000});
  EXPECT_EQ(rule("a")->limits[0].unit, Unit::kHour);

  const Limit& b = *rule("b")->limits[0].limit;
  EXPECT_EQ(b.algorithm(), Algorithm::kGcra);
  EXPECT_EQ(b.period(), Micros{250'000});
  EXPECT_EQ(b.burst(), 30);
  EXPECT_EQ(rule("b")->limits[0].name, "api.b");

  ASSERT_EQ(rule("c")->limits.size(), 2U);
  EXPECT_EQ(rule("c")->limits[1].limit->algorithm(), Algorithm::kSlidingWindow);
  EXPECT_EQ(rule("c")->limits[1].name, "api.c[1]");

  // Soft mode stores the enlarged limit and remembers the nominal one.
  EXPECT_EQ(rule("d")->mode, Mode::kSoft);
  EXPECT_EQ(rule("d")->limits[0].nominal, 10);
  EXPECT_EQ(rule("d")->limits[0].limit->limit(), 15);
  EXPECT_EQ(rule("d")->limits[0].soft_extra, 5);

  EXPECT_EQ(rule("e")->mode, Mode::kElastic);
  ASSERT_NE(rule("e")->pool, nullptr);
  EXPECT_EQ(rule("e")->pool->name, "spare");

  EXPECT_EQ(rule("f")->mode, Mode::kShadow);
  EXPECT_FALSE(rule("f")->limits[0].limit.has_value());  // requests_per_unit: 0
  EXPECT_EQ(rule("f")->limits[0].replaces, std::vector<std::string>{"seven"});

  EXPECT_TRUE(rule("g")->unlimited);
}

TEST(RuleParseTest, ConcurrencyAloneOrBesideRateLimits) {
  CounterRegistry counters;
  const auto rules = ParseText(R"(
domain: jobs
descriptors:
  - key: mailer
    concurrency: 3
  - key: export
    concurrency: 1
    lease_ttl: 5m
    rate_limit: {unit: second, requests_per_unit: 2}
)",
                               counters);
  ASSERT_TRUE(rules.ok()) << rules.status();
  const Domain& domain = *(*rules)->FindDomain("jobs");
  const Rule* mailer = RuleSet::Match(domain, {{"mailer", "nightly"}});
  ASSERT_NE(mailer, nullptr);
  EXPECT_TRUE(mailer->limits.empty());
  ASSERT_TRUE(mailer->concurrency);
  EXPECT_EQ(mailer->concurrency->name, "jobs.mailer:concurrency");
  EXPECT_EQ(mailer->concurrency->capacity, 3);
  EXPECT_EQ(mailer->concurrency->lease_ttl, ConcurrencyLimit::kDefaultLeaseTtl);
  EXPECT_EQ(mailer->concurrency->counters, counters.Get("jobs.mailer:concurrency"));
  const Rule* exporter = RuleSet::Match(domain, {{"export", "csv"}});
  ASSERT_NE(exporter, nullptr);
  EXPECT_EQ(exporter->limits.size(), 1U);
  EXPECT_EQ(exporter->concurrency->lease_ttl, std::chrono::minutes(5));
}

TEST(RuleParseTest, AConcurrencyRuleIsRefusedWhereTheStoreKeepsNoLeases) {
  CounterRegistry counters;
  const auto rules = RuleSet::Parse(
      {{"rules.yaml", "domain: jobs\ndescriptors:\n  - key: mailer\n    concurrency: 3\n"}},
      counters, [](const Limit& limit) { return CheckingStore().CheckLimit(limit); },
      RuleLoadOptions{.no_leases = "the store keeps none"});
  ASSERT_FALSE(rules.ok());
  EXPECT_EQ(rules.status().message(),
            "rules.yaml:4:18: rule 'jobs.mailer': a concurrency limit needs leases, and the "
            "store keeps none");
}

TEST(RuleParseTest, AShareIsKeptWithItsLimit) {
  CounterRegistry counters;
  const auto rules = ParseText(R"(
domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000, share: {max: 100, ttl: 100ms}}
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 10}
)",
                               counters);
  ASSERT_TRUE(rules.ok()) << rules.status();
  const Domain& domain = *(*rules)->FindDomain("api");
  const Rule* user = RuleSet::Match(domain, {{"user", "alice"}});
  ASSERT_NE(user, nullptr);
  ASSERT_TRUE(user->limits[0].share);
  EXPECT_EQ(*user->limits[0].share,
            (SharePolicy{.max = 100, .ttl = std::chrono::milliseconds(100)}));
  const Rule* ip = RuleSet::Match(domain, {{"ip", "1.2.3.4"}});
  ASSERT_NE(ip, nullptr);
  EXPECT_FALSE(ip->limits[0].share);
}

TEST(RuleParseTest, ACalendarQuotaIsAFixedWindowOnTheZonesCalendar) {
  CounterRegistry counters;
  const auto rules = ParseText(R"(
domain: billing
descriptors:
  - key: plan
    rate_limit: {unit: month, requests_per_unit: 10000, calendar: true, time_zone: Europe/Berlin}
  - key: ip
    rate_limit: {unit: day, requests_per_unit: 100, calendar: true}
)",
                               counters);
  ASSERT_TRUE(rules.ok()) << rules.status();
  const Domain& domain = *(*rules)->FindDomain("billing");
  const Rule* plan = RuleSet::Match(domain, {{"plan", "pro"}});
  ASSERT_NE(plan, nullptr);
  ASSERT_TRUE(plan->limits[0].limit);
  const Limit& month = *plan->limits[0].limit;
  EXPECT_EQ(month.calendar(), CalendarUnit::kMonth);
  EXPECT_EQ(month.time_zone().name(), "Europe/Berlin");
  EXPECT_EQ(month.limit(), 10000);
  EXPECT_EQ(plan->limits[0].unit, Unit::kMonth);  // Envoy's unit, in its answers.
  ASSERT_TRUE(plan->limits[0].counter);           // Envoy's counter counts the same windows.
  EXPECT_EQ(plan->limits[0].counter->calendar(), CalendarUnit::kMonth);
  EXPECT_EQ(plan->limits[0].counter->time_zone().name(), "Europe/Berlin");
  const Rule* ip = RuleSet::Match(domain, {{"ip", "1.2.3.4"}});
  ASSERT_NE(ip, nullptr);
  EXPECT_EQ(ip->limits[0].limit->time_zone().name(), "UTC");
  EXPECT_EQ(ip->limits[0].limit->calendar(), CalendarUnit::kDay);
}

TEST(RuleParseTest, CountersSurviveAReloadByName) {
  CounterRegistry counters;
  auto first = MustParse(
      "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, "
      "requests_per_unit: 1}}]\n",
      counters);
  auto second = MustParse(
      "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, "
      "requests_per_unit: 9}}]\n",
      counters);
  const RuleCounters* a = RuleSet::Match(*first->domains()[0], {{"k", "v"}})->limits[0].counters;
  const RuleCounters* b = RuleSet::Match(*second->domains()[0], {{"k", "v"}})->limits[0].counters;
  EXPECT_EQ(a, b);
}

// A corpus of broken files: each must be refused with an error that names the line and
// column of the problem and says what it is.
struct Broken {
  const char* name;
  const char* text;
  const char* location;  // "rules.yaml:LINE:COLUMN"
  const char* says;
};

class BrokenRulesTest : public ::testing::TestWithParam<Broken> {};

TEST_P(BrokenRulesTest, IsRefusedWithItsLocation) {
  CounterRegistry counters;
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules = ParseText(GetParam().text, counters);
  ASSERT_FALSE(rules.ok());
  EXPECT_EQ(rules.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(internal::Message(rules.status())), HasSubstr(GetParam().location));
  EXPECT_THAT(std::string(internal::Message(rules.status())), HasSubstr(GetParam().says));
}

INSTANTIATE_TEST_SUITE_P(
    Corpus, BrokenRulesTest,
    ::testing::Values(
        Broken{"Empty", "", "rules.yaml:1:1", "empty"},
        Broken{"NotYaml", "domain: [unclosed\n", "rules.yaml:", "end of"},
        Broken{"NotAMapping", "- a\n- b\n", "rules.yaml:1:1", "mapping"},
        Broken{"NoDomain", "descriptors: []\n", "rules.yaml:1:1", "missing 'domain'"},
        Broken{"EmptyDomain", "domain: ''\n", "rules.yaml:1:9", "must not be empty"},
        Broken{"UnknownTopKey", "domain: d\ndescriptor: []\n", "rules.yaml:2:1",
               "unknown key 'descriptor'"},
        Broken{"UnknownRuleKey",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {unit: second}\n",
               "rules.yaml:4:5", "unknown key 'rate_limt'"},
        Broken{"NoKey", "domain: d\ndescriptors:\n  - value: v\n", "rules.yaml:3:5",
               "missing 'key'"},
        Broken{"BadUnit",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n"
               "      requests_per_unit: 1\n",
               "rules.yaml:5:13", "unknown unit 'fortnight'"},
        Broken{"NoUnit",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n",
               "rules.yaml:4:17", "missing 'unit'"},
        Broken{"NegativeCount",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
               "requests_per_unit: -1}\n",
               "rules.yaml:4:51", "requests_per_unit must be between 0"},
        Broken{"CountNotANumber",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
               "requests_per_unit: lots}\n",
               "rules.yaml:4:51", "must be an integer"},
        Broken{"UnitAndPeriod",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, period: 1s, "
               "requests_per_unit: 1}\n",
               "rules.yaml:4:40", "either 'unit' or 'period'"},
        Broken{"BadPeriod",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {period: 1y, "
               "requests_per_unit: 1}\n",
               "rules.yaml:4:26", "invalid duration '1y'"},
        Broken{"UnknownAlgorithm",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: magic, unit: "
               "second, requests_per_unit: 1}\n",
               "rules.yaml:4:29", "unknown algorithm 'magic'"},
        Broken{"BucketsDoNotDividePeriod",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: "
               "sliding_buckets, buckets: 7, unit: second, requests_per_unit: 1}\n",
               "rules.yaml:4:17", "buckets"},
        Broken{"SlidingLogTooLarge",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: sliding_log, "
               "unit: second, requests_per_unit: 1000000}\n",
               "rules.yaml:4:17", "sliding_log"},
        Broken{"DuplicateDescriptor",
               "domain: d\ndescriptors:\n  - {key: k, value: v}\n  - {key: k, value: v}\n",
               "rules.yaml:4:5", "duplicate descriptor"},
        Broken{"UnlimitedWithUnit",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: "
               "second}\n",
               "rules.yaml:4:17", "unlimited"},
        Broken{"SoftWithoutPercent",
               "domain: d\ndescriptors:\n  - key: k\n    mode: soft\n    rate_limit: {unit: "
               "second, requests_per_unit: 1}\n",
               "rules.yaml:4:11", "soft_percent"},
        Broken{"UnknownMode",
               "domain: d\ndescriptors:\n  - key: k\n    mode: lenient\n    rate_limit: {unit: "
               "second, requests_per_unit: 1}\n",
               "rules.yaml:4:11", "unknown mode 'lenient'"},
        Broken{"ElasticWithoutPool",
               "domain: d\ndescriptors:\n  - key: k\n    mode: elastic\n    rate_limit: {unit: "
               "second, requests_per_unit: 1}\n",
               "rules.yaml:4:11", "needs a 'pool'"},
        Broken{"UnknownPool",
               "domain: d\ndescriptors:\n  - key: k\n    mode: elastic\n    pool: spare\n"
               "    rate_limit: {unit: second, requests_per_unit: 1}\n",
               "rules.yaml:5:11", "no pool named 'spare'"},
        Broken{"ModeWithoutLimit", "domain: d\ndescriptors:\n  - key: k\n    mode: soft\n",
               "rules.yaml:4:11", "needs a 'rate_limit'"},
        Broken{"RateLimitAndLimits",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
               "requests_per_unit: 1}\n    limits: []\n",
               "rules.yaml:5:13", "either 'rate_limit' or 'limits'"},
        Broken{"SameLimitTwice",
               "domain: d\ndescriptors:\n  - key: k\n    limits:\n      - {unit: second, "
               "requests_per_unit: 1}\n      - {unit: second, requests_per_unit: 1}\n",
               "rules.yaml:5:7", "same limit"},
        Broken{"ReplacesItself",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: n, unit: second, "
               "requests_per_unit: 1, replaces: [{name: n}]}\n",
               "rules.yaml:4:74", "cannot replace itself"},
        Broken{"Ipv6PrefixOutOfRange", "domain: d\nipv6_prefix: 129\n", "rules.yaml:2:14",
               "between 1 and 128"},
        Broken{"DescriptorsNotAList", "domain: d\ndescriptors: {key: k}\n", "rules.yaml:2:14",
               "must be a list"},
        Broken{"ConcurrencyZero", "domain: d\ndescriptors:\n  - {key: k, concurrency: 0}\n",
               "rules.yaml:3:27", "concurrency must be between 1 and 10000, not 0"},
        Broken{"ConcurrencyNotANumber",
               "domain: d\ndescriptors:\n  - {key: k, concurrency: many}\n", "rules.yaml:3:27",
               "concurrency must be an integer"},
        Broken{"LeaseTtlWithoutConcurrency",
               "domain: d\ndescriptors:\n  - {key: k, lease_ttl: 5s}\n", "rules.yaml:3:25",
               "'lease_ttl' needs 'concurrency'"},
        Broken{"LeaseTtlTooLong",
               "domain: d\ndescriptors:\n  - {key: k, concurrency: 1, lease_ttl: 2d}\n",
               "rules.yaml:3:41", "at most 1d"},
        Broken{"LeaseTtlNotADuration",
               "domain: d\ndescriptors:\n  - {key: k, concurrency: 1, lease_ttl: soon}\n",
               "rules.yaml:3:41", "lease_ttl:"},
        Broken{"ShareOnSlidingLog",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
               "requests_per_unit: 5, algorithm: sliding_log, share: {max: 10, ttl: 100ms}}\n",
               "rules.yaml:4:85", "sliding_log cannot be leased"},
        Broken{"ShareOnSlidingBuckets",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
               "requests_per_unit: 5, algorithm: sliding_buckets, buckets: 10, share: {max: 10, "
               "ttl: 100ms}}\n",
               "rules.yaml:4:102", "sliding_buckets cannot be leased"},
        Broken{"ShareWithoutTtl",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
               "requests_per_unit: 5, share: {max: 10}}\n",
               "rules.yaml:4:61", "needs both 'max' (units) and 'ttl'"},
        Broken{"ShareMaxZero",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
               "requests_per_unit: 5, share: {max: 0, ttl: 1s}}\n",
               "rules.yaml:4:67", "share: max must be between 1 and 1000000, not 0"},
        Broken{"ShareTtlTooShort",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
               "requests_per_unit: 5, share: {max: 5, ttl: 100us}}\n",
               "rules.yaml:4:75", "share: ttl must be 1ms to 1m, not 100us"},
        Broken{"ShareTtlNotADuration",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
               "requests_per_unit: 5, share: {max: 5, ttl: soon}}\n",
               "rules.yaml:4:75", "share: ttl:"},
        Broken{"ShareUnknownKey",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
               "requests_per_unit: 5, share: {max: 5, ttl: 1s, size: 3}}\n",
               "rules.yaml:4:79", "unknown key 'size'"},
        Broken{"ShareNotAMapping",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
               "requests_per_unit: 5, share: 100}\n",
               "rules.yaml:4:61", "'share' must be a mapping"},
        Broken{"ShareOnUnlimited",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, share: "
               "{max: 5, ttl: 1s}}\n",
               "rules.yaml:4:17", "an unlimited rate_limit has no unit, period, share or calendar"},
        Broken{"CalendarUnknownZone",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, "
               "requests_per_unit: 5, calendar: true, time_zone: Europe/Berln}\n",
               "rules.yaml:4:80", "unknown time zone 'Europe/Berln'"},
        Broken{"CalendarOnAnHour",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, "
               "requests_per_unit: 5, calendar: true}\n",
               "rules.yaml:4:62", "a calendar quota's unit is day, week, month or year, not hour"},
        Broken{"TimeZoneWithoutCalendar",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, "
               "requests_per_unit: 5, time_zone: UTC}\n",
               "rules.yaml:4:62", "'time_zone' needs 'calendar: true'"},
        Broken{"CalendarWithPeriod",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {period: 1d, "
               "requests_per_unit: 5, calendar: true}\n",
               "rules.yaml:4:62", "takes its window from 'unit'"},
        Broken{"CalendarGcra",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, "
               "requests_per_unit: 5, algorithm: gcra, calendar: true}\n",
               "rules.yaml:4:17", "a calendar quota is a fixed_window, not a gcra"},
        Broken{"CalendarGcraOfZero",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, "
               "requests_per_unit: 0, algorithm: gcra, calendar: true}\n",
               "rules.yaml:4:17", "a calendar quota is a fixed_window, not a gcra"},
        Broken{"CalendarOnUnlimited",
               "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, "
               "calendar: true}\n",
               "rules.yaml:4:17", "an unlimited rate_limit has no unit, period, share or calendar"},
        Broken{"UnlimitedWithConcurrency",
               "domain: d\ndescriptors:\n  - key: k\n    concurrency: 2\n"
               "    rate_limit: {unlimited: true}\n",
               "rules.yaml:4:18", "an unlimited rule has no concurrency limit"}),
    [](const ::testing::TestParamInfo<Broken>& info) { return std::string(info.param.name); });

TEST(RuleLoadTest, DuplicateDomainAcrossFilesNamesBoth) {
  CounterRegistry counters;
  MemoryStore store;
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
      RuleSet::Parse({{"a.yaml", "domain: d\n"}, {"b.yaml", "domain: d\n"}}, counters,
                     [&](const Limit& limit) { return store.CheckLimit(limit); });
  ASSERT_FALSE(rules.ok());
  EXPECT_THAT(std::string(internal::Message(rules.status())), HasSubstr("b.yaml"));
  EXPECT_THAT(std::string(internal::Message(rules.status())), HasSubstr("a.yaml"));
}

TEST(RuleLoadTest, MissingFileIsAnErrorNamingIt) {
  CounterRegistry counters;
  MemoryStore store;
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
      RuleSet::Load("/nonexistent/rules.yaml", counters,
                    [&](const Limit& limit) { return store.CheckLimit(limit); });
  ASSERT_FALSE(rules.ok());
  EXPECT_THAT(std::string(internal::Message(rules.status())), HasSubstr("/nonexistent/rules.yaml"));
}

TEST(GroupAddressTest, Ipv4AsItIsIpv6ByPrefix) {
  EXPECT_EQ(GroupAddress("192.0.2.7", 64), "192.0.2.7");
  EXPECT_EQ(GroupAddress("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64), "2001:db8:1:2::/64");
  EXPECT_EQ(GroupAddress("2001:db8:1:2::1", 64), GroupAddress("2001:db8:1:2:ffff::9", 64));
  EXPECT_NE(GroupAddress("2001:db8:1:2::1", 64), GroupAddress("2001:db8:1:3::1", 64));
  EXPECT_EQ(GroupAddress("2001:db8:1:2::1", 48), "2001:db8:1::/48");
  EXPECT_EQ(GroupAddress("2001:db8:1:2::1", 56), GroupAddress("2001:db8:1:ff::1", 56));
  EXPECT_EQ(GroupAddress("2001:db8::1", 128), "2001:db8::1/128");
  EXPECT_EQ(GroupAddress("::ffff:192.0.2.1", 64), "192.0.2.1");
  EXPECT_EQ(GroupAddress("not an address", 64), "not an address");
  EXPECT_EQ(GroupAddress("", 64), "");
  EXPECT_EQ(GroupAddress(std::string(100, ':'), 64), std::string(100, ':'));
}

TEST(CounterRegistryTest, DetailedCountersAreBounded) {
  CounterRegistry registry;
  RuleCounters* rule = registry.Get("api.user");
  EXPECT_EQ(registry.GetDetailed("api.user"), rule);  // An existing name is shared.
  std::vector<RuleCounters*> detailed;
  for (size_t i = 0; i < CounterRegistry::kMaxDetailed; ++i) {
    detailed.push_back(registry.GetDetailed(fmt::format("api.user_{}", i)));
    ASSERT_NE(detailed.back(), nullptr) << i;
  }
  EXPECT_EQ(registry.GetDetailed("api.user_one_too_many"), nullptr);
  EXPECT_EQ(registry.GetDetailed("api.user_7"), detailed[7]);  // Those made stay.
  EXPECT_NE(registry.Get("api.other"), nullptr);               // Rules' own are not bounded.
  EXPECT_EQ(registry.All().size(), CounterRegistry::kMaxDetailed + 2);
}

}  // namespace
}  // namespace sluice::server
