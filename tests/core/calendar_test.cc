// Calendar windows (src/core/calendar.h) in real zones: DST days of 23 and 25 hours in
// Europe/Berlin and America/New_York, Lord Howe Island's half-hour change, Asia/Kolkata's
// half-hour offset, a midnight that a change skips (America/Sao_Paulo, 2018), month ends (29
// days in 2024, 28 in 2100) and ISO weeks across a new year. The expected instants were worked
// out independently with Python's zoneinfo (a bisection over UTC seconds for the first instant
// of each local date), not with Abseil. Both edges are checked: the first microsecond of a
// window and the last.

#include "src/core/calendar.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::internal {
namespace {

constexpr int64_t kSecond = 1'000'000;

struct Case {
  std::string zone;
  CalendarUnit unit;
  int64_t start_s;  // Unix seconds.
  int64_t end_s;
};

void ExpectWindow(const Case& c) {
  const absl::StatusOr<absl::TimeZone> zone = LoadCalendarZone(c.zone);
  ASSERT_TRUE(zone.ok()) << zone.status();
  const CalendarWindow want{c.start_s * kSecond, c.end_s * kSecond};
  for (const int64_t t : {want.start, (want.start + want.end) / 2, want.end - 1}) {
    EXPECT_EQ(WindowAt(c.unit, *zone, t), want)
        << c.zone << " " << CalendarUnitName(c.unit) << " at " << t;
  }
  // The instants either side belong to the windows before and after.
  EXPECT_EQ(WindowAt(c.unit, *zone, want.start - 1).end, want.start) << c.zone;
  EXPECT_EQ(WindowAt(c.unit, *zone, want.end).start, want.end) << c.zone;
}

TEST(CalendarTest, DaysOfDstChangesLast23Or25Hours) {
  for (const Case& c : std::vector<Case>{
           {"UTC", CalendarUnit::kDay, 1709164800, 1709251200},                  // 2024-02-29
           {"Europe/Berlin", CalendarUnit::kDay, 1711839600, 1711922400},        // 2024-03-31, 23 h
           {"Europe/Berlin", CalendarUnit::kDay, 1729980000, 1730070000},        // 2024-10-27, 25 h
           {"America/New_York", CalendarUnit::kDay, 1710046800, 1710129600},     // 2024-03-10, 23 h
           {"America/New_York", CalendarUnit::kDay, 1730606400, 1730696400},     // 2024-11-03, 25 h
           {"Asia/Kolkata", CalendarUnit::kDay, 1718389800, 1718476200},         // +05:30
           {"Australia/Lord_Howe", CalendarUnit::kDay, 1712408400, 1712496600},  // 24.5 h
           {"Australia/Lord_Howe", CalendarUnit::kDay, 1728135000, 1728219600},  // 23.5 h
       }) {
    ExpectWindow(c);
  }
}

TEST(CalendarTest, ADayWhoseMidnightIsSkippedStartsWhereTheGapEnds) {
  // America/Sao_Paulo, 2018-11-04: clocks went from 00:00 to 01:00.
  ExpectWindow({"America/Sao_Paulo", CalendarUnit::kDay, 1541214000, 1541300400});  // 11-03
  ExpectWindow({"America/Sao_Paulo", CalendarUnit::kDay, 1541300400, 1541383200});  // 11-04
}

TEST(CalendarTest, MonthsWeeksAndYearsFollowTheCalendar) {
  for (const Case& c : std::vector<Case>{
           {"UTC", CalendarUnit::kMonth, 1706745600, 1709251200},              // 2024-02: 29 days
           {"UTC", CalendarUnit::kMonth, 4105123200, 4107542400},              // 2100-02: 28 days
           {"Europe/Berlin", CalendarUnit::kMonth, 1709247600, 1711922400},    // 2024-03, 743 h
           {"Europe/Berlin", CalendarUnit::kWeek, 1704063600, 1704668400},     // Mon 2024-01-01
           {"America/New_York", CalendarUnit::kYear, 1704085200, 1735707600},  // 2024
       }) {
    ExpectWindow(c);
  }
}

TEST(CalendarTest, AnIsoWeekStartsOnTheMondayBeforeANewYear) {
  // Wednesday 2025-01-01 in UTC is in the week of Monday 2024-12-30.
  const CalendarWindow w = WindowAt(CalendarUnit::kWeek, absl::UTCTimeZone(), 1735689600 * kSecond);
  EXPECT_EQ(w, (CalendarWindow{1735516800 * kSecond, 1736121600 * kSecond}));
}

TEST(CalendarTest, UnitsReadBackTheirNames) {
  for (const CalendarUnit u :
       {CalendarUnit::kDay, CalendarUnit::kWeek, CalendarUnit::kMonth, CalendarUnit::kYear}) {
    EXPECT_EQ(ParseCalendarUnit(CalendarUnitName(u)), u);
  }
  EXPECT_EQ(ParseCalendarUnit("hour"), std::nullopt);
  EXPECT_EQ(ParseCalendarUnit("Day"), std::nullopt);
}

TEST(CalendarTest, AZoneThatIsNotOneIsRefusedNamingIt) {
  for (const std::string& name :
       std::vector<std::string>{"Europe/Berln", "", "../../etc/passwd", "/etc/localtime",
                                "Europe/Berlin\n", std::string(100, 'A'), "Etc/../UTC"}) {
    const absl::StatusOr<absl::TimeZone> zone = LoadCalendarZone(name);
    ASSERT_FALSE(zone.ok()) << name;
    EXPECT_NE(zone.status().message().find("unknown time zone '" + name.substr(0, 64) + "'"),
              std::string::npos)
        << zone.status();
  }
}

}  // namespace
}  // namespace sluice::internal
