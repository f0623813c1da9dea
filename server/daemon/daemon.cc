#include "server/daemon/daemon.h"

#include <sys/stat.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

#include "server/daemon/environment_values.h"
#include "server/daemon/fleet_history.h"
#include "server/daemon/snapshot_file.h"
#include "server/grpc/listener.h"
#include "sluice/duration.h"
#include "src/core/status.h"

namespace sluice::server {
namespace {

namespace asio = boost::asio;

// What identifies a version of a rules file or directory: its modification time and size (a
// directory's time changes when a file is added or removed; its files' are checked too), and
// its inode, so that a directory swapped in through a symlink (envoyproxy/ratelimit's
// deployments swap RUNTIME_ROOT's `current`) is seen even when its times and sizes are the old
// one's, as a copy that keeps times makes them.
std::string FileVersion(const std::string& path) {
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    return "missing";
  }
  return fmt::format("{}.{}:{}@{}.{};", info.st_mtim.tv_sec, info.st_mtim.tv_nsec, info.st_size,
                     info.st_dev, info.st_ino);
}

// Whether a wait of the control loop ended without its event: cancelled at shutdown (said
// nothing), or failed, which ends what it drives (said, as the operator needs to know).
bool Ended(const boost::system::error_code& ec, std::string_view what) {
  if (ec && ec != asio::error::operation_aborted) {
    spdlog::error("{} stopped: {}", what, ec.message());
  }
  return static_cast<bool>(ec);
}

int Refuse(std::string_view message) {
  spdlog::error("{}", message);
  return 2;
}

}  // namespace

int Daemon::Run() {
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
  if (!flags_.snapshot.empty()) {
    if (absl::Status s = OpenSnapshot(*memory_, flags_.snapshot, flags_.snapshot_discard_corrupt,
                                      SystemClock().Now());
        !s.ok()) {
      return Refuse(internal::Message(s));
    }
  }
  if (absl::Status s = StartStatsd(); !s.ok()) {
    return Refuse(internal::Message(s));
  }
  if (absl::Status s = StartXds(); !s.ok()) {
    return Refuse(internal::Message(s));
  }
  if (!AwaitFirstXdsSet(signals)) {
    return 0;  // Stopped by a signal while waiting.
  }
  if (absl::Status s = Start(*settings); !s.ok()) {
    return Refuse(internal::Message(s));
  }
  Serve(signals, *settings);
  StopXds();  // No set is put in force during the drain.
  // A reload still loading is discarded, and not waited for: the drain starts now.
  const bool reload_ended = reloader_ == nullptr || reloader_->Stop();
  const int code = Drain(settings->drain);
  if (!reload_ended) {
    // Its thread is still inside the parser, using the store and the metrics: end the process
    // here rather than destroy them under it (or wait for a parse that may never end).
    spdlog::warn("exiting without waiting for the reload still reading {}", flags_.config);
    statsd_.reset();    // Its last flush.
    grpc_server_ = {};  // The private copy of the TLS key removed (CertificateWatch).
    // Flushed, not shut down: the reload's thread and the store's may still log, and a logger
    // dropped under them would crash the exit.
    spdlog::default_logger()->flush();
    std::_Exit(code);
  }
  return code;
}

