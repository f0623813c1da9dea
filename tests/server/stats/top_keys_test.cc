// Top offenders (server/stats/top_keys.h): Space-Saving's two bounds on random streams against
// exact counts, a heavy key among a million random ones found first, memory held to its bound
// under a flood of distinct keys, the window of minutes, the bound on rule limits followed, and
// off until enabled. On injected times.

#include "server/stats/top_keys.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"
#include "gtest/gtest.h"

#include "server/stats/metrics.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

using ::sluice::testing::At;
using ::sluice::testing::kEpoch;

constexpr int64_t kMinute = 60'000'000;
constexpr int64_t kStart = kEpoch - kEpoch % kMinute;  // The start of a minute.

TEST(SpaceSavingTest, ExactWhileItHoldsEveryKey) {
  SpaceSaving summary(4);
  summary.Add("a", 3);
  summary.Add("b", 1);
  summary.Add("a", 2);
  EXPECT_EQ(summary.total(), 6U);
  EXPECT_EQ(summary.floor(), 0U);  // Not full: an absent key had nothing.
  ASSERT_NE(summary.Find("a"), nullptr);
  EXPECT_EQ(summary.Find("a")->count, 5U);
  EXPECT_EQ(summary.Find("a")->error, 0U);
}

TEST(SpaceSavingTest, ANewKeyTakesTheLeastCountedPlaceAndItsCount) {
  SpaceSaving summary(2);
  summary.Add("a", 5);
  summary.Add("b", 2);
  summary.Add("c", 1);  // Replaces b: 2 + 1, of which 2 may be b's.
  ASSERT_EQ(summary.keys().size(), 2U);
  EXPECT_EQ(summary.Find("b"), nullptr);
  ASSERT_NE(summary.Find("c"), nullptr);
  EXPECT_EQ(summary.Find("c")->count, 3U);
  EXPECT_EQ(summary.Find("c")->error, 2U);
  EXPECT_EQ(summary.floor(), 3U);
  summary.Clear();  // Its places are reused: nothing of before is found.
  summary.Add("d", 1);
  EXPECT_EQ(summary.Find("a"), nullptr);
  EXPECT_EQ(summary.keys().size(), 1U);
  EXPECT_EQ(summary.total(), 1U);
}

