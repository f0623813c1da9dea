#pragma once

// Calendar windows, for a calendar quota (Limit::calendar): the day, ISO week, month or year
// of a time zone that holds an instant, as [start, end) in microseconds since the epoch.
//
// A window starts at the first instant whose local date is its first day: local midnight, or,
// where a change of offset skips midnight (America/Sao_Paulo until 2019), the first instant
// after the gap; a midnight that happens twice counts from its first. So a day lasts 23 or 25
// hours across a DST change (23.5 or 24.5 on Lord Howe Island), a week starts on Monday, a
// month on its 1st, a year on January 1, each with whatever length the zone's rules give it.
//
// Zones come from the system's tzdata (Debian's `tzdata` package, /usr/share/zoneinfo),
// through Abseil's time library; UTC needs none. Thread-safe: absl::TimeZone is a value.

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "sluice/algorithms.h"
#include "sluice/limit.h"

namespace sluice::internal {

using ::sluice::CalendarUnit;

using ::sluice::CalendarUnitName;
using ::sluice::ParseCalendarUnit;

// The IANA zone `name` ("Europe/Berlin"; "UTC" always there). InvalidArgument naming it when
// the system's tzdata has no such zone, or when the name is not one (empty, over 64 bytes,
// with "..", a leading '/' or bytes other than letters, digits and "/_+-"): a name is a path
// under /usr/share/zoneinfo (or $TZDIR), and no caller's text may name another file; also an
// alias that loads under another name ("localtime").
absl::StatusOr<absl::TimeZone> LoadCalendarZone(std::string_view name);

// The years the calendar is reckoned for, 1000 to 9999 (UTC): a time before or after them
// lies in one window that reaches the end of time.
inline constexpr int64_t kCalendarFirstUs = -30'610'224'000'000'000;  // 1000-01-01.
inline constexpr int64_t kCalendarEndUs = 253'402'300'800'000'000;    // 10000-01-01.

struct CalendarWindow {
  int64_t start = 0;  // us since the epoch: the first instant of the window.
  int64_t end = 0;    // The first instant of the next one.
  friend bool operator==(const CalendarWindow&, const CalendarWindow&) = default;
};

// The window of `unit` in `zone` that holds `t` (us since the epoch): start <= t < end.
CalendarWindow WindowAt(CalendarUnit unit, const absl::TimeZone& zone, int64_t t);

// The window of a fixed_window `limit` that holds `t`: [floor(t/P)*P, that + P), or the
// calendar's (CalendarWindowOf). In 128 bits: at the far end of time a fixed window ends past
// what 64 bits hold.
struct WindowSpan {
  Int128 start;
  Int128 end;
};
WindowSpan FixedWindowAt(const Limit& limit, int64_t t);

// The window of a calendar limit (limit.calendar() set) that holds `t`: WindowAt, answered
// from a small cache per thread (the window and its neighbours, as CalendarBounds needs them)
// while t stays in a window asked for before.
CalendarWindow CalendarWindowOf(const Limit& limit, int64_t t);

// How many windows of a calendar limit start in (t, u]: exact, but for a zone that skipped
// a whole local date (Pacific/Apia on 2011-12-30), where a window that never was is counted.
int64_t CalendarWindowsBetween(const Limit& limit, int64_t t, int64_t u);

// The ends of four windows around `t`'s: the previous one's start, t's start, t's end, the
// next one's end. What a store that decides on its own clock (Redis's TIME) is sent, to find
// the window of a time near t.
std::array<int64_t, 4> CalendarBounds(const Limit& limit, int64_t t);

}  // namespace sluice::internal