// The store, the service over it, and the rules of --config.
absl::Status Daemon::Open() {
  if (absl::Status s = OpenStore(); !s.ok()) {
    return s;
  }
  metrics_.rules().set_near_limit_ratio(flags_.near_limit_ratio);
  service_ = std::make_unique<RateLimitService>(
      *store_, SystemClock(), metrics_, &timers_,
      EnvoySettings{.count_over_limit = !flags_.stop_counting_over_limit,
                    .stop_others_over_limit = flags_.stop_others_over_limit,
                    .quota_mode = flags_.quota_mode,
                    .shadow_mode = flags_.shadow_mode});
  ReceiptSigner signer = ReceiptSigner::Random();
  if (!flags_.secret_file.empty()) {
    absl::StatusOr<ReceiptSigner> from_file = ReceiptSigner::FromFile(flags_.secret_file);
    if (!from_file.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("--secret-file: {}", internal::Message(from_file.status())));
    }
    signer = *std::move(from_file);
  }
  // Receipts settle only on the store that charged them (ReceiptSigner::ForStore): a shared
  // store is named by --store and the key prefix, which a fleet's servers share; a memory
  // store is this process's alone, and its receipts die with it.
  const std::string store_name =
      flags_.store == "memory"
          ? "memory " + NewReceiptId()
          : fmt::format("{} {}", flags_.store, flags_.cache_key_prefix.value_or("sluice:"));
  service_->SetReceiptSigner(signer.ForStore(store_name));
  service_->SetKeyNames(KeyNames(flags_.hide_keys));
  // /metrics needs no token: the keys of --top-metrics are always hashed there, with the
  // service's secret when it hides keys (so that they match GET /v1/top's), else one of their own.
  metric_key_names_ = flags_.hide_keys ? service_->key_names() : KeyNames(/*hide=*/true);
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

absl::StatusOr<Daemon::Settings> Daemon::ParseFlags() const {
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
  if (flags_.memory_compact_keys && memory_ == nullptr) {
    return absl::InvalidArgumentError(
        "--memory-compact-keys is for the memory store (--store memory)");
  }
  if (flags_.memory_compact_keys && !flags_.snapshot.empty()) {
    return absl::InvalidArgumentError(
        "--snapshot cannot be used with --memory-compact-keys: the store keeps fingerprints of "
        "the keys, not the keys, so it has nothing a snapshot could name them by");
  }
  Settings settings{
      .snapshot_interval = *snapshot_interval, .watch_interval = *watch_interval, .drain = *drain};
  for (const auto& [flag, text, address] : {std::tuple{"--http", flags_.http, &settings.http},
                                            std::tuple{"--grpc", flags_.grpc, &settings.grpc}}) {
    absl::StatusOr<HostPort> parsed = ListenAddress(flag, text);
    if (!parsed.ok()) {
      return parsed.status();
    }
    *address = *std::move(parsed);
  }
  if (!flags_.debug.empty()) {
    absl::StatusOr<HostPort> debug = ListenAddress("--debug", flags_.debug);
    if (!debug.ok()) {
      return debug.status();
    }
    settings.debug = *std::move(debug);
  }
  return settings;
}

