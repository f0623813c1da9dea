// The Memcached store of --store memcached://host:port[,host:port...]: opened with the
// failure policy and timeout Redis takes (--redis-on-failure, --redis-timeout), its health and
// its metrics.

#include <string>
#include <string_view>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

#include "server/daemon/daemon.h"
#include "src/core/status.h"

namespace sluice::server {

absl::Status Daemon::OpenMemcached() {
  absl::StatusOr<MemcachedStoreOptions> options = ParseMemcachedUrl(flags_.store);
  if (!options.ok()) {
    return options.status();
  }
  if (absl::Status s = ParseStoreFailure(flags_, options->timeout, options->on_failure); !s.ok()) {
    return s;
  }
  options->log = StoreLogToSpdlog();  // A server lost (and why) and back, once per change.
  options->local = {.max_keys = flags_.max_keys, .max_leases = flags_.max_leases};
  if (flags_.cache_key_prefix) {
    options->key_prefix = *flags_.cache_key_prefix;
  }
  absl::StatusOr<std::unique_ptr<MemcachedStore>> store = MemcachedStore::Create(*options);
  if (!store.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("--store {}: {}", flags_.store, internal::Message(store.status())));
  }
  memcached_ = store->get();
  store_ = *std::move(store);
  return absl::OkStatus();
}

StoreLogSink StoreLogToSpdlog() {
  return [](StoreLogLevel level, std::string_view line) {
    spdlog::log(level == StoreLogLevel::kWarning ? spdlog::level::warn : spdlog::level::info, "{}",
                line);
  };
}

// As Redis's (daemon_health.cc), from what the store's calls found (no call per probe): a
// server lost leaves its keys to the failure policy: allow and local decide them (degraded),
// deny fails them. Unavailable (503) once every server is lost, as a Redis cluster's: while
// some answer, the others' keys are decided and the lost one is retried every second.
// Refusing (out of memory under -M) is degraded only, as Redis's OOM: only a write shows it
// storing again.
HttpApi::HealthReport MemcachedHealth(const MemcachedStoreStats& stats,
                                      std::string_view on_failure) {
  const std::string_view state = stats.servers_lost > 0       ? "lost"
                                 : stats.servers_refusing > 0 ? "refusing"
                                                              : "up";
  HttpApi::HealthReport report{
      .degraded = state != "up",
      .store = {{"store", "memcached"},
                {"memcached", std::string(state)},
                {"servers", std::to_string(stats.servers)},
                {"servers_lost", std::to_string(stats.servers_lost + stats.servers_refusing)},
                {"on_failure", std::string(on_failure)}}};
  if (on_failure == "deny" && stats.servers_lost >= stats.servers) {
    report.decisions = absl::UnavailableError(fmt::format(
        "{} Memcached server(s) lost (the log says why); under --redis-on-failure deny, "
        "decisions fail until one is back",
        stats.servers_lost));
  }
  return report;
}

std::string MemcachedMetrics(const MemcachedStoreStats& stats) {
  return fmt::format(
      "# HELP sluice_memcached_calls_total Decisions asked of the Memcached store.\n"
      "# TYPE sluice_memcached_calls_total counter\nsluice_memcached_calls_total {}\n"
      "# HELP sluice_memcached_failures_total Decisions Memcached did not answer in time.\n"
      "# TYPE sluice_memcached_failures_total counter\nsluice_memcached_failures_total {}\n"
      "# HELP sluice_memcached_fallbacks_total Failures decided by the allow or local policy.\n"
      "# TYPE sluice_memcached_fallbacks_total counter\nsluice_memcached_fallbacks_total {}\n"
      "# HELP sluice_memcached_cas_conflicts_total Writes that lost a cas and were retried.\n"
      "# TYPE sluice_memcached_cas_conflicts_total counter\n"
      "sluice_memcached_cas_conflicts_total {}\n"
      "# HELP sluice_memcached_cas_exhausted_total Calls that lost every cas retry.\n"
      "# TYPE sluice_memcached_cas_exhausted_total counter\n"
      "sluice_memcached_cas_exhausted_total {}\n"
      "# HELP sluice_memcached_give_backs_total Charges given back after a later limit denied.\n"
      "# TYPE sluice_memcached_give_backs_total counter\nsluice_memcached_give_backs_total {}\n"
      "# HELP sluice_memcached_give_backs_failed_total Give-backs not written: units left "
      "charged.\n"
      "# TYPE sluice_memcached_give_backs_failed_total counter\n"
      "sluice_memcached_give_backs_failed_total {}\n"
      "# HELP sluice_memcached_servers_lost Memcached servers lost now (the log says why).\n"
      "# TYPE sluice_memcached_servers_lost gauge\nsluice_memcached_servers_lost {}\n",
      stats.calls, stats.failures, stats.fallbacks, stats.cas_conflicts, stats.cas_exhausted,
      stats.give_backs, stats.give_backs_failed, stats.servers_lost + stats.servers_refusing);
}

}  // namespace sluice::server
