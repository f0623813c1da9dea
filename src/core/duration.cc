#include "sluice/duration.h"

#include <array>
#include <charconv>
#include <cstdint>
#include <limits>
#include <utility>

#include "fmt/compile.h"
#include "fmt/format.h"

namespace sluice {
namespace {

// Largest unit first, so that FormatDuration picks the shortest exact spelling.
constexpr std::array<std::pair<std::string_view, int64_t>, 6> kUnits{{
    {"d", 86'400'000'000},
    {"h", 3'600'000'000},
    {"m", 60'000'000},
    {"s", 1'000'000},
    {"ms", 1'000},
    {"us", 1},
}};

}  // namespace

absl::StatusOr<Micros> ParseDuration(std::string_view text) {
  const char* const begin = text.data();
  const char* const end = begin + text.size();
  int64_t count = 0;
  const auto [rest, ec] = std::from_chars(begin, end, count);
  if (ec != std::errc() || text.empty() || text.front() == '-' || text.front() == '+') {
    return absl::InvalidArgumentError(fmt::format(
        "invalid duration '{}': expected a non-negative integer and a unit (us, ms, s, m, h, d)",
        text));
  }
  const std::string_view unit(rest, static_cast<size_t>(end - rest));
  if (unit.empty() && count == 0) {
    return Micros{0};
  }
  for (const auto& [name, micros] : kUnits) {
    if (unit == name) {
      if (count > std::numeric_limits<int64_t>::max() / micros) {
        return absl::InvalidArgumentError(fmt::format("duration '{}' is too long", text));
      }
      return Micros{count * micros};
    }
  }
  return absl::InvalidArgumentError(
      fmt::format("invalid duration '{}': unit '{}' is not one of us, ms, s, m, h, d", text, unit));
}

std::string FormatDuration(Micros d) {
  std::string out;
  AppendDuration(out, d);
  return out;
}

void AppendDuration(std::string& out, Micros d) {
  const int64_t us = d.count();
  if (us == 0) {
    out += "0s";
    return;
  }
  for (const auto& [name, micros] : kUnits) {
    if (us % micros == 0) {
      fmt::format_to(std::back_inserter(out), FMT_COMPILE("{}{}"), us / micros, name);
      return;
    }
  }
}

int64_t CeilSeconds(Micros d) {
  constexpr int64_t kMicrosPerSecond = 1'000'000;
  return d.count() <= 0 ? 0 : d.count() / kMicrosPerSecond + (d.count() % kMicrosPerSecond != 0);
}

}  // namespace sluice
