#include "server/ui/burst_picture.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "fmt/format.h"

#include "tools/simulate.h"
#include "tools/svg.h"

namespace sluice::server {

absl::StatusOr<std::string> BurstPicture(const RuleSet& rules, std::string_view rule_path,
                                         int64_t burst, Timestamp start) {
  if (burst < 1 || burst > kMaxBurst) {
    return absl::InvalidArgumentError(fmt::format("burst: {} is outside 1..{}", burst, kMaxBurst));
  }
  const Rule* rule = FindRule(rules, rule_path);
  if (rule == nullptr) {
    return absl::NotFoundError(fmt::format("no rule has the path '{}'", rule_path));
  }
  std::vector<tools::Lane> lanes;
  Micros shortest = Micros::max();  // Between admissions, at the fastest limit's rate.
  Micros longest{0};                // The longest period.
  for (const RuleLimit& rule_limit : rule->limits) {
    if (rule->unlimited || rule_limit.unlimited || !rule_limit.limit) {
      continue;
    }
    if (lanes.size() == kMaxLanes) {
      break;
    }
    const Limit& limit = *rule_limit.limit;
    lanes.push_back(tools::Lane{.limit = limit});
    shortest = std::min(shortest, std::max(Micros{2}, limit.period() / limit.limit()));
    longest = std::max(longest, limit.period());
  }
  if (lanes.empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "rule '{}' has no limit to draw (unlimited, or 0 per unit: every request is answered "
        "the same)",
        rule_path));
  }
  const int64_t start_us = start.time_since_epoch().count();
  std::string trace = "time_us,key,cost\n";
  for (int64_t i = 0; i < burst; ++i) {
    fmt::format_to(std::back_inserter(trace), "{},k,1\n", start_us);
  }
  const int64_t step = (shortest / 2).count();
  const int64_t horizon = std::min<int64_t>(2 * longest.count(), kMaxSteady * step);
  for (int64_t t = step; t <= horizon; t += step) {
    fmt::format_to(std::back_inserter(trace), "{},k,1\n", start_us + t);
  }
  std::istringstream in(trace);
  std::ostringstream csv;  // The spec's CSV, not shown.
  if (absl::Status s = tools::Simulate(in, csv, lanes, tools::KeepRows::kYes); !s.ok()) {
    return s;  // Cannot happen: the trace is ours.
  }
  return tools::RenderSvg(lanes);
}

}  // namespace sluice::server
