// sluiced: the rate limit server. Flags in docs/server.md; `sluiced --help` lists them. The
// flags come from the command line, and from envoyproxy/ratelimit's environment variables
// (server/environment.h) for those the command line does not give; the Daemon
// (server/daemon.h) does the rest.

#include <charconv>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_join.h"
#include "fmt/format.h"
#include "sluice_build/version.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

#include "server/daemon/check_config.h"
#include "server/daemon/daemon.h"
#include "server/daemon/environment.h"
#include "sluice/duration.h"
#include "sluice/memcached_store.h"
#include "sluice/redis_store.h"
#include "src/core/status.h"

namespace sluice::server {
namespace {

// The bounds of sluiced's numeric and duration flags. Every such flag is checked here, from
// its text (CLI11 would read "-1" into a size_t as 2^64-1): a negative, out-of-range or absurd
// value is refused with the flag, the value and what is accepted.
struct Bounds {
  enum class Kind : uint8_t { kCount, kRatio, kDuration } kind;
  int64_t min;  // Counts as they are; durations in microseconds; ratios in millionths.
  int64_t max;
  std::string_view zero = {};  // Not empty: 0 is accepted too, and means this.
};

constexpr int64_t kMs = 1'000;
constexpr int64_t kSecond = 1'000'000;
constexpr int64_t kDay = 86'400 * kSecond;

const Bounds* BoundsOf(std::string_view flag) {
  using K = Bounds::Kind;
  static const auto* const table = new std::vector<std::pair<std::string_view, Bounds>>{
      {"--threads", {K::kCount, 1, 1024, "one event loop per core"}},
      // Beyond any machine's memory at tens of bytes a key.
      {"--max-keys", {K::kCount, 1, 10'000'000'000, "unbounded"}},
      {"--max-leases", {K::kCount, 1, 1'000'000'000, "unbounded"}},  // ~210 GB at the most.
      {"--redis-connections", {K::kCount, 1, kMaxRedisConnections}},
      {"--redis-deny-cache", {K::kCount, 1, 100'000'000, "off"}},
      {"--near-limit-ratio", {K::kRatio, 0, 1'000'000}},
      {"--redis-timeout", {K::kDuration, kMs, 300 * kSecond}},
      {"--redis-deny-cache-ttl", {K::kDuration, kMs, kDay}},
      // Shorter intervals would keep a core busy stat'ing files or writing snapshots.
      {"--watch-interval", {K::kDuration, 100 * kMs, kDay, "only on SIGHUP"}},
      {"--snapshot-interval", {K::kDuration, 100 * kMs, kDay, "only at shutdown"}},
      {"--statsd-interval", {K::kDuration, 10 * kMs, kDay}},
      {"--drain", {K::kDuration, 0, 3'600 * kSecond}},
  };
  for (const auto& [name, bounds] : *table) {
    if (name == flag) {
      return &bounds;
    }
  }
  return nullptr;
}

std::string Show(const Bounds& b, int64_t v) {
  switch (b.kind) {
    case Bounds::Kind::kDuration:
      return FormatDuration(Micros(v));
    case Bounds::Kind::kRatio:
      return fmt::format("{}", static_cast<double>(v) / 1e6);
    case Bounds::Kind::kCount:
      break;
  }
  return std::to_string(v);
}

// `text` in the unit of Bounds::min, or why it is not a value of its kind.
absl::StatusOr<int64_t> Read(const Bounds& b, std::string_view text) {
  const char* const end = text.data() + text.size();
  if (b.kind == Bounds::Kind::kDuration) {
    absl::StatusOr<Micros> d = ParseDuration(text);
    if (!d.ok()) {
      return absl::InvalidArgumentError("not a duration (such as 250ms, 10s, 1m)");
    }
    return d->count();
  }
  if (b.kind == Bounds::Kind::kRatio) {
    double v = 0;
    const auto [rest, ec] = std::from_chars(text.data(), end, v);
    if (ec != std::errc() || rest != end || !(v >= 0 && v <= 1)) {
      return absl::InvalidArgumentError("not a number from 0 to 1");
    }
    return static_cast<int64_t>(v * 1e6);
  }
  int64_t v = 0;
  const auto [rest, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || text.front() == '-' || ec != std::errc() || rest != end) {
    return absl::InvalidArgumentError(ec == std::errc::result_out_of_range ? "far too large"
                                                                           : "not a whole number");
  }
  return v;
}

// OK when `text` is within the bounds of `flag` (or `flag` has none).
absl::Status CheckFlagValue(std::string_view flag, std::string_view text) {
  const Bounds* b = BoundsOf(flag);
  if (b == nullptr) {
    return absl::OkStatus();
  }
  const std::string accepted =
      fmt::format("accepted: {} to {}{}", Show(*b, b->min), Show(*b, b->max),
                  b->zero.empty() ? "" : fmt::format(", or 0: {}", b->zero));
  absl::StatusOr<int64_t> v = Read(*b, text);
  if (!v.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("{} '{}': {} ({})", flag, text, internal::Message(v.status()), accepted));
  }
  if (*v == 0 && !b->zero.empty()) {
    return absl::OkStatus();
  }
  if (*v < b->min || *v > b->max) {
    return absl::InvalidArgumentError(
        fmt::format("{} '{}': must be at {} {} ({})", flag, text, *v < b->min ? "least" : "most",
                    Show(*b, *v < b->min ? b->min : b->max), accepted));
  }
  return absl::OkStatus();
}

// Every bounded flag the command line gave.
absl::Status CheckFlagValues(const CLI::App& app) {
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& text : option->results()) {
      if (absl::Status s = CheckFlagValue(option->get_name(), text); !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

// TLS on the gRPC listener and to Redis.
void AddTlsFlags(CLI::App& app, Flags& flags) {
  app.add_option("--grpc-tls-cert", flags.grpc_tls.cert_file,
                 "gRPC over TLS: the server's certificate chain (PEM), with --grpc-tls-key");
  app.add_option("--grpc-tls-key", flags.grpc_tls.key_file,
                 "gRPC over TLS: the server's private key (PEM, unencrypted)");
  app.add_option("--grpc-tls-client-ca", flags.grpc_tls.client_ca_file,
                 "gRPC mutual TLS: clients must show a certificate these CAs (PEM) signed");
  app.add_option("--grpc-tls-client-san", flags.grpc_tls.client_san,
                 "gRPC mutual TLS: a name (DNS or IP) clients' certificates must also carry");
  app.add_option(
      "--redis-tls-ca", flags.redis_tls.ca_file,
      "rediss://: the CAs (PEM) that verify Redis's certificate (default: the system's)");
  app.add_option("--redis-tls-cert", flags.redis_tls.cert_file,
                 "rediss://: a client certificate (PEM) for Redis, with --redis-tls-key");
  app.add_option("--redis-tls-key", flags.redis_tls.key_file,
                 "rediss://: the client certificate's private key (PEM, unencrypted)");
  app.add_flag("--redis-tls-skip-verify", flags.redis_tls_skip_verify,
               "rediss://: accept a certificate that names another host (its CA is still checked)");
}

// Rules from an xDS management server (their CONFIG_GRPC_XDS_* and XDS_CLIENT_* settings).
void AddXdsFlags(CLI::App& app, Flags& flags) {
  xds::Options& x = flags.xds_options;
  app.add_option("--xds", flags.xds,
                 "Rules from this xDS management server (HOST:PORT), instead of --config");
  app.add_option("--xds-node-id", x.node_id, "xDS: the node id asked for")->capture_default_str();
  app.add_option("--xds-node-metadata", flags.xds_node_metadata,
                 "xDS: the node's metadata, k1=v1,k2=v2");
  app.add_option("--xds-headers", flags.xds_headers,
                 "xDS: headers sent with the stream, k1:v1,k2:v2");
  app.add_flag("--xds-tls", x.tls, "xDS: connect over TLS");
  app.add_option("--xds-tls-ca", x.tls_ca_file,
                 "xDS TLS: the CAs (PEM) of the server's certificate (default: the system's)");
  app.add_option("--xds-tls-cert", x.tls_cert_file,
                 "xDS TLS: a client certificate (PEM), with --xds-tls-key");
  app.add_option("--xds-tls-key", x.tls_key_file, "xDS TLS: its private key (PEM, unencrypted)");
  app.add_option("--xds-tls-server-name", x.tls_server_name,
                 "xDS TLS: the name the server's certificate must show (default: its host)");
  app.add_option("--xds-backoff-initial", flags.xds_backoff_initial,
                 "xDS: the first wait before the stream is opened again")
      ->capture_default_str();
  app.add_option("--xds-backoff-max", flags.xds_backoff_max, "xDS: the longest such wait")
      ->capture_default_str();
  app.add_option("--xds-backoff-random-factor", x.backoff_random_factor,
                 "xDS: the share of a wait that jitter may take off")
      ->capture_default_str();
  app.add_option("--xds-backoff-jitter", x.backoff_jitter, "xDS: jitter the waits (true/false)")
      ->capture_default_str();
  app.add_option("--xds-max-message-bytes", x.max_message_bytes,
                 "xDS: the largest set of rules taken (0: gRPC's 4 MiB)")
      ->capture_default_str();
  app.add_flag("--xds-force-start", flags.xds_force_start,
               "xDS: serve before the first set of rules arrives (no rules until then)");
}

// How the Envoy API answers (envoyproxy/ratelimit's settings of the same meaning).
void AddEnvoyFlags(CLI::App& app, Flags& flags) {
  app.add_option("--near-limit-ratio", flags.near_limit_ratio,
                 "Near the limit: past this share of it (near_limit counts)")
      ->capture_default_str();
  app.add_flag("--shadow-mode", flags.shadow_mode,
               "Envoy API: never answer OVER_LIMIT overall (statuses still do)");
  app.add_option("--ratelimit-headers", flags.ratelimit_headers,
                 "RateLimit headers: draft-ietf (RateLimit-Policy and RateLimit), draft-06 "
                 "(RateLimit-Limit, -Remaining, -Reset) or x-ratelimit (GitHub's) (default: "
                 "draft-ietf; on the Envoy API, draft-06 as envoyproxy/ratelimit)")
      ->check(CLI::IsMember({"draft-ietf", "draft-06", "x-ratelimit"}));
  app.add_flag("--response-headers", flags.response_headers,
               "Envoy API: add the RateLimit headers to responses");
  app.add_option("--header-limit", flags.header_limit, "Envoy API: the limit header's name")
      ->capture_default_str();
  app.add_option("--header-remaining", flags.header_remaining,
                 "Envoy API: the remaining header's name")
      ->capture_default_str();
  app.add_option("--header-reset", flags.header_reset, "Envoy API: the reset header's name")
      ->capture_default_str();
  app.add_flag("--quota-mode", flags.quota_mode,
               "Envoy API: every rule in quota mode (over only when all quota rules are)");
  app.add_flag("--response-dynamic-metadata", flags.dynamic_metadata,
               "Envoy API: the request and its rules' metadata in dynamic_metadata");
  app.add_flag("--stop-counting-over-limit", flags.stop_counting_over_limit,
               "Envoy API: a hit over the limit counts nothing (theirs counts every hit)");
  app.add_flag("--stop-others-over-limit", flags.stop_others_over_limit,
               "Envoy API: when a descriptor would pass its limit, the request's others count "
               "nothing (their STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT)");
}

// What acts after a decision and on others' keys: receipts' secret, the admin token, and what
// operators are shown of keys.
void AddOperatorFlags(CLI::App& app, Flags& flags) {
  app.add_option("--secret-file", flags.secret_file,
                 "Receipts: the file of the secret they are signed with (>= 32 bytes; a fleet "
                 "shares one); default: a random secret of this process");
  app.add_option("--admin-token-file", flags.admin_token_file,
                 "The file of the bearer token admin endpoints (POST /v1/reset, GET /v1/top, an "
                 "explanation at cost 0) need; default: those endpoints are off");
  app.add_flag("--hide-keys", flags.hide_keys,
               "Show keys to operators (explanations, top offenders) as keyed hashes, never as "
               "they are");
  app.add_option("--top-metrics", flags.top_metrics,
                 "The top N keys of each rule limit, by denials and by hits, as Prometheus "
                 "series (default 0: none)")
      ->check(CLI::Range(0, 20));
  app.add_flag("--ui", flags.ui,
               "Serve the operator's page at /ui/ on the HTTP listener (needs "
               "--admin-token-file: the token is its password)");
}

void AddFlags(CLI::App& app, Flags& flags) {
  app.add_option("--config", flags.config, "Rules: a YAML file, or a directory of them");
  app.add_option("--http", flags.http, "HTTP listen address HOST:PORT")->capture_default_str();
  AddOperatorFlags(app, flags);
  app.add_option("--grpc", flags.grpc, "gRPC listen address HOST:PORT")->capture_default_str();
  app.add_option("--grpc-engine", flags.grpc_engine,
                 "What serves gRPC: grpcpp (grpc++'s server) or h2 (HTTP/2 on sluiced's own event "
                 "loops)")
      ->check(CLI::IsMember({"grpcpp", "h2"}))
      ->capture_default_str();
  app.add_option("--debug", flags.debug,
                 "Debug listen address HOST:PORT for /rlconfig and POST /json (default: none)");
  app.add_option("--store", flags.store,
                 "memory, memcached://host:port[,host:port...] (docs/memcached.md), or "
                 "redis://[user:pass@]host:port[/db] (redis+cluster://, "
                 "redis+sentinel://host:port,host:port/master: docs/redis.md)")
      ->capture_default_str();
  app.add_option("--redis-timeout", flags.redis_timeout,
                 "How long a decision waits for Redis (or Memcached)")
      ->capture_default_str();
  app.add_option("--redis-on-failure", flags.redis_on_failure,
                 "When Redis (or Memcached) does not answer in time: allow, deny (an error) or "
                 "local")
      ->capture_default_str();
  app.add_option("--redis-connections", flags.redis_connections, "Connections to Redis")
      ->capture_default_str();
  app.add_option("--redis-deny-cache", flags.redis_deny_cache,
                 "Denials Redis gave kept to deny repeats without asking it (0: off)")
      ->capture_default_str();
  app.add_option("--redis-deny-cache-ttl", flags.redis_deny_cache_ttl,
                 "The longest a denial is repeated from memory")
      ->capture_default_str();
  app.add_flag("--redis-shares", flags.redis_shares,
               "Quota leasing: answer the hot keys of rules with 'share:' from shares of their "
               "quota taken from Redis (docs/redis.md)");
  app.add_option("--threads", flags.threads, "HTTP event loops (default: one per core)");
  app.add_option("--max-keys", flags.max_keys, "Memory store capacity in keys (0: unbounded)")
      ->capture_default_str();
  app.add_option("--max-leases", flags.max_leases,
                 "Memory store capacity in leases of concurrency limits, about 210 bytes each "
                 "(0: unbounded); also bounds Redis's local failure policy")
      ->capture_default_str();
  app.add_flag("--memory-compact-keys", flags.memory_compact_keys,
               "Memory store: gcra and leaky_bucket keep a 64-bit keyed fingerprint of each key, "
               "not the key (about 21 bytes a key, not 47; two keys that share a fingerprint, "
               "by a chance of 1 in 2^64 a pair, share one state and may be denied sooner); "
               "no --snapshot (MemoryStoreOptions::compact_keys)");
  app.add_option("--snapshot", flags.snapshot,
                 "Memory store snapshot file: loaded at start, written at shutdown");
  app.add_flag("--snapshot-discard-corrupt", flags.snapshot_discard_corrupt,
               "A snapshot that cannot be loaded is moved aside (FILE.corrupt-TIME) and sluiced "
               "starts empty (default: it refuses to start)");
  app.add_option("--snapshot-interval", flags.snapshot_interval,
                 "Also write the snapshot this often (0: only at shutdown)")
      ->capture_default_str();
  app.add_option("--watch-interval", flags.watch_interval,
                 "How often to look for a changed rules file (0: only on SIGHUP)")
      ->capture_default_str();
  app.add_option("--drain", flags.drain, "How long SIGTERM waits for requests in flight")
      ->capture_default_str();
  app.add_option("--log-level", flags.log_level, "trace, debug, info, warn, error")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  app.add_option("--cache-key-prefix", flags.cache_key_prefix,
                 "Redis and Memcached stores: the prefix of every key (default sluice:)");
  app.add_flag("--skip-dotfiles", flags.skip_dotfiles,
               "Rules: in a directory, files and folders whose names start with '.' are not read");
  app.add_flag("--merge-domains", flags.merge_domains,
               "Rules: a file naming a domain already loaded adds to it (else an error)");
  app.add_flag("--health-needs-rules", flags.health_needs_rules,
               "GET /healthcheck fails until at least one domain is loaded");
  app.add_option("--statsd", flags.statsd,
                 "Send envoyproxy/ratelimit's stats to statsd at HOST:PORT over UDP (empty: off)");
  app.add_option("--statsd-interval", flags.statsd_interval, "How often to send them")
      ->capture_default_str();
  AddTlsFlags(app, flags);
  AddXdsFlags(app, flags);
  AddEnvoyFlags(app, flags);
}

// Sets one flag from the environment, as if given on the command line, through the flag's own
// checks. Errors name the variables.
absl::Status ApplyFlag(CLI::Option& option, const EnvFlag& env) {
  if (env.flag == "--store" && env.value.starts_with("memcached://")) {
    if (absl::StatusOr<MemcachedStoreOptions> url = ParseMemcachedUrl(env.value); !url.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("{}: {}", env.variables, internal::Message(url.status())));
    }
  } else if (env.flag == "--store" && env.value != "memory") {
    if (absl::StatusOr<RedisStoreOptions> url = ParseRedisUrl(env.value); !url.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("{}: {}", env.variables, internal::Message(url.status())));
    }
  }
  if (absl::Status s = CheckFlagValue(env.flag, env.value); !s.ok()) {
    return absl::InvalidArgumentError(fmt::format("{}: {}", env.variables, internal::Message(s)));
  }
  try {
    option.add_result(env.value);
    option.run_callback();
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(fmt::format("{}: {}", env.variables, e.what()));
  }
  return absl::OkStatus();
}

// envoyproxy/ratelimit's environment variables, for the flags the command line did not give.
absl::Status ApplyEnvironment(CLI::App& app, const Flags& flags) {
  absl::StatusOr<EnvSettings> env =
      ReadEnvironment(ProcessEnvironment(), [&app](std::string_view flag) {
        const CLI::Option* option = app.get_option_no_throw(std::string(flag));
        return option != nullptr && option->count() > 0;
      });
  if (!env.ok()) {
    return env.status();
  }
  std::vector<std::string> ignored = env->ignored;
  for (const EnvFlag& flag : env->flags) {
    CLI::Option* option = app.get_option_no_throw(flag.flag);
    if (option == nullptr) {
      if (flag.required) {
        return absl::InvalidArgumentError(fmt::format(
            "{}: this build of sluiced has no {} to take it", flag.variables, flag.flag));
      }
      if (!flag.only_defaults) {
        ignored.push_back(fmt::format("{} (no {} in this build)", flag.variables, flag.flag));
      }
      continue;
    }
    if (absl::Status s = ApplyFlag(*option, flag); !s.ok()) {
      return s;
    }
  }
  spdlog::set_level(spdlog::level::from_str(flags.log_level));  // LOG_LEVEL's, if it set it.
  if (!env->found.empty()) {
    spdlog::info("envoyproxy/ratelimit settings from the environment: {}{}",
                 absl::StrJoin(env->found, ", "),
                 env->theirs ? " (their defaults apply to the rest)" : "");
  }
  if (!ignored.empty()) {
    spdlog::warn("ignoring envoyproxy/ratelimit settings sluiced does not support: {}",
                 absl::StrJoin(ignored, ", "));
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  // Logs go to stderr, so that stdout stays free and errors land where scripts look.
  spdlog::set_default_logger(spdlog::stderr_color_mt("sluiced"));
  Flags flags;
  CLI::App app{"sluiced: the sluice rate limit server (docs/server.md)"};
  AddFlags(app, flags);
  app.set_version_flag("--version", fmt::format("sluiced {}", build::kVersionText),
                       "Print sluiced's version and exit");
  std::string check_config;
  app.add_option("--check-config", check_config,
                 "Check a rules file or directory as --config would load it, print every error "
                 "(exit 2) or a summary (exit 0), and exit: nothing is served");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (absl::Status s = CheckFlagValues(app); !s.ok()) {
    spdlog::error("{}", internal::Message(s));
    return 2;
  }
  if (absl::Status s = ApplyEnvironment(app, flags); !s.ok()) {
    spdlog::error("{}", internal::Message(s));
    return 2;
  }
  if (!check_config.empty()) {
    return CheckConfig(flags, check_config);
  }
  std::signal(SIGPIPE, SIG_IGN);
  return Daemon(std::move(flags)).Run();
}

}  // namespace
}  // namespace sluice::server

int main(int argc, char** argv) {
  try {
    return sluice::server::Main(argc, argv);
  } catch (const std::exception& e) {  // Out of memory, a thread that cannot start.
    std::fputs(e.what(), stderr);
    std::fputs("\n", stderr);
    return 1;
  }
}
