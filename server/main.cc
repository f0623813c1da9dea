// sluiced: the rate limit server. Flags in docs/server.md; `sluiced --help` lists them.
//
// The main thread is the control loop: signals (SIGTERM/SIGINT drain and stop, SIGHUP
// reloads the rules), the rule file watch, and the snapshot timer. The HTTP event loops run
// on threads of their own (HttpServer).

#include <sys/stat.h>

#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/signal_set.hpp"
#include "boost/asio/steady_timer.hpp"
#include "fmt/format.h"
#include "grpcpp/server.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

#include "server/grpc/envoy_service.h"
#include "server/http/api.h"
#include "server/http/server.h"
#include "server/metrics.h"
#include "server/rules/rules.h"
#include "server/service.h"
#include "sluice/duration.h"
#include "sluice/memory_store.h"
#include "sluice/redis_store.h"
#include "src/core/status.h"

namespace sluice::server {
namespace {

namespace asio = boost::asio;

struct Flags {
  std::string config;
  std::string http = "127.0.0.1:8080";
  std::string grpc = "127.0.0.1:8081";
  std::string store = "memory";
  int threads = 0;
  size_t max_keys = 10'000'000;
  std::string snapshot;
  std::string snapshot_interval = "0";
  std::string watch_interval = "1s";
  std::string drain = "5s";
  std::string log_level = "info";
  bool shadow_mode = false;
  bool response_headers = false;
  bool quota_mode = false;
  bool dynamic_metadata = false;
  bool stop_counting_over_limit = false;
  std::string header_limit = "RateLimit-Limit";
  std::string header_remaining = "RateLimit-Remaining";
  std::string header_reset = "RateLimit-Reset";
  std::optional<std::string> cache_key_prefix;
  std::string redis_timeout = "100ms";
  std::string redis_on_failure = "deny";
  int redis_connections = 2;
  GrpcTlsOptions grpc_tls;    // --grpc-tls-cert, --grpc-tls-key, --grpc-tls-client-ca, -san
  RedisTlsOptions redis_tls;  // --redis-tls-ca, --redis-tls-cert, --redis-tls-key
  bool redis_tls_skip_verify = false;
};

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// The flags that take parsing, parsed (Daemon::ParseFlags).
struct Settings {
  Micros snapshot_interval{0};
  Micros watch_interval{0};
  Micros drain{0};
  HostPort http;
  HostPort grpc;
};

// "127.0.0.1:8080", "[::1]:8080", ":8080" (all addresses of loopback's family default).
absl::StatusOr<HostPort> ParseHostPort(std::string_view flag, std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    return absl::InvalidArgumentError(fmt::format("{} '{}': expected HOST:PORT", flag, text));
  }
  std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  unsigned port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535) {
    return absl::InvalidArgumentError(
        fmt::format("{} '{}': '{}' is not a port number", flag, text, port_text));
  }
  return HostPort{.host = host.empty() ? "0.0.0.0" : std::string(host),
                  .port = static_cast<uint16_t>(port)};
}

// What identifies a version of the rules file: its modification time and size (a directory's
// time changes when a file is added or removed; its files' are checked too).
std::string FileVersion(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    return "missing";
  }
  return fmt::format("{}.{}:{}", info.st_mtim.tv_sec, info.st_mtim.tv_nsec, info.st_size);
}

class Daemon {
 public:
  explicit Daemon(Flags flags) : flags_(std::move(flags)) {}

  int Run() {
    // Logs go to stderr, so that stdout stays free and errors land where scripts look.
    spdlog::set_default_logger(spdlog::stderr_color_mt("sluiced"));
    spdlog::set_level(spdlog::level::from_str(flags_.log_level));
    // Signals are caught from here on, before anything is served: a SIGTERM that arrives
    // while the server starts still stops it cleanly (drain, snapshot).
    asio::signal_set signals(control_, SIGINT, SIGTERM, SIGHUP);
    if (absl::Status s = Open(); !s.ok()) {
      return Refuse(internal::Message(s));
    }
    absl::StatusOr<Settings> settings = ParseFlags();
    if (!settings.ok()) {
      return Refuse(internal::Message(settings.status()));
    }
    LoadSnapshot();
    if (absl::Status s = Start(*settings); !s.ok()) {
      return Refuse(internal::Message(s));
    }
    Serve(signals, *settings);
    Drain(settings->drain);
    return 0;
  }

