// What the rules loader reads as envoyproxy/ratelimit reads it (src/config/config_impl.go and
// its YAML decoder), one test per piece: quota_mode, metadata and its types, share_threshold,
// null and empty values, '*' anywhere in a value, the path Match gives, and domains merged
// across files. Their own files are envoy_configs_test.cc's.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "server/rules/rules.h"
#include "sluice/memory_store.h"
#include "src/core/status.h"
#include "tests/testing/rules.h"

namespace sluice::server {
namespace {

using ::testing::HasSubstr;

const MemoryStore& Store() {
  static const MemoryStore store;
  return store;
}

absl::StatusOr<std::shared_ptr<const RuleSet>> ParseFiles(
    const std::vector<std::pair<std::string, std::string>>& files, CounterRegistry& counters,
    RuleLoadOptions options = {}) {
  return RuleSet::Parse(
      files, counters, [](const Limit& limit) { return Store().CheckLimit(limit); }, options);
}

// The error `text` is refused with ("loaded" if it loads).
std::string ErrorOf(const std::string& text) {
  CounterRegistry counters;
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules = ParseFiles({{"r.yaml", text}}, counters);
  return rules.ok() ? "loaded" : std::string(internal::Message(rules.status()));
}

// The rule `entries` match in the first domain of `rules`.
const Rule* Find(const RuleSet& rules, const std::vector<Entry>& entries) {
  return RuleSet::Match(*rules.domains().front(), entries);
}

std::string PathOf(const RuleSet& rules, const std::vector<Entry>& entries) {
  const Rule* rule = Find(rules, entries);
  return rule == nullptr ? "none" : rule->path;
}

TEST(EnvoyFormatTest, QuotaModeIsKeptOnTheRule) {
  CounterRegistry counters;
  auto rules = testing::MustParseRules(R"(
domain: d
descriptors:
  - {key: a, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: b, quota_mode: false, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: c, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: e, quota_mode: true}
)",
                                       counters, Store());
  EXPECT_TRUE(Find(*rules, {{"a", "x"}})->quota_mode);
  EXPECT_FALSE(Find(*rules, {{"b", "x"}})->quota_mode);
  EXPECT_FALSE(Find(*rules, {{"c", "x"}})->quota_mode);
  EXPECT_EQ(Find(*rules, {{"e", "x"}}), nullptr);  // Without a rate_limit it does nothing.
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - {key: a, quota_mode: maybe}\n"),
              HasSubstr("r.yaml:3:26: quota_mode must be true or false"));
}

// The metadata of one rule, as JSON text.
std::string MetadataOf(const std::string& metadata) {
  CounterRegistry counters;
  auto rules = testing::MustParseRules(
      "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
      "    metadata:\n" +
          metadata,
      counters, Store());
  const Rule* rule = rules->domains().empty() ? nullptr : Find(*rules, {{"k", "v"}});
  return rule == nullptr ? "no rule" : rule->metadata_json;
}