// The two guarantees top_keys.h states, over every epoch of a window, on skewed random streams
// with known counts: every key with more than N/k is listed, and every count is within N/k.
TEST(TopKeysTest, EveryKeyAboveTheBoundIsListedAndEveryCountIsWithinIt) {
  std::mt19937_64 random(35);
  for (int trial = 0; trial < 20; ++trial) {
    TopKeys top("rule");
    absl::flat_hash_map<std::string, uint64_t> exact;
    uint64_t n = 0;
    for (int i = 0; i < 20'000; ++i) {
      // Zipf-like: key j with weight ~ 1/j, over 2,000 keys, spread over 5 minutes.
      const uint64_t j = 1 + random() % 2'000;
      const uint64_t key = 1 + (random() % j);
      const uint64_t hits = 1 + random() % 3;
      const std::string name = fmt::format("k{}", key);
      top.Record(name, false, hits, At(kStart + (i * 5 * kMinute) / 20'000));
      exact[name] += hits;
      n += hits;
    }
    const RuleTop listed = top.Top(TopBy::kHits, 1'000, At(kStart + 5 * kMinute - 1));
    EXPECT_EQ(listed.total, n);
    EXPECT_EQ(listed.bound, n / TopKeys::kCapacity);
    absl::flat_hash_map<std::string, uint64_t> estimated;
    for (const RuleTop::Key& k : listed.keys) {
      estimated[k.key] = k.count;
      const uint64_t truth = exact[k.key];
      EXPECT_LE(k.count, truth + listed.bound) << k.key;
      EXPECT_GE(k.count + listed.bound, truth) << k.key;
      EXPECT_LE(k.count - k.error, truth) << k.key;  // The count less its error never overstates.
    }
    for (const auto& [key, truth] : exact) {
      if (truth > listed.bound) {
        EXPECT_TRUE(estimated.contains(key)) << key << " had " << truth << " of " << n;
      }
    }
  }
}

TEST(TopKeysTest, AHeavyKeyAmongAMillionRandomOnesComesFirst) {
  TopKeys top("api.user");
  std::mt19937_64 random(1);
  // A million random keys (each seen about once), and among them 50,000 requests of the
  // flooder's: more than N/k of the hits (1,050,000 / 32 = 32,812), as the guarantee needs.
  int heavy_left = 50'000;
  for (int i = 0; i < 1'050'000; ++i) {
    const bool heavy = i % 21 == 0 && heavy_left-- > 0;
    const std::string key = heavy ? "mallory" : fmt::format("user-{}", random());
    top.Record(key, /*denied=*/heavy || random() % 50 == 0, 1, At(kStart + i));
  }
  for (TopBy by : {TopBy::kHits, TopBy::kDenied}) {
    const RuleTop listed = top.Top(by, 5, At(kStart + 1'050'000));
    ASSERT_FALSE(listed.keys.empty());
    EXPECT_EQ(listed.keys[0].key, "mallory");
    EXPECT_GE(listed.keys[0].count + listed.bound, 50'000U);
  }
  // A million distinct keys held no more than the summaries' places.
  EXPECT_LE(top.held(), 2U * TopKeys::kEpochs * TopKeys::kCapacity);
}

TEST(TopKeysTest, CountsOlderThanTheWindowAreGone) {
  TopKeys top("rule");
  top.Record("early", true, 1, At(kStart));
  top.Record("late", true, 1, At(kStart + 4 * kMinute));
  RuleTop listed = top.Top(TopBy::kDenied, 10, At(kStart + 4 * kMinute + 1));
  EXPECT_EQ(listed.keys.size(), 2U);
  listed = top.Top(TopBy::kDenied, 10, At(kStart + 5 * kMinute));  // The first minute left.
  ASSERT_EQ(listed.keys.size(), 1U);
  EXPECT_EQ(listed.keys[0].key, "late");
  EXPECT_EQ(listed.total, 1U);
  // A minute's summary is reused, cleared, when its slot comes round again.
  top.Record("again", true, 1, At(kStart + 5 * kMinute));
  listed = top.Top(TopBy::kDenied, 10, At(kStart + 5 * kMinute));
  EXPECT_EQ(listed.keys.size(), 2U);
  EXPECT_EQ(listed.total, 2U);
}

TEST(TopOffendersTest, OffUntilEnabledAndBoundedInRules) {
  TopOffenders top;
  std::vector<RuleCounters> counters(TopOffenders::kMaxRules + 3);
  top.Record(counters[0], "r0", "k", true, 1, At(kStart));
  EXPECT_TRUE(top.Top({}, TopBy::kDenied, 10, At(kStart)).empty());  // Off.
  top.Enable(true);
  for (size_t i = 0; i < counters.size(); ++i) {
    top.Record(counters[i], fmt::format("r{:05}", i), "k", true, 1, At(kStart));
  }
  EXPECT_EQ(top.Top({}, TopBy::kDenied, 10, At(kStart)).size(), TopOffenders::kMaxRules);
  EXPECT_EQ(top.untracked(), 3U);
  top.Record(counters.back(), "again", "k", true, 1, At(kStart));  // Refused once, not again.
  EXPECT_EQ(top.untracked(), 3U);
  const std::vector<RuleTop> one = top.Top("r00007", TopBy::kDenied, 10, At(kStart));
  ASSERT_EQ(one.size(), 1U);
  EXPECT_EQ(one[0].keys[0].count, 1U);
}

// --top-metrics puts callers' keys in label values: whatever bytes they hold, the page stays
// one a scraper reads (UTF-8, one line per series).
TEST(TopOffendersTest, TopMetricsAreWellFormedWhateverTheKeys) {
  Metrics metrics;
  metrics.top().Enable(true);
  RuleCounters counters;
  // A quote, a backslash, a newline, a control byte, a stray byte, then a well-formed é.
  const std::string hostile = std::string(
      "a\"b\\c\nd\x01"
      "e\xff"
      "\xc3\xa9"
      "f");
  metrics.top().Record(counters, "api.user", hostile, true, 1, At(kStart));
  const std::string text =
      metrics.RenderTop(3, At(kStart), [](std::string_view key) { return std::string(key); });
  const std::string replaced = "\xef\xbf\xbd";  // U+FFFD.
  const std::string label = std::string(R"(a\"b\\c\nd)") + replaced + "e" + replaced +
                            "\xc3\xa9"
                            "f";
  EXPECT_NE(text.find("sluice_top_denied{rule=\"api.user\",key=\"" + label + "\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find('\x01'), std::string::npos);
}

}  // namespace
}  // namespace sluice::server
