// Calendar quotas (Limit::calendar): a fixed_window whose windows are a zone's days, weeks,
// months or years. Decisions, settles and give-backs at the edges of real windows (a DST day
// of 23 hours, a month that starts at 22:00 UTC); what Create refuses, and why. The instants
// were worked out with Python's zoneinfo, not with Abseil.

#include <chrono>
#include <limits>
#include <string>

#include "absl/hash/hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "sluice/convert.h"
#include "sluice/give_back.h"
#include "sluice/limit.h"
#include "sluice/settle.h"
#include "src/core/calendar.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;
using testing::At, testing::MustLimit;

constexpr int64_t kSecond = 1'000'000;
constexpr int64_t kHour = 3'600 * kSecond;
// Europe/Berlin: March 2024 from 2024-02-29T23:00Z, April from 2024-03-31T22:00Z (summer
// time began that day, 2024-03-31, whose local day lasted 23 hours from 2024-03-30T23:00Z),
// May from 2024-04-30T22:00Z.
constexpr int64_t kBerlinMarch = 1709247600 * kSecond;
constexpr int64_t kBerlinApril = 1711922400 * kSecond;
constexpr int64_t kBerlinMay = 1714514400 * kSecond;
constexpr int64_t kBerlinMarch31 = 1711839600 * kSecond;

Limit Calendar(CalendarUnit unit, std::string zone, int64_t n) {
  return MustLimit({.limit = n, .calendar = sluice::Calendar{unit, std::move(zone)}});
}

TEST(CalendarQuotaTest, AMonthInBerlinEndsAtItsLocalMidnightToTheMicrosecond) {
  const Limit month = Calendar(CalendarUnit::kMonth, "Europe/Berlin", 3);
  FixedWindowState s;
  // The last microsecond of March, local time: three admitted, the fourth waits one microsecond.
  for (int i = 0; i < 3; ++i) {
    const Decision d = Decide(month, s, At(kBerlinApril - 1), 1);
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(d.reset_after, Micros{1});
  }
  Decision d = Decide(month, s, At(kBerlinApril - 1), 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, Micros{1});
  // April: a fresh window of 30 days of which one hour is summer time's.
  d = Decide(month, s, At(kBerlinApril), 1);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 2);
  EXPECT_EQ(d.reset_after, Micros{kBerlinMay - kBerlinApril});
  EXPECT_EQ(kBerlinMay - kBerlinApril, 30 * 24 * kHour);
  // A fixed period of 30 days from the epoch would have ended elsewhere: the calendar decides.
  EXPECT_NE((kBerlinApril / (30 * 24 * kHour) + 1) * 30 * 24 * kHour, kBerlinMay);
}

TEST(CalendarQuotaTest, ADayWithTheSpringChangeLastsTwentyThreeHours) {
  const Limit day = Calendar(CalendarUnit::kDay, "Europe/Berlin", 1);
  FixedWindowState s;
  Decision d = Decide(day, s, At(kBerlinMarch31), 1);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.reset_after, Micros{23 * kHour});
  d = Decide(day, s, At(kBerlinMarch31 + 23 * kHour - 1), 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, Micros{1});
  EXPECT_TRUE(Decide(day, s, At(kBerlinMarch31 + 23 * kHour), 1).allowed);
}

TEST(CalendarQuotaTest, AWindowFromBeforeIsForgottenAndOneAheadIsKept) {
  const Limit month = Calendar(CalendarUnit::kMonth, "Europe/Berlin", 2);
  FixedWindowState s;
  EXPECT_TRUE(Decide(month, s, At(kBerlinMarch), 2).allowed);
  // Another host's clock in April wrote last; a caller still in March is decided in April.
  EXPECT_EQ(Decide(month, s, At(kBerlinApril + 5), 0).remaining, 2);
  FixedWindowState ahead{.last = kBerlinApril + 5, .count = 2};
  const Decision d = Decide(month, ahead, At(kBerlinApril - 10), 1);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, Micros{kBerlinMay - kBerlinApril - 5});
}