// The HTTP, gRPC and debug listeners. When one cannot start, those started are stopped.
absl::Status Daemon::Start(const Settings& settings) {
  const HostPort& http = settings.http;
  const std::optional<HeaderFormat> format = ParseHeaderFormat(flags_.ratelimit_headers);
  HeaderOptions envoy_headers{.format = format.value_or(HeaderFormat::kDraft06),
                              .limit_name = flags_.header_limit,
                              .remaining_name = flags_.header_remaining,
                              .reset_name = flags_.header_reset};
  api_ = std::make_unique<HttpApi>(
      *service_, metrics_, SystemClock(),
      [this] {
        return StoreMetrics() +
               fmt::format(
                   "# HELP sluice_caller_limits_in_use Distinct limits callers have in "
                   "use (at most {}).\n# TYPE sluice_caller_limits_in_use gauge\n"
                   "sluice_caller_limits_in_use {}\n",
                   kMaxCallerLimits, service_->caller_limits_in_use()) +
               (flags_.top_metrics > 0
                    ? metrics_.RenderTop(
                          static_cast<size_t>(flags_.top_metrics), SystemClock().Now(),
                          [this](std::string_view key) { return metric_key_names_.Show(key); })
                    : std::string());
      },
      [this] { return Health(); },
      HeaderOptions{.format = format.value_or(HeaderFormat::kDraftIetf)});
  api_->SetEnvoyHeaders(flags_.response_headers ? std::optional(envoy_headers) : std::nullopt);
  if (absl::Status s = SetUpAdmin(); !s.ok()) {
    return s;
  }
  const int threads = flags_.threads > 0
                          ? flags_.threads
                          : static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  // gRPC's address is tried before anything listens: one in use (a second sluiced, on another
  // --http) stops sluiced with one line, not a "listening" line and then gRPC's own error.
  const std::string grpc_address = env::JoinHostPort(settings.grpc.host, settings.grpc.port);
  if (absl::Status s = WhyNotListening(grpc_address); !s.ok()) {
    return absl::Status(
        s.code(), fmt::format("{}; --grpc HOST:PORT sets another address", internal::Message(s)));
  }
  server_ = std::make_unique<HttpServer>(
      page_ != nullptr ? static_cast<HttpHandler&>(*page_) : *api_,
      HttpServerOptions{.host = http.host, .port = http.port, .threads = threads});
  if (absl::Status s = server_->Start(); !s.ok()) {
    return s;
  }
  spdlog::info("sluiced listening on http://{}:{} with {} event loop(s); {} domain(s) from {}; {}",
               http.host, server_->port(), threads, service_->rules()->domains().size(),
               RulesSource(), StoreDescription());
  if (page_ != nullptr) {
    spdlog::info(
        "the operator's page: http://{}:{}/ui/ (any user name; the admin token as the "
        "password)",
        http.host, server_->port());
  }
  if (absl::Status s = StartGrpc(settings, std::move(envoy_headers), threads); !s.ok()) {
    StopListeners(Micros{0});
    return s;
  }
  if (settings.debug) {
    if (absl::Status s = StartDebug(*settings.debug); !s.ok()) {
      StopListeners(Micros{0});
      return s;
    }
  }
  return absl::OkStatus();
}

// The debug listener: an HttpServer of its own, one event loop, over DebugApi.
absl::Status Daemon::StartDebug(const HostPort& debug) {
  debug_api_ = std::make_unique<DebugApi>(*service_, api_.get());
  debug_server_ = std::make_unique<HttpServer>(
      *debug_api_, HttpServerOptions{.host = debug.host, .port = debug.port, .threads = 1});
  if (absl::Status s = debug_server_->Start(); !s.ok()) {
    return absl::Status(s.code(), fmt::format("--debug: {}", internal::Message(s)));
  }
  spdlog::info("sluiced debug pages (/rlconfig, POST /json) on http://{}:{}", debug.host,
               debug_server_->port());
  return absl::OkStatus();
}

// envoyproxy/ratelimit's stats over statsd (--statsd), sent until the daemon is destroyed.
absl::Status Daemon::StartStatsd() {
  if (flags_.statsd.empty()) {
    return absl::OkStatus();
  }
  absl::StatusOr<HostPort> address = ParseHostPort("--statsd", flags_.statsd);
  absl::StatusOr<Micros> interval = ParseDuration(flags_.statsd_interval);
  if (!address.ok()) {
    return address.status();
  }
  if (!interval.ok() || *interval <= Micros{0}) {
    return absl::InvalidArgumentError(
        fmt::format("--statsd-interval '{}': {}", flags_.statsd_interval,
                    interval.ok() ? "must be positive" : internal::Message(interval.status())));
  }
  absl::StatusOr<std::unique_ptr<StatsdSink>> sink = StatsdSink::Start(
      {.host = address->host, .port = address->port, .interval = *interval}, [this] {
        return EnvoyStats(
            metrics_,
            {.loaded_at_start = !flags_.config.empty(),
             .redis_connections =
                 redis_ == nullptr ? std::nullopt
                                   : std::optional<uint64_t>(redis_->Stats().connections_ready)});
      });
  if (!sink.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("--statsd '{}': {}", flags_.statsd, internal::Message(sink.status())));
  }
  statsd_ = *std::move(sink);
  spdlog::info("sending statistics to statsd {} every {}", statsd_->destination(),
               FormatDuration(*interval));
  return absl::OkStatus();
}

