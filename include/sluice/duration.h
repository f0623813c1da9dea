#pragma once

// Durations as people write them in flags and config files: an integer and a unit, "100us",
// "250ms", "1s", "1m", "1h", "1d" (and "0" for none).

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

#include "sluice/clock.h"

namespace sluice {

// Parses "<digits><unit>" with unit us, ms, s, m, h or d. Errors (InvalidArgument) name the
// text: an empty string, a missing or unknown unit, a negative or overflowing value.
absl::StatusOr<Micros> ParseDuration(std::string_view text);

// The shortest exact spelling of `d` that ParseDuration reads back: 90000000us -> "90s",
// 1500us -> "1500us".
std::string FormatDuration(Micros d);
// Appends FormatDuration(d) to `out`, without a string of its own.
void AppendDuration(std::string& out, Micros d);

// `d` in whole seconds, rounded up, and 0 for 0 or less: what HTTP's Retry-After and the
// RateLimit headers carry (a client told 0 would come back before the limit lets it).
int64_t CeilSeconds(Micros d);

}  // namespace sluice
