#include "server/service/envoy_headers.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>

#include "fmt/format.h"

#include "sluice/duration.h"

namespace sluice::server {

const DescriptorResult* EnvoyClosest(const std::vector<DescriptorResult>& results) {
  const DescriptorResult* closest = nullptr;
  auto decisive = [](const DescriptorResult& r) { return r.over_limit && !r.quota_mode; };
  for (const DescriptorResult& result : results) {
    if (!result.closest || result.unlimited) {
      continue;
    }
    const uint32_t fewest =
        closest == nullptr ? std::numeric_limits<uint32_t>::max() : closest->limit_remaining;
    if (decisive(result) ||
        ((closest == nullptr || !decisive(*closest)) && result.limit_remaining < fewest)) {
      closest = &result;
    }
  }
  return closest;
}

void AddEnvoyHeaders(const std::vector<DescriptorResult>& results, const HeaderOptions& options,
                     Timestamp now, AddHeader add) {
  const DescriptorResult* closest = EnvoyClosest(results);
  if (closest == nullptr) {
    return;
  }
  if (options.format == HeaderFormat::kDraft06) {
    // Every answer the same as theirs (bench/peers/compare.sh).
    add(options.limit_name, fmt::format_int(std::min<int64_t>(closest->closest->nominal,
                                                              std::numeric_limits<uint32_t>::max()))
                                .c_str());
    add(options.remaining_name, fmt::format_int(closest->limit_remaining).c_str());
    add(options.reset_name, fmt::format_int(CeilSeconds(closest->until_reset)).c_str());
    return;
  }
  // Every descriptor's limit for RateLimit-Policy, with Envoy's figures (its remaining and
  // until_reset) for the closest; told as the HTTP API tells a decision.
  std::vector<HeaderQuota> quotas;
  size_t at = SIZE_MAX;
  for (const DescriptorResult& result : results) {
    if (!result.closest || result.unlimited) {
      continue;
    }
    std::optional<HeaderQuota> quota = QuotaOf(*result.closest);
    if (!quota) {
      continue;
    }
    quota->remaining =
        std::min<int64_t>(result.over_limit ? 0 : result.limit_remaining, quota->quota);
    quota->reset = result.until_reset;
    quota->denies = result.over_limit;
    quota->never = result.over_limit && result.closest->decision.never_allowed();
    if (&result == closest) {
      at = quotas.size();
    }
    quotas.push_back(*quota);
  }
  if (at >= quotas.size()) {  // The closest is one the headers leave out (shadow mode).
    at = ClosestQuota(quotas);
  }
  AddRateLimitHeaders(quotas, at, options, now, add);
}

}  // namespace sluice::server
