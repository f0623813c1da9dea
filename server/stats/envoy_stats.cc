#include "server/stats/envoy_stats.h"

#include <array>
#include <atomic>
#include <map>
#include <utility>

namespace sluice::server {
namespace {

// The length of the digits at `text[i]` that end an IPv4-shaped group: 1 to 3 digits followed
// by a dot (`dot`), or by anything (the last group, greedy as their regexp). 0 when none.
size_t Group(std::string_view text, size_t i, bool dot) {
  size_t digits = 0;
  while (i + digits < text.size() && text[i + digits] >= '0' && text[i + digits] <= '9') {
    ++digits;
  }
  if (!dot) {
    return std::min<size_t>(digits, 3);
  }
  // \d{1,3}\. : a longer run of digits has a digit, not a dot, after any 1 to 3 of them.
  const bool ok = digits >= 1 && digits <= 3 && i + digits < text.size() && text[i + digits] == '.';
  return ok ? digits + 1 : 0;
}

// The length of the IPv4-shaped text at `text[i]`, or 0.
size_t AddressAt(std::string_view text, size_t i) {
  size_t at = i;
  for (int group = 0; group < 4; ++group) {
    const size_t length = Group(text, at, /*dot=*/group < 3);
    if (length == 0) {
      return 0;
    }
    at += length;
  }
  return at - i;
}

// The per-rule statistics: each a member of RuleCounters and its name's last part.
struct RuleStat {
  const char* suffix;
  std::atomic<uint64_t> RuleCounters::*member;
};
constexpr std::array<RuleStat, 5> kRuleStats = {{
    {".total_hits", &RuleCounters::total_hits},
    {".over_limit", &RuleCounters::over_limit_hits},
    {".near_limit", &RuleCounters::near_limit_hits},
    {".within_limit", &RuleCounters::within_limit_hits},
    {".shadow_mode", &RuleCounters::shadow_mode_hits},
}};

}  // namespace

std::string SanitizeStatName(std::string_view name) {
  std::string out(name);
  for (char& c : out) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == ':' || c == '|' || byte < 0x20 || byte == 0x7f) {
      c = '_';
    }
  }
  for (size_t i = 0; i < out.size();) {
    const size_t length = AddressAt(out, i);
    if (length == 0) {
      ++i;
      continue;
    }
    for (size_t j = i; j < i + length; ++j) {
      if (out[j] == '.') {
        out[j] = '_';
      }
    }
    i += length;
  }
  return out;
}

std::vector<Stat> EnvoyStats(const Metrics& metrics, const EnvoyStatsOptions& options) {
  // By name: two counters whose names sanitize alike add up.
  std::map<std::string, uint64_t, std::less<>> counters;
  for (const auto& [name, rule] : metrics.rules().All()) {
    const std::string prefix = "ratelimit.service.rate_limit." + SanitizeStatName(name);
    for (const RuleStat& stat : kRuleStats) {
      counters[prefix + stat.suffix] += (rule->*stat.member).load(std::memory_order_relaxed);
    }
  }
  counters["ratelimit.service.config_load_success"] =
      metrics.reloads() + (options.loaded_at_start ? 1 : 0);
  counters["ratelimit.service.config_load_error"] = metrics.reload_failures();
  counters["ratelimit.service.call.should_rate_limit.redis_error"] = metrics.store_errors();
  counters["ratelimit.service.global_shadow_mode"] = metrics.global_shadow_mode();
  counters["ratelimit.service.call.should_rate_limit.service_error"] = metrics.service_errors();
  for (const auto& [domain, count] : metrics.DomainsNotFound()) {
    counters["ratelimit.service.rate_limit." + SanitizeStatName(domain) + ".domain_not_found"] +=
        count;
  }
  const auto calls = metrics.grpc_calls().Counts();
  uint64_t total = 0;
  Stat response_time{.name = "ratelimit_server.ShouldRateLimit.response_time",
                     .kind = Stat::Kind::kTimer};
  for (size_t i = 0; i < calls.size(); ++i) {
    total += calls[i];
    // The +Inf bucket's calls are told as twice the last bound: longer than any other.
    const int64_t bound_us = i < LatencyHistogram::kBucketsUs.size()
                                 ? LatencyHistogram::kBucketsUs[i]
                                 : 2 * LatencyHistogram::kBucketsUs.back();
    response_time.samples.emplace_back(static_cast<double>(bound_us) / 1000, calls[i]);
  }
  counters["ratelimit_server.ShouldRateLimit.total_requests"] = total;

  std::vector<Stat> stats;
  stats.reserve(counters.size() + 1);
  for (auto& [name, value] : counters) {
    stats.push_back({.name = name, .value = value, .kind = Stat::Kind::kCounter});
  }
  stats.push_back(std::move(response_time));
  if (options.redis_connections) {
    stats.push_back({.name = "ratelimit.redis_pool.cx_active",
                     .value = *options.redis_connections,
                     .kind = Stat::Kind::kGauge});
  }
  return stats;
}

}  // namespace sluice::server