// Stops what Start started: the gRPC server (up to `drain`), then the HTTP listeners.
void Daemon::StopListeners(Micros drain) {
  service_->StopWaiting();  // Acquires waiting to go ahead are told 503 now.
  grpc_server_.Shutdown(drain);
  server_->Stop(drain);
  if (debug_server_ != nullptr) {
    debug_server_->Stop(Micros{0});
  }
  // A decision still waiting for Redis past the drain ends (within --redis-timeout) before
  // anything its callback uses is torn down.
  service_->WaitIdle();
}

// Runs the control loop until SIGTERM or SIGINT: signals, the rules' watch, snapshots, gRPC's
// health.
void Daemon::Serve(asio::signal_set& signals, const Settings& settings) {
  if (!flags_.config.empty()) {
    reloader_ = std::make_unique<Reloader>([this] { return LoadRules(); },
                                           [this](Reloader::Rules rules, const std::string& why) {
                                             ApplyRules(std::move(rules), why);
                                           });
  }
  WaitForSignal(signals);
  PublishHealth();
  if (!flags_.config.empty() && settings.watch_interval > Micros{0}) {
    Watch(settings.watch_interval);
  }
  if (settings.snapshot_interval > Micros{0}) {
    SnapshotEvery(settings.snapshot_interval);
  }
  if (page_ != nullptr) {
    SampleHistory();
  }
  control_.run();
}

// Stops taking requests, lets those in flight finish (up to `drain`), writes the snapshot.
int Daemon::Drain(Micros drain) {
  spdlog::info("stopping: draining requests in flight (up to {})", FormatDuration(drain));
  StopListeners(drain);
  if (!SaveSnapshot()) {
    spdlog::critical("stopped WITHOUT a snapshot: the counts of this run are lost; exiting 1");
    return 1;
  }
  spdlog::info("stopped");
  return 0;
}

absl::Status ParseStoreFailure(const Flags& flags, std::chrono::milliseconds& timeout,
                               FailurePolicy& policy) {
  absl::StatusOr<Micros> parsed_timeout = ParseDuration(flags.redis_timeout);
  if (!parsed_timeout.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("--redis-timeout: {}", internal::Message(parsed_timeout.status())));
  }
  absl::StatusOr<FailurePolicy> parsed_policy = ParseFailurePolicy(flags.redis_on_failure);
  if (!parsed_policy.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("--redis-on-failure: {}", internal::Message(parsed_policy.status())));
  }
  timeout = std::chrono::ceil<std::chrono::milliseconds>(*parsed_timeout);
  policy = *parsed_policy;
  return absl::OkStatus();
}

