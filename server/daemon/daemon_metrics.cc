// The stores' figures on GET /metrics, beside the rules' (server/stats/metrics.h): the memory
// store's keys and leases, Redis's calls, failures and denial cache, Memcached's calls and
// cas races, read from the store's own Stats() at each scrape.

#include <string>

#include "fmt/format.h"

#include "server/daemon/daemon.h"

namespace sluice::server {

namespace {

// The memory store's metrics: sluiced's own store, or the one Redis's `local` policy decides in
// during an outage (the same bounds, --max-keys and --max-leases).
std::string MemoryStoreMetrics(const MemoryStoreStats& stats) {
  return fmt::format(
      "# HELP sluice_store_keys Keys holding state in the memory store.\n"
      "# TYPE sluice_store_keys gauge\nsluice_store_keys {}\n"
      "# HELP sluice_store_reclaimed_total Keys dropped because their state had reset.\n"
      "# TYPE sluice_store_reclaimed_total counter\nsluice_store_reclaimed_total {}\n"
      "# HELP sluice_store_refused_total New keys refused: --max-keys held, none reset.\n"
      "# TYPE sluice_store_refused_total counter\nsluice_store_refused_total {}\n"
      "# HELP sluice_store_leases Leases held in the memory store.\n"
      "# TYPE sluice_store_leases gauge\nsluice_store_leases {}\n"
      "# HELP sluice_store_leases_refused_total Leases refused: --max-leases held.\n"
      "# TYPE sluice_store_leases_refused_total counter\nsluice_store_leases_refused_total {}\n"
      "# HELP sluice_store_limits Distinct limits with a table in the memory store.\n"
      "# TYPE sluice_store_limits gauge\nsluice_store_limits {}\n"
      "# HELP sluice_store_limits_retired_total Tables freed: every key of theirs had reset.\n"
      "# TYPE sluice_store_limits_retired_total counter\nsluice_store_limits_retired_total {}\n",
      stats.keys, stats.reclaimed, stats.refused, stats.leases, stats.leases_refused, stats.limits,
      stats.limits_retired);
}

}  // namespace

std::string Daemon::StoreMetrics() const {
  if (redis_ != nullptr) {
    const RedisStoreStats stats = redis_->Stats();
    return fmt::format(
               "# HELP sluice_redis_calls_total Calls asked of the Redis store (decisions, "
               "give-backs, settles, resets, leases, share takes).\n"
               "# TYPE sluice_redis_calls_total counter\nsluice_redis_calls_total {}\n"
               "# HELP sluice_redis_script_calls_total Script calls sent (fewer when batched).\n"
               "# TYPE sluice_redis_script_calls_total counter\nsluice_redis_script_calls_total "
               "{}\n"
               "# HELP sluice_redis_failures_total Decisions Redis did not answer, for any "
               "reason.\n"
               "# TYPE sluice_redis_failures_total counter\nsluice_redis_failures_total {}\n"
               "# HELP sluice_redis_fallbacks_total Failures decided by the allow or local "
               "policy.\n"
               "# TYPE sluice_redis_fallbacks_total counter\nsluice_redis_fallbacks_total {}\n"
               "# HELP sluice_redis_reconnects_total Connections to Redis opened again.\n"
               "# TYPE sluice_redis_reconnects_total counter\nsluice_redis_reconnects_total {}\n"
               "# HELP sluice_redis_master_switches_total Sentinel: times the Redis master moved.\n"
               "# TYPE sluice_redis_master_switches_total counter\n"
               "sluice_redis_master_switches_total {}\n"
               "# HELP sluice_redis_connections_ready Connections to Redis up now.\n"
               "# TYPE sluice_redis_connections_ready gauge\nsluice_redis_connections_ready {}\n"
               "# HELP sluice_redis_servers_lost Redis servers lost now (the log says why).\n"
               "# TYPE sluice_redis_servers_lost gauge\nsluice_redis_servers_lost {}\n"
               "# HELP sluice_redis_servers_refusing Redis servers refusing to decide now (OOM, "
               "READONLY...).\n"
               "# TYPE sluice_redis_servers_refusing gauge\nsluice_redis_servers_refusing {}\n"
               "# HELP sluice_redis_split_requests_total Cluster: requests over several slots.\n"
               "# TYPE sluice_redis_split_requests_total "
               "counter\nsluice_redis_split_requests_total {}\n"
               "# HELP sluice_redis_give_backs_total Slots given back after a later slot denied.\n"
               "# TYPE sluice_redis_give_backs_total counter\nsluice_redis_give_backs_total {}\n"
               "# HELP sluice_redis_give_backs_failed_total Give-backs not reached: units left "
               "charged.\n"
               "# TYPE sluice_redis_give_backs_failed_total counter\n"
               "sluice_redis_give_backs_failed_total {}\n"
               "# HELP sluice_redis_denials_answered_locally_total Calls denied from the denial "
               "cache "
               "(--redis-deny-cache), with no script call.\n"
               "# TYPE sluice_redis_denials_answered_locally_total counter\n"
               "sluice_redis_denials_answered_locally_total {}\n"
               "# HELP sluice_redis_share_decisions_total Decisions answered from a share.\n"
               "# TYPE sluice_redis_share_decisions_total "
               "counter\nsluice_redis_share_decisions_total {}\n"
               "# HELP sluice_redis_shares_taken_total Shares of a quota taken from Redis.\n"
               "# TYPE sluice_redis_shares_taken_total counter\nsluice_redis_shares_taken_total "
               "{}\n"
               "# HELP sluice_redis_shares_refused_total Shares Redis refused (asked exactly "
               "then).\n"
               "# TYPE sluice_redis_shares_refused_total "
               "counter\nsluice_redis_shares_refused_total {}\n"
               "# HELP sluice_redis_share_units_returned_total Unused units of shares given back.\n"
               "# TYPE sluice_redis_share_units_returned_total counter\n"
               "sluice_redis_share_units_returned_total {}\n"
               "# HELP sluice_redis_share_units_lapsed_total Unused units of shares whose window "
               "ended.\n"
               "# TYPE sluice_redis_share_units_lapsed_total counter\n"
               "sluice_redis_share_units_lapsed_total {}\n",
               stats.calls, stats.script_calls, stats.failures, stats.fallbacks, stats.reconnects,
               stats.master_switches, stats.connections_ready, stats.servers_lost,
               stats.servers_refusing, stats.split_requests, stats.give_backs,
               stats.give_backs_failed, stats.denials_answered_locally, stats.share_decisions,
               stats.shares_taken, stats.shares_refused, stats.share_units_returned,
               stats.share_units_lapsed) +
           MemoryStoreMetrics(stats.local);
  }
  if (memcached_ != nullptr) {
    const MemcachedStoreStats stats = memcached_->Stats();
    return MemcachedMetrics(stats) + MemoryStoreMetrics(stats.local);
  }
  return MemoryStoreMetrics(memory_->Stats());
}

}  // namespace sluice::server