 private:
  // The store, the service over it, and the rules of --config.
  absl::Status Open() {
    if (absl::Status s = OpenStore(); !s.ok()) {
      return s;
    }
    service_ = std::make_unique<RateLimitService>(
        *store_, SystemClock(), metrics_, &timers_,
        EnvoySettings{.count_over_limit = !flags_.stop_counting_over_limit,
                      .quota_mode = flags_.quota_mode,
                      .shadow_mode = flags_.shadow_mode});
    if (!flags_.config.empty()) {
      absl::StatusOr<std::shared_ptr<const RuleSet>> rules = LoadRules();
      if (!rules.ok()) {
        return rules.status();
      }
      config_version_ = Version();
      service_->SetRules(*std::move(rules));
    }
    return absl::OkStatus();
  }

  // The flags that take parsing, after Open: --snapshot needs the memory store.
  absl::StatusOr<Settings> ParseFlags() const {
    absl::StatusOr<Micros> snapshot_interval = ParseDuration(flags_.snapshot_interval);
    absl::StatusOr<Micros> watch_interval = ParseDuration(flags_.watch_interval);
    absl::StatusOr<Micros> drain = ParseDuration(flags_.drain);
    for (const auto* parsed : {&snapshot_interval, &watch_interval, &drain}) {
      if (!parsed->ok()) {
        return parsed->status();
      }
    }
    if (*snapshot_interval > Micros{0} && flags_.snapshot.empty()) {
      return absl::InvalidArgumentError("--snapshot-interval needs --snapshot FILE");
    }
    if (!flags_.snapshot.empty() && memory_ == nullptr) {
      return absl::InvalidArgumentError(
          "--snapshot is for the memory store: Redis keeps its own state");
    }
    absl::StatusOr<HostPort> http = ParseHostPort("--http", flags_.http);
    if (!http.ok()) {
      return http.status();
    }
    absl::StatusOr<HostPort> grpc = ParseHostPort("--grpc", flags_.grpc);
    if (!grpc.ok()) {
      return grpc.status();
    }
    return Settings{.snapshot_interval = *snapshot_interval,
                    .watch_interval = *watch_interval,
                    .drain = *drain,
                    .http = *std::move(http),
                    .grpc = *std::move(grpc)};
  }

  // The HTTP and gRPC servers, listening. When gRPC cannot start, HTTP is stopped first.
  absl::Status Start(const Settings& settings) {
    const HostPort& http = settings.http;
    const HostPort& grpc = settings.grpc;
    api_ = std::make_unique<HttpApi>(*service_, metrics_, SystemClock(),
                                     [this] { return StoreMetrics(); });
    const int threads = flags_.threads > 0
                            ? flags_.threads
                            : static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
    server_ = std::make_unique<HttpServer>(
        *api_, HttpServerOptions{.host = http.host, .port = http.port, .threads = threads});
    if (absl::Status s = server_->Start(); !s.ok()) {
      return s;
    }
    spdlog::info(
        "sluiced listening on http://{}:{} with {} event loop(s); {} domain(s) from {}; {}",
        http.host, server_->port(), threads, service_->rules()->domains().size(),
        flags_.config.empty() ? "no config" : flags_.config, StoreDescription());
    envoy_ = std::make_unique<EnvoyGrpcService>(
        *service_, EnvoyOptions{.response_headers = flags_.response_headers,
                                .limit_header = flags_.header_limit,
                                .remaining_header = flags_.header_remaining,
                                .reset_header = flags_.header_reset,
                                .dynamic_metadata = flags_.dynamic_metadata});
    int grpc_port = 0;
    absl::StatusOr<std::unique_ptr<grpc::Server>> grpc_server = StartGrpcServer(
        grpc.host.find(':') == std::string::npos ? fmt::format("{}:{}", grpc.host, grpc.port)
                                                 : fmt::format("[{}]:{}", grpc.host, grpc.port),
        *envoy_, grpc_port, flags_.grpc_tls);
    if (!grpc_server.ok()) {
      service_->StopWaiting();
      server_->Stop(Micros{0});
      service_->WaitIdle();
      return grpc_server.status();
    }
    grpc_server_ = *std::move(grpc_server);
    spdlog::info("sluiced serving Envoy's rate limit API on grpc://{}:{}{}{}", grpc.host, grpc_port,
                 !flags_.grpc_tls.enabled() ? ""
                 : flags_.grpc_tls.client_ca_file.empty()
                     ? " over TLS"
                     : " over TLS, client certificates required",
                 flags_.shadow_mode ? " in shadow mode (never OVER_LIMIT overall)" : "");
    return absl::OkStatus();
  }

