#pragma once

// Calendar windows (issue 34's quotas on the calendar; Limit does not use them yet): the day,
// ISO week, month or year of a time zone that holds an instant, as [start, end) in
// microseconds since the epoch.
//
// A window starts at the first instant whose local date is its first day: local midnight, or,
// where a change of offset skips midnight (America/Sao_Paulo until 2019), the first instant
// after the gap; a midnight that happens twice counts from its first. So a day lasts 23 or 25
// hours across a DST change (23.5 or 24.5 on Lord Howe Island), a week starts on Monday, a
// month on its 1st, a year on January 1, each with whatever length the zone's rules give it.
//
// Zones come from the system's tzdata (Debian's `tzdata` package, /usr/share/zoneinfo),
// through Abseil's time library; UTC needs none. Thread-safe: absl::TimeZone is a value.

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace sluice::internal {

enum class CalendarUnit : uint8_t { kDay, kWeek, kMonth, kYear };

// "day", "week", "month", "year".
std::string_view CalendarUnitName(CalendarUnit unit);
std::optional<CalendarUnit> ParseCalendarUnit(std::string_view name);

// The IANA zone `name` ("Europe/Berlin"; "UTC" always there). InvalidArgument naming it when
// the system's tzdata has no such zone, or when the name is not one (empty, over 64 bytes,
// with "..", a leading '/' or bytes other than letters, digits and "/_+-"): a name is a path
// under /usr/share/zoneinfo, and no caller's text may name another file.
absl::StatusOr<absl::TimeZone> LoadCalendarZone(std::string_view name);

struct CalendarWindow {
  int64_t start = 0;  // us since the epoch: the first instant of the window.
  int64_t end = 0;    // The first instant of the next one.
  friend bool operator==(const CalendarWindow&, const CalendarWindow&) = default;
};

// The window of `unit` in `zone` that holds `t` (us since the epoch): start <= t < end.
CalendarWindow WindowAt(CalendarUnit unit, const absl::TimeZone& zone, int64_t t);

}  // namespace sluice::internal