// Each figure below is what their server answered for the same YAML, in its dynamic metadata
// (RESPONSE_DYNAMIC_METADATA=true), where every number is a double.
TEST(EnvoyFormatTest, MetadataIsTypedAsTheirYamlDecoderTypesIt) {
  EXPECT_EQ(MetadataOf("      name: service_1\n"), R"({"name":"service_1"})");
  // Plain scalars as yaml.v2 resolves them; quoted ones stay strings.
  EXPECT_EQ(MetadataOf("      i: 42\n      neg: -7\n      hex: 0x1F\n      octal: 017\n"
                       "      octal2: 0o17\n      bin: 0b101\n      under: 1_000\n"
                       "      quoted: \"42\"\n      single: '7'\n"),
            R"({"i":42,"neg":-7,"hex":31,"octal":15,"octal2":15,"bin":5,"under":1000,)"
            R"("quoted":"42","single":"7"})");
  EXPECT_EQ(MetadataOf("      f: 1.5\n      e: 1e3\n      dot: .5\n      eight: 08\n"
                       "      big: 18446744073709551615\n      huge: 1e400\n"),
            R"({"f":1.5,"e":1000.0,"dot":0.5,"eight":8.0,"big":18446744073709551615,)"
            R"("huge":"1e400"})");
  EXPECT_EQ(MetadataOf("      t: true\n      y: yes\n      on: On\n      n: no\n      off: OFF\n"
                       "      tq: \"true\"\n"),
            R"({"t":true,"y":true,"on":true,"n":false,"off":false,"tq":"true"})");
  EXPECT_EQ(MetadataOf("      a: ~\n      b: null\n      c:\n      d: ''\n"),
            R"({"a":null,"b":null,"c":null,"d":""})");
  EXPECT_EQ(MetadataOf("      date: 2001-12-14\n      word: Yesterday\n      s: !!str 12\n"),
            R"({"date":"2001-12-14","word":"Yesterday","s":"12"})");
  // Nested mappings and lists kept; deeper keys are named as their convertMap names them.
  EXPECT_EQ(MetadataOf("      svc:\n        name: a\n        ports: [80, \"443\", {x: 1}]\n"
                       "        1: one\n        true: yes\n        0x10: sixteen\n"
                       "        1.5: f\n        1e7: g\n        0.00001: h\n"),
            R"({"svc":{"name":"a","ports":[80,"443",{"x":1}],"1":"one","true":true,)"
            R"("16":"sixteen","1.5":"f","1e+07":"g","1e-05":"h"}})");
  // A top-level key is its text.
  EXPECT_EQ(MetadataOf("      0x10: a\n      yes: b\n"), R"({"0x10":"a","yes":"b"})");
  // A key twice is refused, here as in any mapping (scan_test.cc), where theirs keeps the later.
  EXPECT_EQ(MetadataOf("      {}\n"), "");  // Empty: none, as theirs.
}

TEST(EnvoyFormatTest, MetadataThatCannotBeStructIsRefused) {
  const std::string head = "domain: d\ndescriptors:\n  - key: k\n    metadata:";
  EXPECT_THAT(ErrorOf(head + " [a, b]\n"), HasSubstr("r.yaml:4:15: 'metadata' must be a mapping"));
  EXPECT_THAT(ErrorOf(head + "\n      x: .inf\n"), HasSubstr("r.yaml:5:10: metadata value '.inf' "
                                                             "is not a finite number"));
  EXPECT_THAT(ErrorOf(head + "\n      x: !!int abc\n"),
              HasSubstr("r.yaml:5:10: metadata value 'abc' is not a !!int"));
  EXPECT_THAT(ErrorOf(head + "\n      x: !!binary aGk=\n"), HasSubstr("no !!binary values"));
  EXPECT_THAT(ErrorOf(head + "\n      x: a\xff\n"), HasSubstr("not valid UTF-8"));
  EXPECT_THAT(ErrorOf(head + "\n      [a]: b\n"), HasSubstr("a metadata key must be a scalar"));
  // Without a rate_limit it is checked but goes nowhere, as theirs.
  EXPECT_EQ(ErrorOf(head + "\n      x: 1\n"), "loaded");
}

TEST(EnvoyFormatTest, ShareThresholdNeedsAWildcard) {
  CounterRegistry counters;
  auto rules = testing::MustParseRules(R"(
domain: d
descriptors:
  - {key: f, value: "a/*", share_threshold: true, rate_limit: {unit: hour, requests_per_unit: 1}}
  - {key: g, value: "a/*", rate_limit: {unit: hour, requests_per_unit: 1}}
)",
                                       counters, Store());
  std::vector<const DescriptorNode*> path;
  ASSERT_NE(RuleSet::Match(*rules->domains().front(), {{"f", "a/b"}}, &path), nullptr);
  ASSERT_EQ(path.size(), 1U);
  EXPECT_TRUE(path[0]->share_threshold);
  EXPECT_EQ(path[0]->pattern, "a/*");
  ASSERT_NE(RuleSet::Match(*rules->domains().front(), {{"g", "a/b"}}, &path), nullptr);
  EXPECT_FALSE(path[0]->share_threshold);
  EXPECT_EQ(path[0]->pattern, "a/*");

  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - {key: f, value: v, share_threshold: true}\n"),
              HasSubstr("r.yaml:3:41: share_threshold needs a wildcard value (one with '*'); "
                        "descriptor 'd.f_v' has none"));
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - {key: f, share_threshold: true}\n"),
              HasSubstr("descriptor 'd.f' has none"));
  EXPECT_EQ(ErrorOf("domain: d\ndescriptors:\n  - {key: f, value: v, share_threshold: false}\n"),
            "loaded");
}