  // Runs the control loop until SIGTERM or SIGINT: signals, the rules file watch, snapshots.
  void Serve(asio::signal_set& signals, const Settings& settings) {
    WaitForSignal(signals);
    if (!flags_.config.empty() && settings.watch_interval > Micros{0}) {
      Watch(settings.watch_interval);
    }
    if (settings.snapshot_interval > Micros{0}) {
      SnapshotEvery(settings.snapshot_interval);
    }
    control_.run();
  }

  // Stops taking requests, lets those in flight finish (up to `drain`), writes the snapshot.
  void Drain(Micros drain) {
    spdlog::info("stopping: draining requests in flight (up to {})", FormatDuration(drain));
    service_->StopWaiting();  // Acquires waiting to go ahead are told 503 now.
    grpc_server_->Shutdown(std::chrono::system_clock::now() + drain);
    server_->Stop(drain);
    // A decision still waiting for Redis past the drain ends (within --redis-timeout) before
    // anything its callback uses is torn down.
    service_->WaitIdle();
    SaveSnapshot();
    spdlog::info("stopped");
  }

  // The store --store names: the memory store, or Redis (connecting in the background: until
  // it answers, the failure policy decides).
  absl::Status OpenStore() {
    if (flags_.store == "memory") {
      auto memory = std::make_unique<MemoryStore>(MemoryStoreOptions{.max_keys = flags_.max_keys});
      memory_ = memory.get();
      store_ = std::move(memory);
      return absl::OkStatus();
    }
    if (!flags_.store.starts_with("redis") && !flags_.store.starts_with("unix://")) {
      return absl::InvalidArgumentError(fmt::format(
          "--store '{}': expected memory or redis://[user:password@]host:port[/db] (or rediss:// "
          "over TLS, redis+cluster://, rediss+cluster://, unix:///path/to/redis.sock[?db=N])",
          RedactRedisUrl(flags_.store)));
    }
    absl::StatusOr<RedisStoreOptions> options = ParseRedisUrl(flags_.store);
    if (!options.ok()) {
      return options.status();
    }
    absl::StatusOr<Micros> timeout = ParseDuration(flags_.redis_timeout);
    if (!timeout.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("--redis-timeout: {}", internal::Message(timeout.status())));
    }
    absl::StatusOr<FailurePolicy> policy = ParseFailurePolicy(flags_.redis_on_failure);
    if (!policy.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("--redis-on-failure: {}", internal::Message(policy.status())));
    }
    options->timeout = std::chrono::ceil<std::chrono::milliseconds>(*timeout);
    options->on_failure = *policy;
    options->connections = flags_.redis_connections;
    if (flags_.cache_key_prefix) {
      options->key_prefix = *flags_.cache_key_prefix;
    }
    const bool tls = options->tls.enabled;  // The URL's say; the files are the flags'.
    options->tls = flags_.redis_tls;
    options->tls.enabled = tls;
    options->tls.verify_hostname = !flags_.redis_tls_skip_verify;
    absl::StatusOr<std::unique_ptr<RedisStore>> redis = RedisStore::Create(*options);
    if (!redis.ok()) {
      return absl::InvalidArgumentError(fmt::format("--store {}: {}", RedactRedisUrl(flags_.store),
                                                    internal::Message(redis.status())));
    }
    redis_ = redis->get();
    store_ = *std::move(redis);
    return absl::OkStatus();
  }

  std::string StoreDescription() const {
    if (memory_ != nullptr) {
      return fmt::format("memory store (max {} keys)", flags_.max_keys);
    }
    return fmt::format("Redis store {} ({} connection(s), timeout {}, on failure {})",
                       RedactRedisUrl(flags_.store), flags_.redis_connections, flags_.redis_timeout,
                       flags_.redis_on_failure);
  }

  static int Refuse(std::string_view message) {
    spdlog::error("{}", message);
    return 2;
  }

  absl::StatusOr<std::shared_ptr<const RuleSet>> LoadRules() {
    return RuleSet::Load(flags_.config, metrics_.rules(),
                         [this](const Limit& limit) { return store_->CheckLimit(limit); });
  }

  std::string Version() const {
    std::string version = FileVersion(flags_.config);
    struct stat info {};
    if (stat(flags_.config.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
      std::error_code ec;
      for (const auto& entry : std::filesystem::directory_iterator(flags_.config, ec)) {
        version += FileVersion(entry.path().string());
      }
    }
    return version;
  }

  void Reload(std::string_view why) {
    // The version before the load: an edit made while loading is then seen by the next look.
    config_version_ = Version();
    absl::StatusOr<std::shared_ptr<const RuleSet>> rules = LoadRules();
    if (!rules.ok()) {
      metrics_.CountReload(false);
      spdlog::error("reload ({}) refused, keeping the rules in force: {}", why,
                    internal::Message(rules.status()));
      return;
    }
    service_->SetRules(*std::move(rules));
    metrics_.CountReload(true);
    spdlog::info("reloaded {} ({}): {} domain(s)", flags_.config, why,
                 service_->rules()->domains().size());
  }

  void WaitForSignal(asio::signal_set& signals) {
    signals.async_wait([this, &signals](const boost::system::error_code& ec, int signal) {
      if (ec) {
        return;
      }
      if (signal == SIGHUP) {
        if (!flags_.config.empty()) {
          Reload("SIGHUP");
        }
        WaitForSignal(signals);
        return;
      }
      spdlog::info("received {}", signal == SIGTERM ? "SIGTERM" : "SIGINT");
      control_.stop();
    });
  }

  void Watch(Micros interval) {
    watch_timer_.expires_after(interval);
    watch_timer_.async_wait([this, interval](const boost::system::error_code& ec) {
      if (ec) {
        return;
      }
      if (Version() != config_version_) {
        Reload("file changed");
      }
      Watch(interval);
    });
  }

  void SnapshotEvery(Micros interval) {
    snapshot_timer_.expires_after(interval);
    snapshot_timer_.async_wait([this, interval](const boost::system::error_code& ec) {
      if (ec) {
        return;
      }
      SaveSnapshot();
      SnapshotEvery(interval);
    });
  }

  void LoadSnapshot() {
    if (flags_.snapshot.empty()) {
      return;
    }
    absl::StatusOr<size_t> loaded = memory_->LoadSnapshot(flags_.snapshot, SystemClock().Now());
    if (loaded.ok()) {
      spdlog::info("loaded {} key(s) from snapshot {}", *loaded, flags_.snapshot);
    } else if (loaded.status().code() == absl::StatusCode::kNotFound) {
      spdlog::info("no snapshot at {} yet: starting empty", flags_.snapshot);
    } else {
      spdlog::warn("ignoring snapshot: {}", internal::Message(loaded.status()));
    }
  }

  void SaveSnapshot() {
    if (flags_.snapshot.empty()) {
      return;
    }
    if (absl::Status s = memory_->SaveSnapshot(flags_.snapshot); !s.ok()) {
      spdlog::error("snapshot failed: {}", internal::Message(s));
      return;
    }
    spdlog::debug("snapshot written to {}", flags_.snapshot);
  }

  std::string StoreMetrics() const {
    if (redis_ != nullptr) {
      const RedisStoreStats stats = redis_->Stats();
      return fmt::format(
          "# HELP sluice_redis_calls_total Decisions asked of the Redis store.\n"
          "# TYPE sluice_redis_calls_total counter\nsluice_redis_calls_total {}\n"
          "# HELP sluice_redis_script_calls_total Script calls sent (fewer when batched).\n"
          "# TYPE sluice_redis_script_calls_total counter\nsluice_redis_script_calls_total {}\n"
          "# HELP sluice_redis_failures_total Decisions Redis did not answer in time.\n"
          "# TYPE sluice_redis_failures_total counter\nsluice_redis_failures_total {}\n"
          "# HELP sluice_redis_fallbacks_total Failures decided by the allow or local policy.\n"
          "# TYPE sluice_redis_fallbacks_total counter\nsluice_redis_fallbacks_total {}\n"
          "# HELP sluice_redis_reconnects_total Connections to Redis opened again.\n"
          "# TYPE sluice_redis_reconnects_total counter\nsluice_redis_reconnects_total {}\n"
          "# HELP sluice_redis_connections_ready Connections to Redis up now.\n"
          "# TYPE sluice_redis_connections_ready gauge\nsluice_redis_connections_ready {}\n",
          stats.calls, stats.script_calls, stats.failures, stats.fallbacks, stats.reconnects,
          stats.connections_ready);
    }
    const MemoryStoreStats stats = memory_->Stats();
    return fmt::format(
        "# HELP sluice_store_keys Keys holding state in the memory store.\n"
        "# TYPE sluice_store_keys gauge\nsluice_store_keys {}\n"
        "# HELP sluice_store_reclaimed_total Keys dropped because their state had reset.\n"
        "# TYPE sluice_store_reclaimed_total counter\nsluice_store_reclaimed_total {}\n"
        "# HELP sluice_store_evicted_total Keys evicted, still holding state, to make room.\n"
        "# TYPE sluice_store_evicted_total counter\nsluice_store_evicted_total {}\n",
        stats.keys, stats.reclaimed, stats.evicted);
  }

  Flags flags_;
  Metrics metrics_;
  std::unique_ptr<Store> store_;
  MemoryStore* memory_ = nullptr;  // store_, when it is the memory store.
  RedisStore* redis_ = nullptr;    // store_, when it is Redis.
  AsioTimers timers_;              // Acquire's waits; outlives the service.
  std::unique_ptr<RateLimitService> service_;
  std::unique_ptr<HttpApi> api_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<EnvoyGrpcService> envoy_;
  std::unique_ptr<grpc::Server> grpc_server_;
  asio::io_context control_{1};
  asio::steady_timer watch_timer_{control_};
  asio::steady_timer snapshot_timer_{control_};
  std::string config_version_;
};

