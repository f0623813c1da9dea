#pragma once

// The statistics envoyproxy/ratelimit sends over statsd, by its names, taken from sluiced's
// Metrics: dashboards and alerts written for it read sluiced's unchanged. docs/server.md
// ("Statistics over statsd") lists them and where a name or a count differs from theirs.
//
// Per rule limit (the counter's name, sanitized as theirs, for RULE):
//   ratelimit.service.rate_limit.RULE.{total_hits,over_limit,near_limit,within_limit,
//                                      shadow_mode}
// Per domain no rule knows (Metrics::CountDomainNotFound's names):
//   ratelimit.service.rate_limit.DOMAIN.domain_not_found
// Server-wide:
//   ratelimit.service.config_load_success, ratelimit.service.config_load_error,
//   ratelimit.service.call.should_rate_limit.redis_error, ...service_error,
//   ratelimit.service.global_shadow_mode, the gRPC server's
//   ratelimit_server.ShouldRateLimit.total_requests and the timer .response_time (each call's
//   time as the upper bound of its Metrics::grpc_calls bucket), and with the Redis store the
//   gauge ratelimit.redis_pool.cx_active.
//
// Thread-safe: reads the metrics' atomics and its registry's list under the registry's lock.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/stats/metrics.h"

namespace sluice::server {

// One statistic as a statsd sink sends it.
struct Stat {
  enum class Kind : uint8_t {
    kCounter,  // `value` is a running total; the sink sends its growth ("name:N|c").
    kGauge,    // `value` is sent as it is ("name:N|g").
    // `samples`: (a time in milliseconds, how many calls took it so far), each a running
    // total; the sink sends each one's growth n as one sample that stands for n
    // ("name:T|ms|@(1/n)"), so a flush's lines are bounded whatever the calls.
    kTimer,
  };
  std::string name;
  uint64_t value = 0;
  Kind kind = Kind::kCounter;
  std::vector<std::pair<double, uint64_t>> samples;
};

struct EnvoyStatsOptions {
  // Rules were loaded at start: envoyproxy/ratelimit counts that first load as a
  // config_load_success too, where Metrics counts only reloads.
  bool loaded_at_start = false;
  // The Redis store's connections up now, for ratelimit.redis_pool.cx_active; none for the
  // memory store.
  std::optional<uint64_t> redis_connections;
};

// Every statistic above, by name. Names that sanitize to the same text are one statistic
// (their sum), as they are one key for statsd.
std::vector<Stat> EnvoyStats(const Metrics& metrics, const EnvoyStatsOptions& options);

// envoyproxy/ratelimit's utils.SanitizeStatName: ':' and '|' become '_', and so do the dots of
// anything shaped like an IPv4 address (1-3 digits, four times, joined by dots). Also, as
// theirs does not, control characters become '_': a request's value with a newline must not
// start a line of its own in a statsd datagram.
std::string SanitizeStatName(std::string_view name);

}  // namespace sluice::server