TEST(EnvoyFormatTest, NullIsNoKeyAndAnEmptyValueIsNoValue) {
  CounterRegistry counters;
  auto rules = testing::MustParseRules(R"(
domain: d
descriptors:
  - key: a
    value:
    rate_limit:
      unit: minute
      requests_per_unit: 1
      name:
      replaces:
    descriptors:
  - key: b
    value: ""
    shadow_mode:
    rate_limit: {unit: minute, requests_per_unit: 2, name: ""}
  - key: c
    rate_limit:
    metadata:
  - key: s
    shadow_mode: true
  - key: z
    rate_limit: {unit: minute}
pools:
ip_keys:
auth:
)",
                                       counters, Store());
  const Rule* a = Find(*rules, {{"a", "anything"}});
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->path, "d.a");
  EXPECT_FALSE(a->limits[0].named);
  EXPECT_TRUE(a->limits[0].replaces.empty());
  const Rule* b = Find(*rules, {{"b", "anything"}});
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->path, "d.b");
  EXPECT_EQ(b->mode, Mode::kHard);
  EXPECT_FALSE(b->limits[0].named);
  EXPECT_EQ(b->limits[0].name, "d.b");
  EXPECT_EQ(Find(*rules, {{"c", "x"}}), nullptr);  // `rate_limit:` null: no limit.
  EXPECT_EQ(Find(*rules, {{"s", "x"}}), nullptr);  // shadow_mode without a limit: nothing.
  // Envoy's form without requests_per_unit: 0, every request denied, as theirs.
  const Rule* z = Find(*rules, {{"z", "x"}});
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->limits[0].nominal, 0);
  EXPECT_FALSE(z->limits[0].limit.has_value());
  EXPECT_EQ(rules->domains().front()->ip_keys, std::vector<std::string>{"remote_address"});

  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - {key: k}\n  - {key: k, value: ''}\n"),
              HasSubstr("r.yaml:4:5: duplicate descriptor 'd.k': key 'k' with no value"));
  EXPECT_THAT(ErrorOf("domain:\n"), HasSubstr("r.yaml:1:1: missing 'domain'"));
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - key:\n"), HasSubstr("missing 'key'"));
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - {key: k, rate_limit: {period: 1s}}\n"),
              HasSubstr("missing 'requests_per_unit'"));  // sluice's own form has no default.
}

