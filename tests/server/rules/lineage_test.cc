// Each limit's earlier figures (lineage.cc): what a reload inherits by identity (the rule's
// path and the limit's name), capped at kMaxBefore; and the history written beside a snapshot,
// read back whole, and refused with the line named when it is anything else.

#include <memory>
#include <string>

#include "gtest/gtest.h"

#include "server/rules/rules.h"
#include "sluice/memory_store.h"
#include "tests/testing/rules.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

std::string Rules(int a, int b, std::string_view name = "first") {
  return "domain: d\n"
         "descriptors:\n"
         "  - key: k\n"
         "    limits:\n"
         "      - {name: " +
         std::string(name) + ", unit: second, requests_per_unit: " + std::to_string(a) +
         "}\n"
         "      - {name: second, unit: hour, requests_per_unit: " +
         std::to_string(b) + "}\n";
}

const std::vector<RuleLimit>& Limits(const RuleSet& rules) {
  return rules.domains()[0]->descriptors.nodes[0]->rule->limits;
}

class LineageTest : public ::testing::Test {
 protected:
  std::shared_ptr<const RuleSet> Load(const std::string& text,
                                      std::shared_ptr<const RuleSet> previous = nullptr) {
    return testing::MustParseRules(text, counters_, store_, "rules.yaml", std::move(previous));
  }
  CounterRegistry counters_;
  MemoryStore store_;
};

TEST_F(LineageTest, AChangedLimitRemembersItsFiguresNewestFirstAndAnUnchangedOneNothing) {
  auto rules = Load(Rules(10, 100));
  rules = Load(Rules(20, 100), rules);
  ASSERT_EQ(Limits(*rules)[0].before.size(), 1U);
  EXPECT_EQ(Limits(*rules)[0].before[0].limit(), 10);
  EXPECT_TRUE(Limits(*rules)[1].before.empty());
  rules = Load(Rules(30, 100), rules);
  ASSERT_EQ(Limits(*rules)[0].before.size(), 2U);
  EXPECT_EQ(Limits(*rules)[0].before[0].limit(), 20);
  EXPECT_EQ(Limits(*rules)[0].before[1].limit(), 10);
}

TEST_F(LineageTest, AtMostKMaxBeforeAreRememberedAndAChangeBackIsNotAnEarlierFigure) {
  auto rules = Load(Rules(1, 100));
  for (int n = 2; n <= 8; ++n) {
    rules = Load(Rules(n, 100), rules);
  }
  EXPECT_EQ(Limits(*rules)[0].before.size(), kMaxBefore);
  EXPECT_EQ(Limits(*rules)[0].before[0].limit(), 7);
  rules = Load(Rules(6, 100), rules);  // Back to figures it had: they are the limit, not before.
  for (const Limit& l : Limits(*rules)[0].before) {
    EXPECT_NE(l.limit(), 6);
  }
}

TEST_F(LineageTest, ALimitSetToZeroAndBackStillRemembersTheFiguresBeforeIt) {
  auto rules = Load(Rules(10, 100));
  rules = Load(Rules(0, 100), rules);  // Every request denied: no limit, no state.
  rules = Load(Rules(20, 100), rules);
  ASSERT_EQ(Limits(*rules)[0].before.size(), 1U);
  EXPECT_EQ(Limits(*rules)[0].before[0].limit(), 10);
}

TEST_F(LineageTest, IdentitiesWithSpacesAndLineBreaksReadBack) {
  auto rules = Load(Rules(10, 100, "\"login attempts\""));
  rules = Load(Rules(20, 100, "\"login attempts\""), rules);
  const LimitHistory history = HistoryOf(*rules);
  const absl::StatusOr<LimitHistory> read = ParseHistory(FormatHistory(history));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, history);
  const LimitHistory odd = {{"a b\nc\td\\", history.begin()->second}};
  const absl::StatusOr<LimitHistory> back = ParseHistory(FormatHistory(odd));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, odd);
}

TEST_F(LineageTest, ARenamedLimitInheritsNothing) {
  auto rules = Load(Rules(10, 100));
  rules = Load(Rules(20, 100, "renamed"), rules);
  EXPECT_TRUE(Limits(*rules)[0].before.empty());
}

TEST_F(LineageTest, TheHistoryReadsBackWhatWasWritten) {
  auto rules = Load(Rules(10, 100));
  rules = Load(Rules(20, 200), rules);
  const LimitHistory history = HistoryOf(*rules);
  ASSERT_EQ(history.size(), 2U);
  const absl::StatusOr<LimitHistory> read = ParseHistory(FormatHistory(history));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, history);
  // A restart that loads changed rules with it inherits as a reload does.
  const absl::StatusOr<std::shared_ptr<const RuleSet>> next =
      RuleSet::Parse({{"rules.yaml", Rules(30, 200)}}, counters_,
                     [this](const Limit& limit) { return store_.CheckLimit(limit); },
                     {.previous = std::make_shared<const LimitHistory>(*read)});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(Limits(**next)[0].before.size(), 2U);
  EXPECT_EQ(Limits(**next)[1].before.size(), 1U);
}

TEST_F(LineageTest, ACalendarQuotaInTheHistoryKeepsItsUnitAndZone) {
  const LimitHistory history = {
      {"rules.yaml/plan\nmonthly",
       {testing::MustLimit(
            {.limit = 10000, .calendar = Calendar{CalendarUnit::kMonth, "America/Sao_Paulo"}}),
        testing::MustLimit({.limit = 5000, .period = std::chrono::hours(24 * 30)})}}};
  const absl::StatusOr<LimitHistory> read = ParseHistory(FormatHistory(history));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, history);
  EXPECT_FALSE(ParseHistory("x\tfixed_window:1:0:1:1:month:Nowhere/Atlantis\n").ok());
  EXPECT_FALSE(ParseHistory("x\tfixed_window:1:0:1:1:fortnight:UTC\n").ok());
}

TEST_F(LineageTest, AHistoryThatIsAnythingElseIsRefusedNamingTheLine) {
  // Fields are separated by tabs: a space is no separator.
  for (const std::string bad :
       {"only-an-identity\n", "x\tfixed_window:1:2:3\n", "x\tnonsense:1:1000000:1:1\n",
        "x\tfixed_window:0:1000000:1:1\n", "x\tfixed_window:1:1000000:1:1\ny\tgcra:1:-5:1:1\n",
        "\\q\tgcra:1:1:1:1\n", "x fixed_window:1:1000000:1:1\n"}) {
    const absl::StatusOr<LimitHistory> read = ParseHistory(bad);
    EXPECT_FALSE(read.ok()) << bad;
    EXPECT_NE(read.status().message().find("line "), std::string::npos) << read.status();
  }
}

}  // namespace
}  // namespace sluice::server