// The store --store names: the memory store, Memcached, or Redis (connecting in the
// background: until it answers, the failure policy decides).
absl::Status Daemon::OpenStore() {
  if (flags_.store == "memory") {
    auto memory = std::make_unique<MemoryStore>(
        MemoryStoreOptions{.max_keys = flags_.max_keys,
                           .max_leases = flags_.max_leases,
                           .compact_keys = flags_.memory_compact_keys});
    memory_ = memory.get();
    store_ = std::move(memory);
    return absl::OkStatus();
  }
  if (flags_.store.starts_with("memcached://")) {
    return OpenMemcached();  // daemon_memcached.cc
  }
  if (!flags_.store.starts_with("redis") && !flags_.store.starts_with("unix://")) {
    return absl::InvalidArgumentError(fmt::format(
        "--store '{}': expected memory, memcached://host:port[,host:port...] or "
        "redis://[user:password@]host:port[/db] (or rediss:// "
        "over TLS, redis+cluster://, rediss+cluster://, redis+sentinel://host:port,.../master, "
        "unix:///path/to/redis.sock[?db=N])",
        RedactRedisUrl(flags_.store)));
  }
  absl::StatusOr<RedisStoreOptions> options = ParseRedisUrl(flags_.store);
  if (!options.ok()) {
    return options.status();
  }
  if (absl::Status s = ParseStoreFailure(flags_, options->timeout, options->on_failure); !s.ok()) {
    return s;
  }
  options->connections = flags_.redis_connections;
  absl::StatusOr<Micros> deny_ttl = ParseDuration(flags_.redis_deny_cache_ttl);
  if (!deny_ttl.ok() || *deny_ttl < std::chrono::milliseconds(1)) {
    return absl::InvalidArgumentError(
        fmt::format("--redis-deny-cache-ttl '{}': {}", flags_.redis_deny_cache_ttl,
                    deny_ttl.ok() ? "must be at least 1ms" : internal::Message(deny_ttl.status())));
  }
  options->deny_cache_entries = flags_.redis_deny_cache;
  options->deny_cache_max_ttl = std::chrono::floor<std::chrono::milliseconds>(*deny_ttl);
  options->shares = flags_.redis_shares;
  options->local = {.max_keys = flags_.max_keys, .max_leases = flags_.max_leases};
  if (flags_.cache_key_prefix) {
    options->key_prefix = *flags_.cache_key_prefix;
  }
  const bool tls = options->tls.enabled;  // The URL's say; the files are the flags'.
  options->tls = flags_.redis_tls;
  options->tls.enabled = tls;
  options->tls.verify_hostname = !flags_.redis_tls_skip_verify;
  options->log = StoreLogToSpdlog();  // Redis lost (and why) and back, once per change.
  absl::StatusOr<std::unique_ptr<RedisStore>> redis = RedisStore::Create(*options);
  if (!redis.ok()) {
    return absl::InvalidArgumentError(fmt::format("--store {}: {}", RedactRedisUrl(flags_.store),
                                                  internal::Message(redis.status())));
  }
  redis_ = redis->get();
  store_ = *std::move(redis);
  return absl::OkStatus();
}

std::string Daemon::StoreDescription() const {
  if (memory_ != nullptr) {
    return fmt::format("memory store (max {} keys, {} leases)", flags_.max_keys, flags_.max_leases);
  }
  if (memcached_ != nullptr) {
    return fmt::format("Memcached store {} (timeout {}, on failure {})", flags_.store,
                       flags_.redis_timeout, flags_.redis_on_failure);
  }
  return fmt::format(
      "Redis store {} ({} connection(s), timeout {}, on failure {}, denial cache {}{})",
      RedactRedisUrl(flags_.store), flags_.redis_connections, flags_.redis_timeout,
      flags_.redis_on_failure,
      flags_.redis_deny_cache > 0
          ? fmt::format("{} entries for at most {}", flags_.redis_deny_cache,
                        flags_.redis_deny_cache_ttl)
          : "off",
      flags_.redis_shares ? ", shares on" : "");
}

std::shared_ptr<const LimitHistory> Daemon::Previous() const {
  // A reload: the rules it replaces. The first load: those the snapshot was written under.
  if (const std::shared_ptr<const RuleSet> rules = service_->rules(); !rules->domains().empty()) {
    return std::make_shared<const LimitHistory>(HistoryOf(*rules));
  }
  if (!flags_.snapshot.empty()) {
    return std::make_shared<const LimitHistory>(LoadLimitHistory(flags_.snapshot));
  }
  if (redis_ != nullptr) {
    return ReadFleetHistory(*redis_);  // A fleet on Redis: the figures its servers last loaded.
  }
  return nullptr;
}

