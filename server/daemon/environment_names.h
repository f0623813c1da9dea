#pragma once

// envoyproxy/ratelimit's environment variables by what sluiced does with each (environment.cc
// reads them): one that sets one flag of ours (kSimple), one read but with nothing to do
// (kNoEffect), one said to be ignored (kIgnored, kIgnoredPrefixes), one read with others into
// one flag (kComposite), and the names other programs set too (kShared). docs/server.md's table
// of their variables is this file's.

#include <string_view>

#include "server/daemon/environment_values.h"

namespace sluice::server::env {

// A variable of theirs that sets one flag of ours. To map another, add a row.
struct Simple {
  std::string_view variable;
  std::string_view flag;
  Kind kind;
};
inline constexpr Simple kSimple[] = {
    {"SHADOW_MODE", "--shadow-mode", Kind::kSwitch},
    {"QUOTA_MODE", "--quota-mode", Kind::kSwitch},
    {"LIMIT_RESPONSE_HEADERS_ENABLED", "--response-headers", Kind::kSwitch},
    {"LIMIT_LIMIT_HEADER", "--header-limit", Kind::kText},
    {"LIMIT_REMAINING_HEADER", "--header-remaining", Kind::kText},
    {"LIMIT_RESET_HEADER", "--header-reset", Kind::kText},
    {"LIMIT_HEADERS_FORMAT", "--ratelimit-headers", Kind::kText},  // sluice's own.
    {"RESPONSE_DYNAMIC_METADATA", "--response-dynamic-metadata", Kind::kSwitch},
    {"MERGE_DOMAIN_CONFIG", "--merge-domains", Kind::kSwitch},
    {"RUNTIME_IGNOREDOTFILES", "--skip-dotfiles", Kind::kSwitch},
    {"NEAR_LIMIT_RATIO", "--near-limit-ratio", Kind::kRatio},
    {"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "--stop-others-over-limit", Kind::kSwitch},
    {"CACHE_KEY_PREFIX", "--cache-key-prefix", Kind::kText},
    {"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "--health-needs-rules", Kind::kSwitch},
    {"REDIS_TIMEOUT", "--redis-timeout", Kind::kTimeout},
    // Rules from xDS (CONFIG_TYPE=GRPC_XDS_SOTW sets --xds).
    {"CONFIG_GRPC_XDS_NODE_ID", "--xds-node-id", Kind::kText},
    {"CONFIG_GRPC_XDS_NODE_METADATA", "--xds-node-metadata", Kind::kText},
    {"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "--xds-headers", Kind::kText},
    {"CONFIG_GRPC_XDS_SERVER_USE_TLS", "--xds-tls", Kind::kSwitch},
    {"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "--xds-tls-ca", Kind::kText},
    {"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "--xds-tls-cert", Kind::kText},
    {"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "--xds-tls-key", Kind::kText},
    {"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "--xds-tls-server-name", Kind::kText},
    {"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "--xds-backoff-initial", Kind::kDuration},
    {"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "--xds-backoff-max", Kind::kDuration},
    {"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "--xds-backoff-random-factor", Kind::kRatio},
    {"XDS_CLIENT_BACKOFF_JITTER", "--xds-backoff-jitter", Kind::kSwitch},
    {"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "--xds-max-message-bytes", Kind::kCount},
    {"FORCE_START_WITHOUT_INITIAL_CONFIG", "--xds-force-start", Kind::kSwitch},
};

// Their variables that sluiced reads (a bad value is refused) but needs not act on: what they
// ask for is what sluiced does anyway (docs/server.md says how).
inline constexpr std::string_view kNoEffect[] = {
    "RUNTIME_WATCH_ROOT",  // The watch sees a swap of the root's symlink and an edit alike.
    "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",  // /healthcheck always asks for a connection.
};

// Their variables sluiced does not support, logged as ignored when set: these names, and every
// name with one of these prefixes.
// clang-format off
inline constexpr std::string_view kIgnored[] = {
    "GRPC_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE_GRACE", "LOG_FORMAT", "USE_DOG_STATSD",
    "USE_DOG_STATSD_MOGRIFIERS", "EXTRA_TAGS", "DISABLE_STATS", "USE_PROMETHEUS",
    "EXPIRATION_JITTER_MAX_SECONDS", "REDIS_PIPELINE_WINDOW",
    "REDIS_PIPELINE_LIMIT", "REDIS_CLUSTER_PIPELINE_PARALLELISM", "REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_POOL_ON_EMPTY_WAIT_DURATION",
    "REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL",
    "REDIS_STARTUP_MAX_ELAPSED_TIME",
    // xDS: a connection that fails is tried again after the stream's backoff, which covers both.
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"};
inline constexpr std::string_view kIgnoredPrefixes[] = {
    "TRACING_", "MEMCACHE_", "REDIS_PERSECOND", "PROMETHEUS_"};

// The rest of their names: read by the passes below.
inline constexpr std::string_view kComposite[] = {
    "HOST", "PORT", "GRPC_HOST", "GRPC_PORT", "DEBUG_HOST", "DEBUG_PORT", "GRPC_UDS",
    "GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT",
    "GRPC_CLIENT_TLS_SAN", "LOG_LEVEL", "CONFIG_TYPE", "CONFIG_GRPC_XDS_SERVER_URL", "USE_STATSD", "STATSD_HOST", "STATSD_PORT",
    "STATS_FLUSH_INTERVAL", "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY",
    "BACKEND_TYPE", "REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL", "REDIS_POOL_SIZE", "REDIS_AUTH",
    "REDIS_TLS", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT",
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "REDIS_SENTINEL_AUTH", "LOCAL_CACHE_SIZE_IN_BYTES", "MEMCACHE_HOST_PORT", "MEMCACHE_SRV", "MEMCACHE_TLS"};
// clang-format on

// Names other programs set too: alone, they are applied but do not bring in their defaults.
// (LIMIT_HEADERS_FORMAT is sluice's own, not theirs: it alone does not make their environment.)
inline constexpr std::string_view kShared[] = {"HOST",       "PORT",      "LOG_LEVEL",
                                               "LOG_FORMAT", "REDIS_URL", "LIMIT_HEADERS_FORMAT"};

}  // namespace sluice::server::env
