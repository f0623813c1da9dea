#include "src/core/calendar.h"

#include <sys/stat.h>

#include <array>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

#include "absl/time/civil_time.h"
#include "fmt/format.h"

#include "src/core/integers.h"

namespace sluice::internal {

constexpr std::array<std::string_view, 4> kCalendarUnitNames = {"day", "week", "month", "year"};

namespace {

// The first instant whose local date is `day` or later.
int64_t StartOf(absl::CivilDay day, const absl::TimeZone& zone) {
  const absl::TimeZone::TimeInfo info = zone.At(absl::CivilSecond(day));
  // SKIPPED: midnight falls in a gap, and the day begins where the gap ends. REPEATED: the
  // first of the two midnights. UNIQUE: pre is the instant.
  return absl::ToUnixMicros(info.kind == absl::TimeZone::TimeInfo::SKIPPED ? info.trans : info.pre);
}

// The first day of the window of `unit` that holds `day`, and of the window after it.
absl::CivilDay FirstDay(CalendarUnit unit, absl::CivilDay day) {
  switch (unit) {
    case CalendarUnit::kDay:
      return day;
    case CalendarUnit::kWeek:
      return absl::PrevWeekday(day + 1, absl::Weekday::monday);  // Monday on or before it.
    case CalendarUnit::kMonth:
      return absl::CivilDay(absl::CivilMonth(day));
    case CalendarUnit::kYear:
      return absl::CivilDay(absl::CivilYear(day));
  }
  return day;
}
absl::CivilDay NextFirstDay(CalendarUnit unit, absl::CivilDay first) {
  switch (unit) {
    case CalendarUnit::kDay:
      return first + 1;
    case CalendarUnit::kWeek:
      return first + 7;
    case CalendarUnit::kMonth:
      return absl::CivilDay(absl::CivilMonth(first) + 1);
    case CalendarUnit::kYear:
      return absl::CivilDay(absl::CivilYear(first) + 1);
  }
  return first + 1;
}

bool IsZoneName(std::string_view name) {
  if (name.empty() || name.size() > 64 || name.front() == '/' ||
      name.find("..") != std::string_view::npos) {
    return false;
  }
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '/' || c == '_' || c == '+' || c == '-';
    if (!ok) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<absl::TimeZone> LoadCalendarZone(std::string_view name) {
  if (name == "UTC") {
    return absl::UTCTimeZone();
  }
  // Abseil remembers every name it is asked for, found or not: only a file of the system's
  // tzdata is asked for, so that a caller's stream of made-up names cannot grow that memory.
  const char* const tzdir = std::getenv("TZDIR");
  const std::string path = fmt::format("{}/{}", tzdir != nullptr ? tzdir : "/usr/share/zoneinfo",
                                       IsZoneName(name) ? name : "");
  struct stat file {};
  absl::TimeZone zone;
  // A name Abseil loads under another (an alias such as "localtime", which is this host's
  // zone and loads as "/etc/localtime") would not read back from a snapshot or a receipt.
  if (!IsZoneName(name) || stat(path.c_str(), &file) != 0 || !S_ISREG(file.st_mode) ||
      !absl::LoadTimeZone(std::string(name), &zone) || zone.name() != name) {
    return absl::InvalidArgumentError(fmt::format(
        "unknown time zone '{}': give an IANA name such as Europe/Berlin (the system's tzdata, "
        "/usr/share/zoneinfo)",
        name.substr(0, 64)));
  }
  return zone;
}

CalendarWindow WindowAt(CalendarUnit unit, const absl::TimeZone& zone, int64_t t) {
  // Past the years the calendar is reckoned for, one window each way (no caller's time is
  // there: the stores decide within 1970 to 2200), rather than steps that saturate.
  if (t < kCalendarFirstUs) {
    return {std::numeric_limits<int64_t>::min(), kCalendarFirstUs};
  }
  if (t >= kCalendarEndUs) {
    return {kCalendarEndUs, std::numeric_limits<int64_t>::max()};
  }
  absl::CivilDay first = FirstDay(unit, absl::ToCivilDay(absl::FromUnixMicros(t), zone));
  CalendarWindow w{StartOf(first, zone), StartOf(NextFirstDay(unit, first), zone)};
  // t's local date is in [first, next), so these loops run only where an offset change moves
  // the local date back across a window's first midnight: a step each way puts it right.
  while (t < w.start) {
    first = FirstDay(unit, first - 1);
    w = {StartOf(first, zone), w.start};
  }
  while (t >= w.end) {
    first = NextFirstDay(unit, first);
    w = {w.end, StartOf(NextFirstDay(unit, first), zone)};
  }
  return w;
}

WindowSpan FixedWindowAt(const Limit& limit, int64_t t) {
  if (limit.calendar()) {
    const CalendarWindow w = CalendarWindowOf(limit, t);
    return {w.start, w.end};
  }
  const Int128 p = limit.period().count();
  const Int128 start = FloorDiv(t, p) * p;
  return {start, start + p};
}

namespace {

// The four bounds around the window of `unit` in `zone` that holds t (CalendarBounds).
std::array<int64_t, 4> BoundsAt(CalendarUnit unit, const absl::TimeZone& zone, int64_t t) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const CalendarWindow w = WindowAt(unit, zone, t);
  return {w.start == kMin ? kMin : WindowAt(unit, zone, w.start - 1).start, w.start, w.end,
          w.end == kMax ? kMax : WindowAt(unit, zone, w.end).end};
}

// A thread's windows of the calendar limits it decides, with their neighbours: a zone lookup
// costs about ten decisions, and a window lasts a day or more. Four: a request's few limits.
const std::array<int64_t, 4>& CachedBounds(const Limit& limit, int64_t t) {
  struct Cached {
    CalendarUnit unit = CalendarUnit::kDay;
    absl::TimeZone zone;
    std::array<int64_t, 4> bounds{};  // Empty (bounds[1] == bounds[2]) until filled.
  };
  thread_local std::array<Cached, 4> cache;
  thread_local size_t next = 0;
  const CalendarUnit unit = *limit.calendar();
  for (const Cached& c : cache) {
    if (c.unit == unit && c.bounds[1] <= t && t < c.bounds[2] && c.zone == limit.time_zone()) {
      return c.bounds;
    }
  }
  Cached& slot = cache[next];
  next = (next + 1) % cache.size();
  slot = {unit, limit.time_zone(), BoundsAt(unit, limit.time_zone(), t)};
  return slot.bounds;
}

}  // namespace

CalendarWindow CalendarWindowOf(const Limit& limit, int64_t t) {
  const std::array<int64_t, 4>& b = CachedBounds(limit, t);
  return {b[1], b[2]};
}

int64_t CalendarWindowsBetween(const Limit& limit, int64_t t, int64_t u) {
  if (u <= t) {
    return 0;
  }
  const absl::TimeZone& zone = limit.time_zone();
  // Each window's first local date, as a count of its unit since 1970.
  auto index = [&](int64_t at) -> int64_t {
    const absl::CivilDay first =
        absl::ToCivilDay(absl::FromUnixMicros(CalendarWindowOf(limit, at).start), zone);
    switch (*limit.calendar()) {
      case CalendarUnit::kDay:
        return first - absl::CivilDay(1970, 1, 1);
      case CalendarUnit::kWeek:
        return static_cast<int64_t>(
            FloorDiv(first - absl::CivilDay(1969, 12, 29), 7));  // From a Monday.
      case CalendarUnit::kMonth:
        return absl::CivilMonth(first) - absl::CivilMonth(1970, 1);
      case CalendarUnit::kYear:
        return absl::CivilYear(first) - absl::CivilYear(1970);
    }
    return 0;
  };
  return std::max<int64_t>(0, index(u) - index(t));
}

std::array<int64_t, 4> CalendarBounds(const Limit& limit, int64_t t) {
  return CachedBounds(limit, t);
}

}  // namespace sluice::internal

namespace sluice {

std::string_view CalendarUnitName(CalendarUnit unit) {
  return internal::kCalendarUnitNames[static_cast<size_t>(unit)];
}

std::string_view CalendarPeriodName(CalendarUnit unit) {
  constexpr std::array<std::string_view, 4> kPeriods = {"1d", "1w", "1mo", "1y"};
  return kPeriods[static_cast<size_t>(unit)];
}

std::optional<CalendarUnit> ParseCalendarPeriod(std::string_view period) {
  for (const CalendarUnit unit :
       {CalendarUnit::kDay, CalendarUnit::kWeek, CalendarUnit::kMonth, CalendarUnit::kYear}) {
    if (CalendarPeriodName(unit) == period) {
      return unit;
    }
  }
  return std::nullopt;
}

Micros CalendarNominalPeriod(CalendarUnit unit) {
  constexpr int64_t kDayUs = 86'400'000'000;
  constexpr std::array<int64_t, 4> kDays = {1, 7, 30, 365};
  return Micros{kDays[static_cast<size_t>(unit)] * kDayUs};
}

std::optional<CalendarUnit> ParseCalendarUnit(std::string_view name) {
  for (size_t i = 0; i < internal::kCalendarUnitNames.size(); ++i) {
    if (name == internal::kCalendarUnitNames[i]) {
      return static_cast<CalendarUnit>(i);
    }
  }
  return std::nullopt;
}

}  // namespace sluice
