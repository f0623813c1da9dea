// Envoy's units: their names (one table for both directions) and their periods.

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <string_view>
#include <utility>

#include "server/rules/rules.h"

namespace sluice::server {
namespace {

constexpr std::array<std::pair<Unit, std::string_view>, 7> kUnits{{
    {Unit::kSecond, "SECOND"},
    {Unit::kMinute, "MINUTE"},
    {Unit::kHour, "HOUR"},
    {Unit::kDay, "DAY"},
    {Unit::kMonth, "MONTH"},
    {Unit::kYear, "YEAR"},
    {Unit::kWeek, "WEEK"},
}};

}  // namespace

std::string_view UnitName(Unit unit) {
  for (const auto& [u, name] : kUnits) {
    if (u == unit) {
      return name;
    }
  }
  return "UNKNOWN";
}

std::optional<Unit> ParseUnit(std::string_view name) {
  for (const auto& [unit, spelled] : kUnits) {
    if (std::equal(name.begin(), name.end(), spelled.begin(), spelled.end(), [](char a, char b) {
          return std::toupper(static_cast<unsigned char>(a)) == b;
        })) {
      return unit;
    }
  }
  return std::nullopt;
}

Micros UnitPeriod(Unit unit) {
  constexpr int64_t kSecond = 1'000'000;
  constexpr int64_t kDay = 86'400 * kSecond;
  switch (unit) {
    case Unit::kSecond:
      return Micros{kSecond};
    case Unit::kMinute:
      return Micros{60 * kSecond};
    case Unit::kHour:
      return Micros{3'600 * kSecond};
    case Unit::kDay:
      return Micros{kDay};
    case Unit::kWeek:
      return Micros{7 * kDay};
    case Unit::kMonth:
      return Micros{30 * kDay};
    case Unit::kYear:
      return Micros{365 * kDay};
    case Unit::kUnknown:
      break;
  }
  return Micros{0};
}

Unit UnitOfPeriod(Micros period) {
  for (const auto& [unit, name] : kUnits) {
    if (UnitPeriod(unit) == period) {
      return unit;
    }
  }
  return Unit::kUnknown;
}

}  // namespace sluice::server
