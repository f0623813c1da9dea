#pragma once

// Daemon: sluiced's life once its flags are read (main.cc reads them, from the command line
// and envoyproxy/ratelimit's environment): the store opened, the rules loaded, the HTTP, gRPC
// and debug listeners started, then the control loop until SIGTERM, then the drain.
//
// The main thread runs the control loop: signals (SIGTERM/SIGINT drain and stop, SIGHUP
// asks for a reload of the rules), the rules' watch, the snapshot timer. Reloads run on a
// thread of their own (Reloader), so that SIGTERM is handled at once even while a rules file
// takes long to parse. The HTTP event loops run on threads of their own (HttpServer); Health
// is called on them.

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/signal_set.hpp"
#include "boost/asio/steady_timer.hpp"
#include "grpcpp/server.h"

#include "server/daemon/listen_address.h"
#include "server/daemon/reloader.h"
#include "server/grpc/envoy_service.h"
#include "server/grpc/grpc_server.h"
#include "server/http/api.h"
#include "server/http/debug.h"
#include "server/http/server.h"
#include "server/rules/rules.h"
#include "server/service/key_names.h"
#include "server/service/service.h"
#include "server/stats/metrics.h"
#include "server/stats/rate_history.h"
#include "server/stats/statsd.h"
#include "server/ui/operator_page.h"
#include "server/xds/client.h"
#include "sluice/memcached_store.h"
#include "sluice/memory_store.h"
#include "sluice/redis_store.h"

namespace sluice::server {

// The flags as given (docs/server.md has each).
struct Flags {
  std::string config;
  std::string http = "127.0.0.1:8080";
  std::string grpc = "127.0.0.1:8081";
  std::string debug;  // Empty: no debug listener.
  std::string store = "memory";
  int threads = 0;
  size_t max_keys = 10'000'000;
  size_t max_leases = 1'000'000;     // About 210 bytes each.
  bool memory_compact_keys = false;  // MemoryStoreOptions::compact_keys.
  std::string snapshot;
  bool snapshot_discard_corrupt = false;  // Move a corrupt snapshot aside, start empty.
  std::string snapshot_interval = "0";
  std::string watch_interval = "1s";
  std::string drain = "5s";
  std::string log_level = "info";
  float near_limit_ratio = 0.8F;  // Their NEAR_LIMIT_RATIO.
  bool shadow_mode = false;
  bool response_headers = false;
  bool quota_mode = false;
  bool dynamic_metadata = false;
  bool stop_counting_over_limit = false;
  bool stop_others_over_limit = false;
  bool merge_domains = false;
  bool skip_dotfiles = false;
  std::string header_limit = "RateLimit-Limit";
  std::string header_remaining = "RateLimit-Remaining";
  std::string header_reset = "RateLimit-Reset";
  // --ratelimit-headers: draft-ietf, draft-06 or x-ratelimit (rate_limit_headers.h); empty:
  // draft-ietf on the HTTP API, draft-06 under the names above on the Envoy API.
  std::string ratelimit_headers;
  std::optional<std::string> cache_key_prefix;
  bool health_needs_rules = false;
  std::string redis_timeout = "100ms";
  std::string redis_on_failure = "deny";
  int redis_connections = 2;
  int64_t redis_deny_cache = 0;  // Denials kept to answer repeats locally; 0: off.
  std::string redis_deny_cache_ttl = "1s";
  bool redis_shares = false;  // Quota leasing for rules with `share:` (docs/redis.md).
  GrpcTlsOptions grpc_tls;    // --grpc-tls-cert, --grpc-tls-key, --grpc-tls-client-ca, -san
  std::string grpc_engine = "grpcpp";  // grpcpp or h2 (server/grpc/grpc_server.h).
  RedisTlsOptions redis_tls;           // --redis-tls-ca, --redis-tls-cert, --redis-tls-key
  bool redis_tls_skip_verify = false;
  std::string statsd;  // HOST:PORT; empty: no statsd.
  std::string statsd_interval = "10s";
  // Receipts' signing secret (shared by a fleet); empty: a random one of this process's.
  std::string secret_file;
  // The admin endpoints' bearer token; empty: those endpoints are off.
  std::string admin_token_file;
  // Keys shown to operators (explanations, top offenders) as keyed hashes (KeyNames), never as
  // they are.
  bool hide_keys = false;
  // The top N keys of each rule limit as Prometheus series; 0: none.
  int top_metrics = 0;
  // The operator's page at /ui/ on the HTTP listener (server/ui/); needs admin_token_file.
  bool ui = false;
  // Rules from an xDS management server at HOST:PORT instead of --config (daemon_xds.cc); the
  // rest are its options (xds::Options), as text where they take parsing.
  std::string xds;
  xds::Options xds_options;
  std::string xds_node_metadata;  // "k=v,k2=v2"
  std::string xds_headers;        // "k:v,k2:v2"
  std::string xds_backoff_initial = "10s";
  std::string xds_backoff_max = "60s";
  // Serve before the first set of rules arrives (their FORCE_START_WITHOUT_INITIAL_CONFIG);
  // without it, sluiced listens only once one is in force.
  bool xds_force_start = false;
};

class Daemon {
 public:
  explicit Daemon(Flags flags) : flags_(std::move(flags)) {}

  // Serves until SIGTERM or SIGINT; 0 after a clean stop, 1 when it stopped but could not
  // write the snapshot (the counts are lost; logged), 2 when it cannot start (the reason
  // logged).
  int Run();

 private:
  // The flags that take parsing, parsed (ParseFlags).
  struct Settings {
    Micros snapshot_interval{0};
    Micros watch_interval{0};
    Micros drain{0};
    HostPort http;
    HostPort grpc;
    std::optional<HostPort> debug;
  };

