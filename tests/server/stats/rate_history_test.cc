// RateHistory (server/stats/rate_history.h): the operator's page's admitted and denied per
// second, sampled from the rules' counters on a manual clock.

#include "server/stats/rate_history.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::server {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;

constexpr std::chrono::seconds kStart{1'700'000'000};

Timestamp At(std::chrono::milliseconds since_start) { return Timestamp{kStart + since_start}; }

void Count(RuleCounters* counters, uint64_t admitted, uint64_t denied) {
  counters->admitted.fetch_add(admitted);
  counters->denied.fetch_add(denied);
}

TEST(RateHistoryTest, NothingBeforeTheFirstSample) {
  const RateHistory history;
  const RateHistory::Window window = history.Recent(10);
  EXPECT_TRUE(window.series.empty());
  EXPECT_EQ(window.end, Timestamp{});
}

TEST(RateHistoryTest, FilesEachSecondsGrowthUnderItsSecond) {
  CounterRegistry counters;
  RuleCounters* user = counters.Get("api.user");
  Count(user, 1000, 50);  // Before the history started: learnt, not filed.
  RateHistory history;
  history.Sample(counters, At(std::chrono::milliseconds(0)));
  EXPECT_TRUE(history.Recent(5).series.empty());  // Nothing moved yet.

  Count(user, 7, 2);
  history.Sample(counters, At(std::chrono::milliseconds(1'000)));
  Count(user, 3, 0);
  history.Sample(counters, At(std::chrono::milliseconds(1'600)));  // The same second: added.
  Count(user, 4, 1);
  // Late: seconds 2 and 3 were not sampled. The growth lands in second 4; 2 and 3 stay 0.
  history.Sample(counters, At(std::chrono::milliseconds(4'100)));

  const RateHistory::Window window = history.Recent(5);
  EXPECT_EQ(window.end, Timestamp{kStart + std::chrono::seconds(4)});
  ASSERT_EQ(window.series.size(), 1U);
  EXPECT_EQ(window.series[0].name, "api.user");
  EXPECT_THAT(window.series[0].admitted, ElementsAre(0, 10, 0, 0, 4));
  EXPECT_THAT(window.series[0].denied, ElementsAre(0, 2, 0, 0, 1));
}

TEST(RateHistoryTest, ACounterMadeAfterTheFirstSampleCountsFromZero) {
  CounterRegistry counters;
  RateHistory history;
  history.Sample(counters, At(std::chrono::milliseconds(0)));
  RuleCounters* reloaded = counters.Get("api.new");  // A reload's new rule, used at once.
  Count(reloaded, 3, 1);
  history.Sample(counters, At(std::chrono::milliseconds(1'000)));
  const RateHistory::Window window = history.Recent(1);
  ASSERT_EQ(window.series.size(), 1U);
  EXPECT_THAT(window.series[0].admitted, ElementsAre(3));
  EXPECT_THAT(window.series[0].denied, ElementsAre(1));
}

TEST(RateHistoryTest, TheWindowSlidesAndOldSecondsAreForgotten) {
  CounterRegistry counters;
  RuleCounters* user = counters.Get("api.user");
  RateHistory history;
  history.Sample(counters, At(std::chrono::milliseconds(0)));
  Count(user, 9, 0);
  history.Sample(counters, At(std::chrono::seconds(1)));
  // Once around the ring, plus one: second 1's slot is second 901's, which saw nothing.
  Count(user, 0, 0);
  history.Sample(counters, At(std::chrono::seconds(1 + RateHistory::kSeconds - 1)));
  RateHistory::Window window = history.Recent(RateHistory::kSeconds);
  ASSERT_EQ(window.series.size(), 1U);
  EXPECT_EQ(window.series[0].admitted.size(), static_cast<size_t>(RateHistory::kSeconds));
  EXPECT_EQ(window.series[0].admitted.front(), 9U);  // Still in the window, oldest.
  Count(user, 1, 0);
  history.Sample(counters, At(std::chrono::seconds(1 + RateHistory::kSeconds)));
  window = history.Recent(RateHistory::kSeconds);
  ASSERT_EQ(window.series.size(), 1U);
  EXPECT_EQ(window.series[0].admitted.back(), 1U);
  EXPECT_EQ(std::count(window.series[0].admitted.begin(), window.series[0].admitted.end(), 9U), 0);
}

TEST(RateHistoryTest, AnIdleSeriesGivesItsPlaceUp) {
  CounterRegistry counters;
  RuleCounters* user = counters.Get("api.user");
  RateHistory history;
  history.Sample(counters, At(std::chrono::milliseconds(0)));
  Count(user, 1, 0);
  history.Sample(counters, At(std::chrono::seconds(1)));
  history.Sample(counters, At(std::chrono::seconds(1 + RateHistory::kSeconds - 1)));
  EXPECT_EQ(history.Recent(1).series.size(), 1U);
  history.Sample(counters, At(std::chrono::seconds(1 + RateHistory::kSeconds)));
  EXPECT_TRUE(history.Recent(RateHistory::kSeconds).series.empty());
}

TEST(RateHistoryTest, AtMostMaxSeriesAreFollowedTheRestCounted) {
  CounterRegistry counters;
  RateHistory history;
  history.Sample(counters, At(std::chrono::milliseconds(0)));
  const size_t rules = RateHistory::kMaxSeries + 10;
  for (size_t i = 0; i < rules; ++i) {
    Count(counters.Get("rule" + std::to_string(1000 + i)), 1, 1);
  }
  history.Sample(counters, At(std::chrono::seconds(1)));
  const RateHistory::Window window = history.Recent(2);
  EXPECT_EQ(window.series.size(), RateHistory::kMaxSeries);
  EXPECT_EQ(window.untracked, 10U);
  for (const RateHistory::Series& series : window.series) {
    EXPECT_THAT(series.admitted, ElementsAre(0, 1));
  }
}

TEST(RateHistoryTest, AClockSteppedBackFilesUnderTheLatestSecond) {
  CounterRegistry counters;
  RuleCounters* user = counters.Get("api.user");
  RateHistory history;
  history.Sample(counters, At(std::chrono::seconds(10)));
  Count(user, 2, 0);
  history.Sample(counters, At(std::chrono::seconds(3)));
  const RateHistory::Window window = history.Recent(2);
  EXPECT_EQ(window.end, Timestamp{kStart + std::chrono::seconds(10)});
  ASSERT_EQ(window.series.size(), 1U);
  EXPECT_THAT(window.series[0].admitted, ElementsAre(0, 2));
}

TEST(RateHistoryTest, RecentClampsTheSecondsAsked) {
  CounterRegistry counters;
  RuleCounters* user = counters.Get("api.user");
  RateHistory history;
  history.Sample(counters, At(std::chrono::milliseconds(0)));
  Count(user, 1, 0);
  history.Sample(counters, At(std::chrono::seconds(1)));
  EXPECT_EQ(history.Recent(0).series[0].admitted.size(), 1U);
  EXPECT_EQ(history.Recent(-5).series[0].admitted.size(), 1U);
  EXPECT_EQ(history.Recent(100'000).series[0].admitted.size(),
            static_cast<size_t>(RateHistory::kSeconds));
  EXPECT_THAT(history.Recent(100'000).series[0].denied, Each(0U));
}

}  // namespace
}  // namespace sluice::server