TEST(EnvoyFormatTest, WildcardsAnywhereInAValue) {
  const std::vector<std::string> star = {"", ""};  // "*"
  EXPECT_TRUE(WildcardMatches(star, ""));
  EXPECT_TRUE(WildcardMatches(star, "anything"));
  EXPECT_TRUE(WildcardMatches({"a", "b", "c"}, "abc"));  // a*b*c
  EXPECT_TRUE(WildcardMatches({"a", "b", "c"}, "a-b-b-c"));
  EXPECT_FALSE(WildcardMatches({"a", "b", "c"}, "acb"));
  EXPECT_FALSE(WildcardMatches({"ab", "ba"}, "aba"));  // ab*ba: prefix and suffix overlap.
  EXPECT_TRUE(WildcardMatches({"ab", "ba"}, "abba"));
  EXPECT_TRUE(WildcardMatches({"", "x", ""}, "axb"));  // *x*
  EXPECT_FALSE(WildcardMatches({"", "x", ""}, "ab"));
  EXPECT_TRUE(WildcardMatches({"", "", "z"}, "yz"));  // **z
  EXPECT_TRUE(WildcardMatches({"x", "x", "x"}, "xxx"));
  EXPECT_FALSE(WildcardMatches({"x", "x", "x"}, "xx"));

  CounterRegistry counters;
  auto rules = testing::MustParseRules(R"(
domain: d
descriptors:
  - {key: p, value: "/api/*/action", rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: p, value: "/api/*", rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: p, value: "/api/v1/action", rate_limit: {unit: minute, requests_per_unit: 3}}
  - {key: p, value: "*.png", rate_limit: {unit: minute, requests_per_unit: 4}}
  - {key: p, rate_limit: {unit: minute, requests_per_unit: 5}}
  - {key: q, value: "*", rate_limit: {unit: minute, requests_per_unit: 6}}
  - {key: q, value: "x*", rate_limit: {unit: minute, requests_per_unit: 7}}
)",
                                       counters, Store());
  EXPECT_EQ(PathOf(*rules, {{"p", "/api/v1/action"}}), "d.p_/api/v1/action");  // Exact first.
  EXPECT_EQ(PathOf(*rules, {{"p", "/api/v2/action"}}), "d.p_/api/*/action");   // File order.
  EXPECT_EQ(PathOf(*rules, {{"p", "/api/v2/other"}}), "d.p_/api/*");
  EXPECT_EQ(PathOf(*rules, {{"p", "/img/a.png"}}), "d.p_*.png");
  EXPECT_EQ(PathOf(*rules, {{"p", "/img/a.gif"}}), "d.p");  // Key alone last.
  EXPECT_EQ(PathOf(*rules, {{"q", ""}}), "d.q_*");
  EXPECT_EQ(PathOf(*rules, {{"q", "xyz"}}), "d.q_*");  // The first wildcard that matches.
  // A value written as the pattern itself matches that pattern first, as theirs.
  EXPECT_EQ(PathOf(*rules, {{"q", "x*"}}), "d.q_x*");
  EXPECT_THAT(ErrorOf("domain: d\ndescriptors:\n  - {key: k, value: 'a*'}\n"
                      "  - {key: k, value: 'a*'}\n"),
              HasSubstr("duplicate descriptor 'd.k_a*'"));
}

// Theirs matches an entry as one "KEY_VALUE" string, so that source=cluster_proxy hits a rule
// for source_cluster=proxy (and a wildcard of one key hits other keys); ours matches key and
// value as two fields.
TEST(EnvoyFormatTest, KeyAndValueAreMatchedApart) {
  CounterRegistry counters;
  auto rules = testing::MustParseRules(R"(
domain: d
descriptors:
  - {key: source_cluster, value: proxy, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: a, value: "b*", rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: c_d, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: c, value: d, rate_limit: {unit: minute, requests_per_unit: 2}}
)",
                                       counters, Store());
  EXPECT_EQ(PathOf(*rules, {{"source_cluster", "proxy"}}), "d.source_cluster_proxy");
  EXPECT_EQ(PathOf(*rules, {{"source", "cluster_proxy"}}), "none");
  EXPECT_EQ(PathOf(*rules, {{"a", "bc"}}), "d.a_b*");
  EXPECT_EQ(PathOf(*rules, {{"a_b", "c"}}), "none");
  // Theirs refuses these two as one composite key "c_d"; ours has both.
  EXPECT_EQ(Find(*rules, {{"c_d", "x"}})->limits[0].nominal, 1);
  EXPECT_EQ(Find(*rules, {{"c", "d"}})->limits[0].nominal, 2);
}

