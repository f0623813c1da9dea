#include "sluice/duration.h"

#include "gtest/gtest.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

TEST(DurationTest, ParsesEveryUnit) {
  EXPECT_EQ(*ParseDuration("100us"), 100us);
  EXPECT_EQ(*ParseDuration("250ms"), 250ms);
  EXPECT_EQ(*ParseDuration("1s"), 1s);
  EXPECT_EQ(*ParseDuration("1m"), 1min);
  EXPECT_EQ(*ParseDuration("1h"), 1h);
  EXPECT_EQ(*ParseDuration("400d"), 400 * 24h);
  EXPECT_EQ(*ParseDuration("0"), 0us);
}

TEST(DurationTest, RejectsMalformedTextNamingIt) {
  for (const char* bad : {"", "s", "1", "-1s", "+1s", "1.5s", "1 s", "1sec", "10x"}) {
    const absl::StatusOr<Micros> d = ParseDuration(bad);
    EXPECT_FALSE(d.ok()) << bad;
    EXPECT_NE(d.status().message().find(std::string("'") + bad), absl::string_view::npos)
        << d.status();
  }
  EXPECT_EQ(ParseDuration("9999999999999d").status().message(),
            "duration '9999999999999d' is too long");
}

TEST(DurationTest, CeilSecondsRoundsUpAndNeverBelowZero) {
  EXPECT_EQ(CeilSeconds(0us), 0);
  EXPECT_EQ(CeilSeconds(-1500ms), 0);
  EXPECT_EQ(CeilSeconds(1us), 1);
  EXPECT_EQ(CeilSeconds(1s), 1);
  EXPECT_EQ(CeilSeconds(1s + 1us), 2);
  EXPECT_EQ(CeilSeconds(Micros::max()), Micros::max().count() / 1'000'000 + 1);  // No overflow.
}

TEST(DurationTest, FormatsTheShortestExactSpelling) {
  EXPECT_EQ(FormatDuration(90s), "90s");
  EXPECT_EQ(FormatDuration(1500us), "1500us");
  EXPECT_EQ(FormatDuration(2min), "2m");
  EXPECT_EQ(FormatDuration(48h), "2d");
  EXPECT_EQ(FormatDuration(0us), "0s");
  for (Micros d : {Micros(1us), Micros(999us), Micros(1001ms), Micros(61s), Micros(25h)}) {
    EXPECT_EQ(*ParseDuration(FormatDuration(d)), d);
  }
}

}  // namespace
}  // namespace sluice