absl::StatusOr<std::shared_ptr<const RuleSet>> Daemon::LoadRules(
    const std::vector<std::pair<std::string, std::string>>* pushed) {
  const bool first = service_->rules()->domains().empty();
  std::shared_ptr<const LimitHistory> previous = Previous();
  const LimitChecker check = [this](const Limit& limit) { return store_->CheckLimit(limit); };
  const RuleLoadOptions options{
      .merge_domains = flags_.merge_domains,
      .skip_dotfiles = flags_.skip_dotfiles,
      .no_leases = memcached_ != nullptr ? MemcachedStore::kNoLeases : "",
      // A reload's limits carry their keys' state across a change of figures.
      .previous = previous};
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
      pushed != nullptr ? RuleSet::Parse(*pushed, metrics_.rules(), check, options)
                        : RuleSet::Load(flags_.config, metrics_.rules(), check, options);
  // Before they are in force: a server of the fleet restarted from now on finds them. Not when
  // the fleet's were not read at start: written then, this server's figures, which know no
  // earlier ones, would replace the fleet's.
  if (rules.ok() && redis_ != nullptr && (!first || previous != nullptr)) {
    WriteFleetHistory(*redis_, HistoryOf(**rules));
  }
  return rules;
}

std::string Daemon::Version() const {
  // The rules files themselves (a file added, removed or changed, in a folder too), after the
  // directory's own (a swap of the root's symlink).
  std::string version = FileVersion(flags_.config);
  absl::StatusOr<std::vector<std::string>> files =
      RuleSet::Files(flags_.config, flags_.skip_dotfiles);
  for (const std::string& file : files.value_or(std::vector<std::string>{})) {
    version += file;
    version += FileVersion(file);
  }
  return version;
}

// The version is taken before the load: an edit made while loading is then seen by the next
// look. A reload asked for while one loads runs after it (Reloader).
void Daemon::RequestReload(std::string why) {
  config_version_ = Version();
  reloader_->Request(std::move(why));
}

void Daemon::ApplyRules(Reloader::Rules rules, const std::string& why) {
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

void Daemon::WaitForSignal(asio::signal_set& signals) {
  signals.async_wait([this, &signals](const boost::system::error_code& ec, int signal) {
    if (Ended(ec, "handling signals")) {
      return;
    }
    if (signal == SIGHUP) {
      if (reloader_ != nullptr) {
        RequestReload("SIGHUP");
      } else {
        spdlog::warn("SIGHUP: no --config to reload");
      }
      WaitForSignal(signals);
      return;
    }
    spdlog::info("received {}", signal == SIGTERM ? "SIGTERM" : "SIGINT");
    stopping_.store(true);  // Run stops the reloader as soon as the loop returns.
    control_.stop();
  });
}

void Daemon::Watch(Micros interval) {
  watch_timer_.expires_after(interval);
  watch_timer_.async_wait([this, interval](const boost::system::error_code& ec) {
    if (Ended(ec, "watching the rules")) {
      return;
    }
    if (Version() != config_version_) {
      RequestReload("file changed");
    }
    Watch(interval);
  });
}

void Daemon::SnapshotEvery(Micros interval) {
  snapshot_timer_.expires_after(interval);
  snapshot_timer_.async_wait([this, interval](const boost::system::error_code& ec) {
    if (Ended(ec, "writing snapshots")) {
      return;
    }
    (void)SaveSnapshot();  // Logged; the next try may succeed, and the shutdown's must.
    SnapshotEvery(interval);
  });
}

bool Daemon::SaveSnapshot() {
  if (flags_.snapshot.empty()) {
    return true;
  }
  if (absl::Status s = memory_->SaveSnapshot(flags_.snapshot); !s.ok()) {
    spdlog::error("snapshot failed: {}", internal::Message(s));
    return false;
  }
  // Beside it, the figures its states are kept under, by limit: rules changed before the next
  // start carry them (a failure loses only that, and is logged).
  if (absl::Status s = SaveLimitHistory(flags_.snapshot, HistoryOf(*service_->rules())); !s.ok()) {
    spdlog::error("snapshot's limits not written: {}", internal::Message(s));
  }
  spdlog::debug("snapshot written to {}", flags_.snapshot);
  return true;
}

}  // namespace sluice::server