TEST(EnvoyFormatTest, MatchGivesTheNodeOfEachEntry) {
  CounterRegistry counters;
  auto rules = testing::MustParseRules(R"(
domain: d
descriptors:
  - key: a
    value: "x*"
    descriptors:
      - {key: b, rate_limit: {unit: minute, requests_per_unit: 1}}
)",
                                       counters, Store());
  const Domain& domain = *rules->domains().front();
  std::vector<const DescriptorNode*> path = {nullptr, nullptr, nullptr};
  const Rule* rule = RuleSet::Match(domain, {{"a", "xy"}, {"b", "z"}}, &path);
  ASSERT_NE(rule, nullptr);
  ASSERT_EQ(path.size(), 2U);
  EXPECT_EQ(path[0]->key, "a");
  EXPECT_EQ(path[0]->value, "x*");
  EXPECT_TRUE(path[0]->wildcard);
  EXPECT_EQ(path[1]->key, "b");
  EXPECT_EQ(&*path[1]->rule, rule);
  // Nothing matched (or no rule where it ended): an empty path.
  EXPECT_EQ(RuleSet::Match(domain, {{"a", "xy"}}, &path), nullptr);
  EXPECT_TRUE(path.empty());
  path.push_back(nullptr);
  EXPECT_EQ(RuleSet::Match(domain, {{"a", "y"}, {"b", "z"}}, &path), nullptr);
  EXPECT_TRUE(path.empty());
}

TEST(EnvoyFormatTest, DomainsMergeOnlyWhenAsked) {
  const std::vector<std::pair<std::string, std::string>> files = {{"one.yaml", R"(
domain: d
pools:
  spare: {unit: second, requests_per_unit: 10}
descriptors:
  - key: a
    descriptors:
      - {key: b, rate_limit: {unit: minute, requests_per_unit: 1}}
)"},
                                                                  {"two.yaml", R"(
domain: d
descriptors:
  - key: c
    descriptors:
      - {key: b, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: e, mode: elastic, pool: spare, rate_limit: {unit: minute, requests_per_unit: 3}}
)"},
                                                                  {"other.yaml", "domain: o\n"}};
  CounterRegistry counters;
  absl::StatusOr<std::shared_ptr<const RuleSet>> apart = ParseFiles(files, counters);
  ASSERT_FALSE(apart.ok());
  EXPECT_THAT(std::string(internal::Message(apart.status())),
              HasSubstr("two.yaml:1:1: domain 'd' is already defined in one.yaml"));

  absl::StatusOr<std::shared_ptr<const RuleSet>> merged =
      ParseFiles(files, counters, {.merge_domains = true});
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_EQ((*merged)->domains().size(), 2U);
  EXPECT_EQ(PathOf(**merged, {{"a", "1"}, {"b", "2"}}), "d.a.b");
  EXPECT_EQ(PathOf(**merged, {{"c", "1"}, {"b", "2"}}), "d.c.b");
  const Rule* elastic = Find(**merged, {{"e", "1"}});
  ASSERT_NE(elastic, nullptr);
  EXPECT_EQ(elastic->pool->name, "spare");  // A pool of the domain's other file.

  // Merging adds at the top level: a descriptor already there is refused, as theirs.
  absl::StatusOr<std::shared_ptr<const RuleSet>> twice =
      ParseFiles({files[0], {"again.yaml", "domain: d\ndescriptors:\n  - {key: a}\n"}}, counters,
                 {.merge_domains = true});
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(std::string(internal::Message(twice.status())),
              HasSubstr("again.yaml:3:5: duplicate descriptor 'd.a'"));
  // One set of IP keys and pool names for the whole domain.
  EXPECT_THAT(std::string(internal::Message(
                  ParseFiles({files[0], {"ip.yaml", "domain: d\nip_keys: [client]\n"}}, counters,
                             {.merge_domains = true})
                      .status())),
              HasSubstr("ip.yaml:2:10: 'ip_keys' differs from those of domain 'd' in one.yaml"));
  EXPECT_THAT(
      std::string(internal::Message(ParseFiles({files[0],
                                                {"pool.yaml",
                                                 "domain: d\npools:\n  spare: {unit: second, "
                                                 "requests_per_unit: 1}\n"}},
                                               counters, {.merge_domains = true})
                                        .status())),
      HasSubstr("pool.yaml:3:3: pool 'spare' is already defined in domain 'd'"));
}

}  // namespace
}  // namespace sluice::server