  absl::Status Open();                           // The store, the service, the rules.
  absl::StatusOr<Settings> ParseFlags() const;   // After Open: --snapshot needs the memory store.
  absl::Status Start(const Settings& settings);  // The listeners.
  absl::Status StartDebug(const HostPort& debug);
  // Envoy's API on its engine, `threads` event loops for h2 (daemon_grpc.cc).
  absl::Status StartGrpc(const Settings& settings, HeaderOptions envoy_headers, int threads);
  absl::Status StartStatsd();  // --statsd: the sink, until the daemon is destroyed.
  void Serve(boost::asio::signal_set& signals, const Settings& settings);  // The control loop.
  int Drain(Micros drain);                                                 // Run's exit code.
  void StopListeners(Micros drain);

  absl::Status OpenStore();
  absl::Status OpenMemcached();  // daemon_memcached.cc
  std::string StoreDescription() const;
  std::string StoreMetrics() const;
  // For /healthz (the store and whether decisions can be made) and /healthcheck (OK while
  // sluiced can decide).
  HttpApi::HealthReport Health() const;
  HttpApi::HealthReport StoreHealth() const;
  void PublishHealth();  // gRPC's health service says what /healthcheck says, every second.
  // daemon_ui.cc: api_'s admin token and the top offenders' counting, and --ui: the page over
  // api_, with `admin`, and its charts' samples, every second from the control loop.
  absl::Status SetUpAdmin();
  void MakeOperatorPage(const AdminToken& admin);
  void SampleHistory();

  // --config's files, or a set `pushed` by xDS (file name, text).
  absl::StatusOr<std::shared_ptr<const RuleSet>> LoadRules(
      const std::vector<std::pair<std::string, std::string>>* pushed = nullptr);
  // The limits the rules LoadRules loads replace (RuleLoadOptions::previous).
  std::shared_ptr<const LimitHistory> Previous() const;
  std::string Version() const;          // What identifies the rules' files as they are now.
  void RequestReload(std::string why);  // On the control loop: the reload runs elsewhere.
  void ApplyRules(Reloader::Rules rules, const std::string& why);  // On the reloader's thread.
  // daemon_xds.cc: --xds's client started, and unless --xds-force-start, the wait for its first
  // set (false: a signal stopped the wait); a pushed set put in force as a reload's would be.
  absl::Status StartXds();
  std::string RulesSource() const;  // For the log: xDS's server, --config, or "no config".
  bool AwaitFirstXdsSet(boost::asio::signal_set& signals);
  void StopXds();  // No more sets put in force; returns once none can be.
  absl::Status ApplyXds(const std::vector<std::pair<std::string, std::string>>& files,
                        const std::string& version);
  void WaitForSignal(boost::asio::signal_set& signals);
  void Watch(Micros interval);
  void SnapshotEvery(Micros interval);
  bool SaveSnapshot();  // False when the snapshot could not be written (logged).

  Flags flags_;
  Metrics metrics_;
  std::unique_ptr<Store> store_;
  MemoryStore* memory_ = nullptr;        // store_, when it is the memory store.
  RedisStore* redis_ = nullptr;          // store_, when it is Redis.
  MemcachedStore* memcached_ = nullptr;  // store_, when it is Memcached.
  AsioTimers timers_;                    // Acquire's waits; outlives the service.
  std::unique_ptr<RateLimitService> service_;
  std::unique_ptr<HttpApi> api_;
  KeyNames metric_key_names_;           // How --top-metrics names keys on /metrics (always hashed).
  RateHistory history_;                 // The page's charts (with --ui).
  std::unique_ptr<OperatorPage> page_;  // Only with --ui: server_ serves it, over api_.
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<DebugApi> debug_api_;
  std::unique_ptr<HttpServer> debug_server_;  // Only with --debug.
  std::unique_ptr<EnvoyGrpcService> envoy_;
  GrpcServer grpc_server_;
  boost::asio::io_context control_{1};
  boost::asio::steady_timer watch_timer_{control_};
  boost::asio::steady_timer snapshot_timer_{control_};
  boost::asio::steady_timer health_timer_{control_};
  boost::asio::steady_timer history_timer_{control_};
  std::string config_version_;         // The control loop's: what the last reload was asked for.
  std::atomic<bool> stopping_{false};  // SIGTERM received: /healthcheck fails, as theirs.
  // With --config, from Serve on; destroyed before what its loads use.
  std::unique_ptr<Reloader> reloader_;
  // With --xds, from Run on; stopped before what its sets use.
  std::unique_ptr<xds::Client> xds_;
  std::atomic<bool> xds_in_force_{false};  // A set from xDS has been put in force.
  // Last: destroyed first, after the drain; its final flush sends what the last requests
  // counted, reading the members above.
  std::unique_ptr<StatsdSink> statsd_;
};

// --redis-timeout and --redis-on-failure, which the Memcached store takes as Redis does.
// InvalidArgument naming the flag.
absl::Status ParseStoreFailure(const Flags& flags, std::chrono::milliseconds& timeout,
                               FailurePolicy& policy);
// /metrics' lines for the Memcached store (daemon_memcached.cc).
std::string MemcachedMetrics(const MemcachedStoreStats& stats);
// A shared store's servers lost and back, into sluiced's log (issue 19: an outage was silent).
StoreLogSink StoreLogToSpdlog();
// /healthz's store part for Memcached (daemon_memcached.cc).
HttpApi::HealthReport MemcachedHealth(const MemcachedStoreStats& stats,
                                      std::string_view on_failure);

}  // namespace sluice::server
