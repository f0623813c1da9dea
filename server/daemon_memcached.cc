// The Memcached store of --store memcached://host:port[,host:port...]: opened with the
// failure policy and timeout Redis takes (--redis-on-failure, --redis-timeout), its health and
// its metrics.

#include "fmt/format.h"

#include "server/daemon.h"
#include "src/core/status.h"

namespace sluice::server {

absl::Status Daemon::OpenMemcached() {
  absl::StatusOr<MemcachedStoreOptions> options = ParseMemcachedUrl(flags_.store);
  if (!options.ok()) {
    return options.status();
  }
  if (absl::Status s = ParseStoreFailure(flags_, options->timeout, options->on_failure);
      !s.ok()) {
    return s;
  }
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
      "sluice_memcached_give_backs_failed_total {}\n",
      stats.calls, stats.failures, stats.fallbacks, stats.cas_conflicts, stats.cas_exhausted,
      stats.give_backs, stats.give_backs_failed);
}

}  // namespace sluice::server
