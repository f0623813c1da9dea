#pragma once

// Random traces of calendar quotas near the edges of real windows (changes to and from
// summer time, a half-hour zone's new year, Lord Howe Island's half-hour change), for tests
// that compare a store with the memory store figure for figure. Each trace stays within six
// hours of one edge, so that a step back in time never reaches past the window before: a
// store that is sent a window's bounds (Redis) and the memory store then decide the same.

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/limit.h"
#include "tests/testing/random.h"
#include "tests/testing/util.h"

namespace sluice::testing {

struct CalendarStep {
  int64_t time;  // us since the epoch.
  int key;       // 0..2
  int64_t cost;  // 0..3
};

struct CalendarTrace {
  Limit limit;
  std::vector<CalendarStep> steps;
};

// Window edges (Unix seconds, worked out with Python's zoneinfo) and a quota that has them.
inline CalendarTrace RandomCalendarTrace(Random& rnd, int steps) {
  struct Edge {
    CalendarUnit unit;
    const char* zone;
    int64_t at_s;
  };
  static const Edge kEdges[] = {
      {CalendarUnit::kDay, "Europe/Berlin", 1711839600},        // 2024-03-31, 23 h
      {CalendarUnit::kDay, "Europe/Berlin", 1730070000},        // after 2024-10-27, 25 h
      {CalendarUnit::kDay, "America/New_York", 1730696400},     // after 2024-11-03, 25 h
      {CalendarUnit::kWeek, "America/New_York", 1730696400},    // Monday 2024-11-04
      {CalendarUnit::kMonth, "Europe/Berlin", 1711922400},      // April 2024
      {CalendarUnit::kYear, "Asia/Kolkata", 1735669800},        // 2025, at +05:30
      {CalendarUnit::kYear, "UTC", 1735689600},                 // 2025
      {CalendarUnit::kDay, "Australia/Lord_Howe", 1712496600},  // after a 24.5 h day
  };
  const Edge& e = kEdges[rnd.Between(0, std::size(kEdges) - 1)];
  constexpr int64_t kSecond = 1'000'000;
  CalendarTrace trace{MustLimit({.limit = rnd.Between(1, 6), .calendar = Calendar{e.unit, e.zone}}),
                      {}};
  for (int i = 0; i < steps; ++i) {
    const int64_t offset =
        rnd.OneIn(4) ? rnd.Between(-2, 1) : rnd.Between(-3 * 3'600, 3 * 3'600) * kSecond;
    trace.steps.push_back(
        {e.at_s * kSecond + offset, static_cast<int>(rnd.Between(0, 2)), rnd.Between(0, 3)});
  }
  return trace;
}

}  // namespace sluice::testing
