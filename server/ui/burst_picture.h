#pragma once

// The operator's page's "simulate" panel: what a rule's limits do with a burst, drawn as
// `sluice simulate --svg` draws a trace (tools/svg.h), one lane per limit of the rule.
//
// The trace: `burst` requests of one key at `start`, then one request every half of the
// rule's shortest interval between admissions (period / limit: twice its fastest rate) until
// two of its longest periods have passed, or kMaxSteady requests, whichever comes first. Each
// costs 1. The limits start with nothing counted: the picture shows the rule, not a key's
// state.

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

#include "server/rules/rules.h"
#include "sluice/clock.h"

namespace sluice::server {

inline constexpr int64_t kMaxBurst = 10'000;
inline constexpr int64_t kMaxSteady = 4'000;
// A rule's first kMaxLanes limits are drawn (each lane keeps every row of the trace: at most
// kMaxLanes * (kMaxBurst + kMaxSteady) decisions, whatever the rules file holds).
inline constexpr size_t kMaxLanes = 8;

// The SVG document. NotFound naming the path when no rule has it; InvalidArgument when
// `burst` is outside 1..kMaxBurst, or the rule has no limit to draw (unlimited, or 0 per
// unit: every request the same answer).
absl::StatusOr<std::string> BurstPicture(const RuleSet& rules, std::string_view rule_path,
                                         int64_t burst, Timestamp start);

}  // namespace sluice::server