int Main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"sluiced: the sluice rate limit server (docs/server.md)"};
  app.add_option("--config", flags.config, "Rules: a YAML file, or a directory of them");
  app.add_option("--http", flags.http, "HTTP listen address HOST:PORT")->capture_default_str();
  app.add_option("--grpc", flags.grpc, "gRPC listen address HOST:PORT")->capture_default_str();
  app.add_option("--store", flags.store, "memory, or redis://[user:pass@]host:port[/db]")
      ->capture_default_str();
  app.add_option("--redis-timeout", flags.redis_timeout, "How long a decision waits for Redis")
      ->capture_default_str();
  app.add_option("--redis-on-failure", flags.redis_on_failure,
                 "When Redis does not answer in time: allow, deny (an error) or local")
      ->capture_default_str();
  app.add_option("--redis-connections", flags.redis_connections, "Connections to Redis")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
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
  app.add_option("--threads", flags.threads, "HTTP event loops (default: one per core)");
  app.add_option("--max-keys", flags.max_keys, "Memory store capacity in keys (0: unbounded)")
      ->capture_default_str();
  app.add_option("--snapshot", flags.snapshot,
                 "Memory store snapshot file: loaded at start, written at shutdown");
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
  app.add_flag("--shadow-mode", flags.shadow_mode,
               "Envoy API: never answer OVER_LIMIT overall (statuses still do)");
  app.add_flag("--response-headers", flags.response_headers,
               "Envoy API: add RateLimit-Limit, -Remaining, -Reset to responses");
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
  app.add_option("--cache-key-prefix", flags.cache_key_prefix,
                 "Redis store: the prefix of every key (default sluice:)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
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
