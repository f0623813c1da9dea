// The rules file as hostile input (server/rules/scan.h and the limits of RuleFileLimits): alias
// bombs, sizes past each limit, duplicate keys, second documents, cycles and deep nesting are
// refused with an error naming the limit or the mistake and its place; a real configuration
// of 100,000 per-value rules loads under the default limits.

#include <memory>
#include <string>
#include <utility>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "server/rules/rules.h"
#include "sluice/memory_store.h"

namespace sluice::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

absl::StatusOr<std::shared_ptr<const RuleSet>> ParseWith(const std::string& text,
                                                         const RuleFileLimits& limits = {}) {
  static const MemoryStore store;
  static CounterRegistry counters;
  return RuleSet::Parse(
      {{"rules.yaml", text}}, counters, [](const Limit& limit) { return store.CheckLimit(limit); },
      RuleLoadOptions{.limits = limits});
}

// The error of `text`, or "loaded".
std::string Error(const std::string& text, const RuleFileLimits& limits = {}) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules = ParseWith(text, limits);
  return rules.ok() ? "loaded" : std::string(rules.status().message());
}

// The bomb of issue 19: `levels` levels of 10 anchored descriptors with distinct values (so no
// two at one level are duplicates), each listing aliases of the 10 of the level below:
// 10^levels descriptors when walked, a few kilobytes as written. Level 0 is on line 3.
std::string DescriptorBomb(int levels) {
  std::string text = "domain: bomb\ndescriptors:\n";
  for (int i = 0; i < 10; ++i) {
    text += fmt::format(
        "  - &l0_{0} {{key: k, value: v{0}, rate_limit: {{unit: second, "
        "requests_per_unit: 1}}}}\n",
        i);
  }
  for (int level = 1; level < levels; ++level) {
    for (int i = 0; i < 10; ++i) {
      std::string aliases;
      for (int j = 0; j < 10; ++j) {
        aliases += fmt::format("{}*l{}_{}", j == 0 ? "" : ", ", level - 1, j);
      }
      text += fmt::format("  - &l{0}_{1} {{key: k{0}, value: v{1}, descriptors: [{2}]}}\n", level,
                          i, aliases);
    }
  }
  return text;
}