TEST(CalendarQuotaTest, AGiveBackReachesItsOwnWindowOnly) {
  const Limit month = Calendar(CalendarUnit::kMonth, "Europe/Berlin", 5);
  AnyState s = FixedWindowState{};
  auto take = [&](int64_t at, int64_t units) {
    EXPECT_TRUE(Decide(month, std::get<FixedWindowState>(s), At(at), units).allowed);
    return ChargeOf(month, s, At(at), units);
  };
  auto remaining = [&](int64_t at) {
    return Decide(month, std::get<FixedWindowState>(s), At(at), 0).remaining;
  };
  // In March it comes back.
  Charge march = take(kBerlinApril - kHour, 3);
  GiveBack(month, s, At(kBerlinApril - 1), march);
  EXPECT_EQ(remaining(kBerlinApril - 1), 5);
  // Charged again in March, given back in April: April's count is not March's to lower.
  march = take(kBerlinApril - kHour, 3);
  take(kBerlinApril, 4);
  GiveBack(month, s, At(kBerlinApril + 1), march);
  EXPECT_EQ(remaining(kBerlinApril + 1), 1);
  // The horizon of a March charge is April's first instant.
  EXPECT_EQ(GiveBackHorizon(month, march), At(kBerlinApril));
}

TEST(CalendarQuotaTest, ASettleChargesPastTheLimitWithinTheWindow) {
  const Limit day = Calendar(CalendarUnit::kDay, "Europe/Berlin", 10);
  AnyState s = FixedWindowState{};
  ASSERT_TRUE(Decide(day, std::get<FixedWindowState>(s), At(kBerlinMarch31), 8).allowed);
  const Charge charge = ChargeOf(day, s, At(kBerlinMarch31), 8);
  const Settled settled =
      Settle(day, s, At(kBerlinMarch31 + kHour), {.charge = charge, .units = 15, .max_debt = 3});
  EXPECT_EQ(settled.charged, 5);  // To 13 = N + D.
  EXPECT_EQ(settled.after.remaining, 0);
  EXPECT_EQ(settled.after.reset_after, Micros{22 * kHour});
}

