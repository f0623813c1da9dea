#include "src/core/calendar.h"

#include <array>
#include <string>

#include "absl/time/civil_time.h"
#include "fmt/format.h"

namespace sluice::internal {
namespace {

constexpr std::array<std::string_view, 4> kNames = {"day", "week", "month", "year"};

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

std::string_view CalendarUnitName(CalendarUnit unit) { return kNames[static_cast<size_t>(unit)]; }

std::optional<CalendarUnit> ParseCalendarUnit(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (name == kNames[i]) {
      return static_cast<CalendarUnit>(i);
    }
  }
  return std::nullopt;
}

absl::StatusOr<absl::TimeZone> LoadCalendarZone(std::string_view name) {
  if (name == "UTC") {
    return absl::UTCTimeZone();
  }
  absl::TimeZone zone;
  if (!IsZoneName(name) || !absl::LoadTimeZone(std::string(name), &zone)) {
    return absl::InvalidArgumentError(fmt::format(
        "unknown time zone '{}': give an IANA name such as Europe/Berlin (the system's tzdata, "
        "/usr/share/zoneinfo)",
        name.substr(0, 64)));
  }
  return zone;
}

CalendarWindow WindowAt(CalendarUnit unit, const absl::TimeZone& zone, int64_t t) {
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

}  // namespace sluice::internal