TEST(RuleFileLimitsTest, AliasBombOfDescriptorsIsRefusedAtTheNodeLimit) {
  // 10 KB; before the limits it grew sluiced to 18 GB until the kernel killed it.
  const std::string bomb = DescriptorBomb(9);
  EXPECT_LT(bomb.size(), 11'000U);
  EXPECT_THAT(Error(bomb), AllOf(HasSubstr("rules.yaml:"),
                                 HasSubstr("the rules expand to more than 5000000 YAML nodes")));
}

TEST(RuleFileLimitsTest, AliasBombInMetadataIsRefusedAtTheNodeLimit) {
  std::string text =
      "domain: bomb\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
      "requests_per_unit: 1}\n    metadata:\n      m0: &m0 [a, b, c, d, e, f, g, h, i, j]\n";
  for (int level = 1; level < 12; ++level) {
    std::string aliases;
    for (int j = 0; j < 10; ++j) {
      aliases += fmt::format("{}*m{}", j == 0 ? "" : ", ", level - 1);
    }
    text += fmt::format("      m{0}: &m{0} [{1}]\n", level, aliases);
  }
  // Reached on the line of m6: 10^6 nodes and more.
  EXPECT_THAT(Error(text), AllOf(HasSubstr("rules.yaml:12:"), HasSubstr("more than 5000000")));
}

TEST(RuleFileLimitsTest, AliasesOfALongValueAreRefusedAtTheByteLimit) {
  std::string text =
      fmt::format("domain: d\ndescriptors:\n  - key: &k {}\n", std::string(1000, 'x'));
  text += "    descriptors:\n";
  for (int i = 0; i < 20; ++i) {
    text += fmt::format("      - {{key: *k, value: v{}}}\n", i);
  }
  EXPECT_EQ(Error(text, {.max_scalar_bytes = 30'000}), "loaded");
  EXPECT_THAT(Error(text, {.max_scalar_bytes = 10'000}),
              AllOf(HasSubstr("rules.yaml:13:15: "),
                    HasSubstr("more than 10000 bytes of keys and values (the byte limit")));
}

TEST(RuleFileLimitsTest, DescriptorsAndLimitsPastTheirLimitsAreRefusedWhereTheyAre) {
  const std::string text =
      "domain: d\ndescriptors:\n"
      "  - {key: a, rate_limit: {unit: second, requests_per_unit: 1}}\n"
      "  - {key: b, rate_limit: {unit: second, requests_per_unit: 1}}\n"
      "  - key: c\n    limits:\n"
      "      - {unit: second, requests_per_unit: 1}\n"
      "      - {unit: minute, requests_per_unit: 10}\n";
  EXPECT_EQ(Error(text, {.max_descriptors = 3, .max_limits = 4}), "loaded");
  EXPECT_EQ(Error(text, {.max_descriptors = 2}),
            "rules.yaml:5:5: more than 2 descriptors (the descriptor limit)");
  EXPECT_EQ(Error(text, {.max_limits = 3}),
            "rules.yaml:8:9: more than 3 rule limits (the limit on limits)");
}

TEST(RuleFileLimitsTest, FilesPastTheByteLimitAreRefused) {
  const std::string text = "domain: d\ndescriptors: []\n";
  EXPECT_EQ(Error(text, {.max_file_bytes = text.size()}), "loaded");
  EXPECT_EQ(Error(text, {.max_file_bytes = text.size() - 1}),
            fmt::format("rules.yaml:1:1: the rules files are more than {} bytes (the file size "
                        "limit)",
                        text.size() - 1));
}

TEST(RuleFileLimitsTest, NestingPastTheDepthLimitIsNamed) {
  // yaml-cpp's own guard (2,000 levels) said "bad file".
  for (const int depth : {65, 5000}) {
    const std::string text = "domain: d\nx: " + std::string(depth, '[') + std::string(depth, ']');
    EXPECT_EQ(Error(text),
              "rules.yaml:2:67: nesting deeper than 64 levels of mappings and lists "
              "(the depth limit)")
        << depth;
  }
  // 30 levels of descriptors (62 of YAML) load.
  std::string deep = "domain: d\ndescriptors:\n";
  for (int level = 0; level < 30; ++level) {
    deep += fmt::format("{}- key: k{}\n{}  descriptors:\n", std::string(2 * level, ' '), level,
                        std::string(2 * level, ' '));
  }
  EXPECT_EQ(Error(deep), "loaded");
}

// A chain of `links` anchors under a key of the root mapping, each but the first a list nested
// 62 deep around an alias of the one before: 64 levels as written, 62 more for each link when
// walked (RemoveNulls, load.cc, recurses through them). m0 is on line 4, m1 on line 5.
std::string AnchorChain(int links) {
  std::string text = "domain: d\ndescriptors: []\nchain:\n  m0: &m0 x\n";
  for (int i = 1; i < links; ++i) {
    text += fmt::format("  m{0}: &m{0} {1}*m{2}{3}\n", i, std::string(62, '['), i - 1,
                        std::string(62, ']'));
  }
  return text;
}

TEST(RuleFileLimitsTest, NestingThroughAliasesPastTheDepthLimitIsRefused) {
  // m1 alone: 64 levels, the limit (and refused later, as a key no rules file has).
  EXPECT_THAT(Error(AnchorChain(2)), HasSubstr("rules.yaml:3:1: unknown key 'chain'"));
  // Before: the depth was bounded as written only; 200 links nest 12,000 levels within the
  // node limit, through which each walk of the tree recursed.
  for (const int links : {3, 200}) {
    EXPECT_EQ(Error(AnchorChain(links)),
              "rules.yaml:6:73: an alias that nests deeper than 64 levels of mappings and lists "
              "(the depth limit; an alias counts as the levels of what it names: 62 here, under "
              "64)")
        << links;
  }
  // An alias of a deep anchor is as deep as the anchor plus where it is.
  EXPECT_EQ(Error("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
                  "requests_per_unit: 1}\n    metadata:\n      a: &a " +
                  std::string(60, '[') + std::string(60, ']') + "\n      b: *a\n      c: [*a]\n"),
            "rules.yaml:8:11: an alias that nests deeper than 64 levels of mappings and lists "
            "(the depth limit; an alias counts as the levels of what it names: 60 here, under "
            "5)");
}

TEST(RuleFileLimitsTest, AnAliasToANodeThatContainsItIsACycle) {
  EXPECT_EQ(Error("domain: d\ndescriptors: &a\n  - key: k\n    descriptors: *a\n"),
            "rules.yaml:4:18: an alias to a node that contains it (a cycle)");
}

TEST(RuleFileLimitsTest, ADuplicateKeyIsRefusedInAnyMapping) {
  // Before: the first value won, silently (100 requests per second here).
  EXPECT_EQ(Error("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n"
                  "      requests_per_unit: 100\n      requests_per_unit: 1\n"),
            "rules.yaml:7:7: duplicate key 'requests_per_unit' (first at line 6): a key may "
            "appear once in a mapping");
  EXPECT_THAT(Error("domain: d\ndomain: e\n"), HasSubstr("rules.yaml:2:1: duplicate key 'domain'"));
  EXPECT_THAT(Error("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
                    "requests_per_unit: 1}\n    metadata: {a: 1, b: {c: 2, c: 3}}\n"),
              HasSubstr("rules.yaml:5:32: duplicate key 'c' (first at line 5)"));
  // The same key in two mappings is no duplicate, nor a value equal to a key.
  EXPECT_EQ(Error("domain: d\ndescriptors:\n  - {key: key, value: key}\n  - {key: value}\n"),
            "loaded");
}

TEST(RuleFileLimitsTest, ASecondDocumentIsRefused) {
  // Before: ignored, as yaml.v2's Unmarshal ignores it in envoyproxy/ratelimit.
  EXPECT_EQ(Error("domain: d\ndescriptors: []\n---\ndomain: e\ndescriptors: []\n"),
            "rules.yaml:4:1: a second YAML document (the '---' at line 3): a rules file holds "
            "one document, as envoyproxy/ratelimit reads one; put each domain in a file of its "
            "own");
  // A document marker before the first, or an empty document after it, is no second one.
  EXPECT_EQ(Error("---\ndomain: d\ndescriptors: []\n---\n"), "loaded");
  EXPECT_EQ(Error("domain: d\ndescriptors: []\n...\n"), "loaded");
}

// yaml-cpp 0.7 loops for ever on a ',' it cannot place (jbeder/yaml-cpp#1040: it starts
// empty document after empty document there); fuzz_rules found it. Before: this test hung.
TEST(RuleFileLimitsTest, AStrayCommaIsRefusedNotLoopedOn) {
  EXPECT_EQ(Error(", r\n"),
            "rules.yaml:1:1: unexpected text that is no YAML node (a ',' outside [] or {}?)");
  EXPECT_EQ(Error("domain: d\ndescriptors: []\n,\n"), "rules.yaml:3:1: end of map not found");
  EXPECT_THAT(Error(", requele9\ndescriptors:\n  - key: oey1\n    sts_pe=_unit: 5}\n"
                    "descriptors:\n  - aey: a\n    rate_limit: *a\n  - key: b\n"
                    "    rate_limit: *a\n"),
              HasSubstr("no YAML node"));
}

TEST(RuleFileLimitsTest, AnIntegerOutOfRangeSaysSo) {
  EXPECT_EQ(Error("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
                  "requests_per_unit: 99999999999999999999}\n"),
            fmt::format("rules.yaml:4:51: requests_per_unit 99999999999999999999 is out of "
                        "range: it must be between 0 and {}",
                        Limit::kMaxCount));
}

// envoyproxy/ratelimit configurations of 100,000 per-value rules exist: they load under the
// default limits (about 10 MB and 1.3 million nodes here).
TEST(RuleFileLimitsTest, OneHundredThousandPerValueRulesLoad) {
  std::string text = "domain: big\ndescriptors:\n  - key: user\n    descriptors:\n";
  for (int i = 0; i < 100'000; ++i) {
    text += fmt::format(
        "      - key: api_key\n        value: key_{:08}\n        rate_limit:\n"
        "          unit: minute\n          requests_per_unit: {}\n",
        i, 100 + i % 1000);
  }
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules = ParseWith(text);
  ASSERT_TRUE(rules.ok()) << rules.status();
  EXPECT_EQ((*rules)->domains().front()->descriptors.nodes.front()->children.nodes.size(),
            100'000U);
}

}  // namespace
}  // namespace sluice::server