TEST(CalendarQuotaTest, CreateRefusesWhatIsNotACalendarQuotaSayingWhy) {
  absl::StatusOr<Limit> gcra =
      Limit::Create({.algorithm = Algorithm::kGcra, .limit = 10, .calendar = sluice::Calendar{}});
  ASSERT_FALSE(gcra.ok());
  EXPECT_THAT(gcra.status().message(), HasSubstr("fixed_window"));
  absl::StatusOr<Limit> with_period = Limit::Create(
      {.limit = 10, .period = 24h, .calendar = sluice::Calendar{CalendarUnit::kDay, "UTC"}});
  ASSERT_FALSE(with_period.ok());
  EXPECT_THAT(with_period.status().message(), HasSubstr("give no period"));
  absl::StatusOr<Limit> unknown = Limit::Create(
      {.limit = 10, .calendar = sluice::Calendar{CalendarUnit::kDay, "Europe/Berln"}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown time zone 'Europe/Berln'"));
  absl::StatusOr<Limit> path = Limit::Create(
      {.limit = 10, .calendar = sluice::Calendar{CalendarUnit::kDay, "../../etc/passwd"}});
  ASSERT_FALSE(path.ok());
}

// A name Abseil would load under another (this host's "localtime"), or one that is no file
// of the system's tzdata, is refused: it could not be read back from a snapshot or receipt.
TEST(CalendarQuotaTest, AZoneIsAFileOfTzdataLoadedUnderItsOwnName) {
  for (const char* name : {"localtime", "UTC0", "Nowhere/Atlantis", "posixrules/.."}) {
    EXPECT_FALSE(internal::LoadCalendarZone(name).ok()) << name;
  }
  for (const char* name : {"UTC", "Etc/UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires"}) {
    const absl::StatusOr<absl::TimeZone> zone = internal::LoadCalendarZone(name);
    ASSERT_TRUE(zone.ok()) << name << ": " << zone.status();
    EXPECT_EQ(zone->name(), name);
  }
}

// Quotas that differ only by their zone are different limits, and hash apart.
TEST(CalendarQuotaTest, QuotasInTwoZonesHashApart) {
  const Limit berlin = Calendar(CalendarUnit::kDay, "Europe/Berlin", 5);
  const Limit paris = Calendar(CalendarUnit::kDay, "Europe/Paris", 5);
  EXPECT_NE(berlin, paris);
  EXPECT_NE(absl::Hash<Limit>{}(berlin), absl::Hash<Limit>{}(paris));
  EXPECT_EQ(absl::Hash<Limit>{}(berlin),
            absl::Hash<Limit>{}(Calendar(CalendarUnit::kDay, "Europe/Berlin", 5)));
}

// At the ends of time every call returns (a window reaches to it), as the other algorithms do.
TEST(CalendarQuotaTest, TheEndsOfTimeAreOneWindowEach) {
  const Limit month = Calendar(CalendarUnit::kMonth, "Europe/Berlin", 5);
  for (const int64_t t : {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                          internal::kCalendarEndUs, internal::kCalendarFirstUs - 1}) {
    const std::array<int64_t, 4> b = internal::CalendarBounds(month, t);
    EXPECT_LE(b[1], t);
    EXPECT_TRUE(t < b[2] || b[2] == std::numeric_limits<int64_t>::max()) << t;
    EXPECT_LE(b[0], b[1]);
    EXPECT_LE(b[2], b[3]);
    FixedWindowState s;
    EXPECT_TRUE(Decide(month, s, At(t), 1).allowed);
  }
  EXPECT_EQ(GiveBackHorizon(month, {.at = Timestamp::max(), .units = 1}), Timestamp::max());
}

TEST(CalendarQuotaTest, ALimitKnowsItsCalendarAndIsRemadeFromItsSpec) {
  const Limit berlin = Calendar(CalendarUnit::kMonth, "Europe/Berlin", 10000);
  const Limit utc = Calendar(CalendarUnit::kMonth, "UTC", 10000);
  EXPECT_EQ(berlin.ToString(), "fixed_window 10000/month Europe/Berlin");
  EXPECT_NE(berlin, utc);
  EXPECT_NE(utc, MustLimit({.limit = 10000, .period = CalendarPeriod(CalendarUnit::kMonth)}));
  EXPECT_EQ(MustLimit(berlin.spec()), berlin);
  EXPECT_GE(berlin.period(), Micros{31 * 24 * kHour + kHour});
}

TEST(CalendarQuotaTest, AChangeFromAFixedMonthToACalendarOneKeepsWhatWasUsed) {
  const Limit fixed = MustLimit({.limit = 100, .period = 30 * 24h});
  const Limit calendar = Calendar(CalendarUnit::kMonth, "Europe/Berlin", 100);
  ASSERT_FALSE(SameShape(fixed, calendar));
  FixedWindowState s;
  ASSERT_TRUE(Decide(fixed, s, At(kBerlinApril + kHour), 60).allowed);
  AnyState moved = ConvertState(fixed, s, calendar, At(kBerlinApril + 2 * kHour), 0);
  const Decision d =
      Decide(calendar, std::get<FixedWindowState>(moved), At(kBerlinApril + 2 * kHour), 0);
  EXPECT_EQ(d.remaining, 40);
}

TEST(CalendarQuotaTest, BoundsAroundATimeAreTheWindowsBeforeAtAndAfter) {
  const Limit month = Calendar(CalendarUnit::kMonth, "Europe/Berlin", 1);
  const std::array<int64_t, 4> b = internal::CalendarBounds(month, kBerlinMarch + 5);
  EXPECT_EQ(b[1], kBerlinMarch);
  EXPECT_EQ(b[2], kBerlinApril);
  EXPECT_EQ(b[3], kBerlinMay);
  EXPECT_EQ(b[0], 1706742000 * kSecond);  // February, from 2024-01-31T23:00Z.
  EXPECT_EQ(internal::CalendarWindowsBetween(month, kBerlinMarch, kBerlinMay), 2);
  EXPECT_EQ(internal::CalendarWindowsBetween(month, kBerlinMarch, kBerlinMay - 1), 1);
}

}  // namespace
}  // namespace sluice
