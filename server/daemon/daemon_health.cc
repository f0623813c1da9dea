// What sluiced says of its health: /healthz (the store, and whether decisions can be made)
// and envoyproxy/ratelimit's /healthcheck (whether sluiced serves), asked by HttpApi at each
// probe on the event-loop threads.

#include <chrono>
#include <string>
#include <string_view>

#include "fmt/format.h"
#include "grpcpp/health_check_service_interface.h"

#include "server/daemon/daemon.h"

namespace sluice::server {

// The store and whether it decides, from what the store knows (RedisStoreStats: no call to
// Redis per probe). Redis that cannot be reached (its connections fail, or none is ready yet)
// leaves decisions to the failure policy: allow and local make them (degraded), deny fails
// them (unavailable). Shown but degraded only (200), where a 503 could stay wrong for good:
// a server refusing to decide (OOM, READONLY), for only a decision shows it deciding again
// and a failed probe keeps decisions away; and a cluster's node lost while others answer,
// for the store keeps trying a master that failed over, though its slots are served.
HttpApi::HealthReport Daemon::StoreHealth() const {
  if (memcached_ != nullptr) {
    return MemcachedHealth(memcached_->Stats(), flags_.redis_on_failure);
  }
  if (redis_ == nullptr) {
    return {.store = {{"store", "memory"}}};
  }
  const RedisStoreStats stats = redis_->Stats();
  const std::string_view state = stats.servers_lost > 0         ? "lost"
                                 : stats.connections_ready == 0 ? "connecting"
                                 : stats.servers_refusing > 0   ? "refusing"
                                                                : "up";
  const std::string& url = flags_.store;
  const std::string_view mode = url.find("+cluster://") != std::string::npos    ? "cluster"
                                : url.find("+sentinel://") != std::string::npos ? "sentinel"
                                                                                : "single";
  HttpApi::HealthReport report{.degraded = state != "up",
                               .store = {{"store", "redis"},
                                         {"mode", std::string(mode)},
                                         {"redis", std::string(state)},
                                         {"on_failure", flags_.redis_on_failure}}};
  const bool unreachable = state == "connecting" ||
                           (state == "lost" && (mode != "cluster" || stats.connections_ready == 0));
  if (flags_.redis_on_failure == "deny" && unreachable) {
    report.decisions = absl::UnavailableError(
        state == "lost"
            ? fmt::format("{} Redis server(s) lost (the log says why); under --redis-on-failure "
                          "deny, decisions fail until Redis is back",
                          stats.servers_lost)
            : "no connection to Redis is ready");
  }
  return report;
}

// /healthz's report (StoreHealth), and whether sluiced serves, as envoyproxy/ratelimit's
// health check has it: not while it stops (SIGTERM), not while decisions fail (their health
// check with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION, here once the failure policy cannot
// decide either), and, with --health-needs-rules (their HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED),
// not before a domain is loaded. /healthz says the store alone: it stays as it is while
// sluiced drains.
HttpApi::HealthReport Daemon::Health() const {
  HttpApi::HealthReport report = StoreHealth();
  if (stopping_.load()) {
    report.serving = absl::UnavailableError("stopping");
  } else if (!report.decisions.ok()) {
    report.serving = report.decisions;
  } else if (flags_.health_needs_rules && service_->rules()->domains().empty()) {
    report.serving = absl::UnavailableError("no rules are loaded");
  }
  return report;
}

// gRPC's standard health service (grpc.health.v1, which Envoy's gRPC health checks ask) says
// SERVING while /healthcheck says OK, as envoyproxy/ratelimit's does. That service is told,
// not asked: it is told again every second on the control loop (at most a second late; the
// drain's Shutdown makes it NOT_SERVING at once).
void Daemon::PublishHealth() {
  grpc_server_.SetServing(Health().serving.ok());
  health_timer_.expires_after(std::chrono::seconds(1));
  health_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) {
      PublishHealth();
    }
  });
}

}  // namespace sluice::server
