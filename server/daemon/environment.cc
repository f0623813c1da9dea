#include "server/daemon/environment.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "absl/strings/ascii.h"
#include "fmt/format.h"
#include "fmt/ranges.h"

#include "server/daemon/environment_names.h"
#include "server/daemon/environment_values.h"
#include "src/core/url_escape.h"

namespace sluice::server {
namespace {

using env::Convert;
using env::GoBool;
using env::Integer;
using env::JoinHostPort;
using env::kComposite;
using env::kIgnored;
using env::kIgnoredPrefixes;
using env::Kind;
using env::kNoEffect;
using env::kShared;
using env::kSimple;
using env::Malformed;
using env::Simple;
using internal::UrlEscape;

bool Contains(const auto& list, std::string_view name) {
  return std::find(std::begin(list), std::end(list), name) != std::end(list);
}

// What the passes share: the lookup, what the command line gave, and what they found.
class Reader {
 public:
  Reader(const Environment& environment, const FlagGiven& given)
      : environment_(environment), given_(given) {}

  absl::StatusOr<EnvSettings> Read();

 private:
  std::optional<std::string> Get(std::string_view name) const {
    const auto found = environment_.find(name);
    if (found == environment_.end() || found->second.empty()) {
      return std::nullopt;
    }
    return found->second;
  }
  bool Set(std::string_view name) const { return Get(name).has_value(); }
  bool AnySet(std::initializer_list<std::string_view> names) const {
    return std::any_of(names.begin(), names.end(), [&](auto name) { return Set(name); });
  }
  // `name`'s switch, or `fallback` when unset.
  absl::StatusOr<bool> Switch(std::string_view name, bool fallback) const;
  void Add(std::string_view flag, std::string value, std::string variables, bool required,
           bool only_defaults);
  // Those of `names` that are set are not read: said to be ignored, with `why`.
  void Unread(std::initializer_list<std::string_view> names, std::string_view why) {
    for (std::string_view name : names) {
      if (Set(name)) {
        out_.ignored.push_back(fmt::format("{} ({})", name, why));
      }
    }
  }

  absl::Status Listeners();
  absl::Status LogLevel();
  absl::Status Runtime();
  absl::Status PoolSize();
  absl::Status LocalCache();
  absl::Status Store();
  absl::Status Memcache();
  absl::StatusOr<std::string> StoreUrl(std::string_view type, bool unix_socket, bool tls);
  absl::StatusOr<std::string> SentinelUrl(const std::string& url, bool tls);
  std::string DescribeStore(bool tcp) const;  // tcp: a cluster or sentinels, TCP whatever.
  absl::Status RedisTls(bool tls);
  absl::Status GrpcTls();
  bool Xds() const;
  absl::Status ConfigSource();
  absl::Status Statsd();
  absl::Status Simples();
  absl::Status Refusals() const;

  const Environment& environment_;
  const FlagGiven& given_;
  EnvSettings out_;
};

absl::StatusOr<bool> Reader::Switch(std::string_view name, bool fallback) const {
  const std::optional<std::string> value = Get(name);
  if (!value) {
    return fallback;
  }
  if (const std::optional<bool> on = GoBool(*value)) {
    return *on;
  }
  return Malformed(name, *value, "expected true or false");
}

void Reader::Add(std::string_view flag, std::string value, std::string variables, bool required,
                 bool only_defaults) {
  out_.flags.push_back(EnvFlag{.flag = std::string(flag),
                               .value = std::move(value),
                               .variables = std::move(variables),
                               .required = required,
                               .only_defaults = only_defaults});
}

absl::StatusOr<EnvSettings> Reader::Read() {
  for (std::string_view name : kComposite) {
    if (Set(name)) {
      out_.found.emplace_back(name);
    }
  }
  for (const Simple& simple : kSimple) {
    if (Set(simple.variable)) {
      out_.found.emplace_back(simple.variable);
    }
  }
  for (std::string_view name : kNoEffect) {
    if (Set(name)) {
      out_.found.emplace_back(name);
    }
  }
  for (std::string_view name : kIgnored) {
    if (Set(name)) {
      out_.ignored.emplace_back(name);
    }
  }
  // Their own names (not a prefix alone, which another program's variable may share) tell
  // that this is their environment.
  auto own = [](const std::string& name) { return !Contains(kShared, name); };
  out_.theirs = std::any_of(out_.found.begin(), out_.found.end(), own) ||
                std::any_of(out_.ignored.begin(), out_.ignored.end(), own);
  for (const auto& entry : environment_) {
    const std::string& name = entry.first;  // (Clang's lambdas cannot capture a binding.)
    const bool prefixed = std::any_of(std::begin(kIgnoredPrefixes), std::end(kIgnoredPrefixes),
                                      [&](std::string_view p) { return name.starts_with(p); });
    if (prefixed && !entry.second.empty() && !Contains(kComposite, name)) {
      out_.ignored.push_back(name);
    }
  }
  if (absl::Status s = Refusals(); !s.ok()) {
    return s;
  }
  for (std::string_view name : kNoEffect) {
    if (absl::StatusOr<bool> ok = Switch(name, false); !ok.ok()) {
      return ok.status();
    }
  }
  for (auto pass : {&Reader::Listeners, &Reader::LogLevel, &Reader::ConfigSource, &Reader::Runtime,
                    &Reader::PoolSize, &Reader::LocalCache, &Reader::Store, &Reader::GrpcTls,
                    &Reader::Statsd, &Reader::Simples}) {
    if (absl::Status s = (this->*pass)(); !s.ok()) {
      return s;
    }
  }
  return std::move(out_);
}

// CONFIG_TYPE=GRPC_XDS_SOTW: rules from the management server at CONFIG_GRPC_XDS_SERVER_URL
// (their default localhost:18000), instead of RUNTIME_ROOT's files.
bool Reader::Xds() const {
  const std::optional<std::string> type = Get("CONFIG_TYPE");
  return type && absl::AsciiStrToLower(*type) == "grpc_xds_sotw";
}

absl::Status Reader::ConfigSource() {
  if (Xds() && !given_("--xds") && !given_("--config")) {
    Add("--xds", Get("CONFIG_GRPC_XDS_SERVER_URL").value_or("localhost:18000"),
        "CONFIG_TYPE, CONFIG_GRPC_XDS_SERVER_URL", false, false);
  }
  return absl::OkStatus();
}

// Settings that would have sluiced serve something other than what they ask: refused.
absl::Status Reader::Refusals() const {
  if (const std::optional<std::string> type = Get("CONFIG_TYPE");
      type && absl::AsciiStrToLower(*type) != "file" && !Xds()) {
    return Malformed("CONFIG_TYPE", *type,
                     "expected FILE (rules files) or GRPC_XDS_SOTW (rules from an xDS server)");
  }
  if (const std::optional<std::string> uds = Get("GRPC_UDS"); uds && !given_("--grpc")) {
    return Malformed("GRPC_UDS", *uds,
                     "sluiced serves gRPC on TCP only: set GRPC_HOST and GRPC_PORT instead");
  }
  return absl::OkStatus();
}

// HOST+PORT, GRPC_HOST+GRPC_PORT, DEBUG_HOST+DEBUG_PORT: one flag each, HOST:PORT, with their
// default for the half not set (0.0.0.0, and 8080 or 8081). The debug listener is off unless
// one of its variables is set (theirs is always on, on 6070).
absl::Status Reader::Listeners() {
  struct Pair {
    std::string_view host, port, flag;
    int default_port;
    bool by_default;  // In their environment, on even when neither variable is set.
  };
  for (const Pair& pair : {Pair{"HOST", "PORT", "--http", 8080, true},
                           Pair{"GRPC_HOST", "GRPC_PORT", "--grpc", 8081, true},
                           Pair{"DEBUG_HOST", "DEBUG_PORT", "--debug", 6070, false}}) {
    const bool set = AnySet({pair.host, pair.port});
    if (given_(pair.flag) || !(set || (out_.theirs && pair.by_default))) {
      continue;
    }
    const std::string host = Get(pair.host).value_or("0.0.0.0");
    int port = pair.default_port;
    if (const std::optional<std::string> text = Get(pair.port)) {
      const std::optional<int64_t> n = Integer(*text);
      if (!n || *n < 0 || *n > 65535) {
        return Malformed(pair.port, *text, "expected a port number from 0 to 65535");
      }
      port = static_cast<int>(*n);
    }
    Add(pair.flag, JoinHostPort(host, port), fmt::format("{}/{}", pair.host, pair.port), false,
        !set);
  }
  return absl::OkStatus();
}

// LOG_LEVEL as logrus reads it, case-insensitive; their default is WARN.
absl::Status Reader::LogLevel() {
  const std::optional<std::string> value = Get("LOG_LEVEL");
  if (given_("--log-level") || (!value && !out_.theirs)) {
    return absl::OkStatus();
  }
  const std::string level = absl::AsciiStrToLower(value.value_or("warn"));
  static constexpr std::pair<std::string_view, std::string_view> kLevels[] = {
      {"trace", "trace"},  {"debug", "debug"}, {"info", "info"},   {"warn", "warn"},
      {"warning", "warn"}, {"error", "error"}, {"fatal", "error"}, {"panic", "error"}};
  for (const auto& [theirs, ours] : kLevels) {
    if (level == theirs) {
      Add("--log-level", std::string(ours), "LOG_LEVEL", false, !value);
      return absl::OkStatus();
    }
  }
  return Malformed("LOG_LEVEL", *value, "expected trace, debug, info, warn, error, fatal or panic");
}

// The rules: RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, each *.yaml file in it.
absl::Status Reader::Runtime() {
  const bool set = AnySet({"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"});
  if (given_("--config") || given_("--xds") || Xds() || !(set || out_.theirs)) {
    return absl::OkStatus();
  }
  std::filesystem::path path = Get("RUNTIME_ROOT").value_or("/srv/runtime_data/current");
  if (const std::optional<std::string> sub = Get("RUNTIME_SUBDIRECTORY")) {
    path /= *sub;
  }
  path /= Get("RUNTIME_APPDIRECTORY").value_or("config");
  Add("--config", path.lexically_normal().string(),
      "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY", false, !set);
  return absl::OkStatus();
}

// REDIS_AUTH, "password" or "user:password" (split at the first colon, as theirs), as a
// URL's "user:password@".
std::string UserInfo(const std::optional<std::string>& auth) {
  if (!auth) {
    return "";
  }
  const size_t colon = auth->find(':');
  if (colon == std::string::npos) {
    return UrlEscape(*auth) + "@";
  }
  return fmt::format("{}:{}@", UrlEscape(auth->substr(0, colon)),
                     UrlEscape(auth->substr(colon + 1)));
}

// REDIS_POOL_SIZE as --redis-connections. Their pool holds a connection per call in flight;
// sluiced pipelines calls on a few, so a pool larger than ours is lowered rather than refused.
absl::Status Reader::PoolSize() {
  const std::optional<std::string> size = Get("REDIS_POOL_SIZE");
  if (!size || given_("--redis-connections")) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> count = Convert("REDIS_POOL_SIZE", *size, Kind::kCount);
  if (!count.ok()) {
    return count.status();
  }
  const int connections =
      static_cast<int>(std::min<int64_t>(Integer(*count).value_or(1), kMaxRedisConnections));
  Add("--redis-connections", std::to_string(connections), "REDIS_POOL_SIZE", false, false);
  return absl::OkStatus();
}

// LOCAL_CACHE_SIZE_IN_BYTES as --redis-deny-cache. Theirs keeps the keys over their limit
// for the rest of the window and answers them without Redis: the same idea as the denial
// cache, whose entries take about 256 bytes each. 0 (their default) leaves it off.
absl::Status Reader::LocalCache() {
  const std::optional<std::string> size = Get("LOCAL_CACHE_SIZE_IN_BYTES");
  if (!size || *size == "0" || given_("--redis-deny-cache")) {
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> bytes = Convert("LOCAL_CACHE_SIZE_IN_BYTES", *size, Kind::kCount);
  if (!bytes.ok()) {
    return bytes.status();
  }
  constexpr int64_t kEntryBytes = 256;
  constexpr int64_t kMostEntries = 100'000'000;  // --redis-deny-cache's bound.
  const int64_t entries =
      std::clamp<int64_t>(Integer(*bytes).value_or(0) / kEntryBytes, 1, kMostEntries);
  Add("--redis-deny-cache", std::to_string(entries), "LOCAL_CACHE_SIZE_IN_BYTES", false, false);
  return absl::OkStatus();
}

// The store: BACKEND_TYPE, REDIS_TYPE, REDIS_SOCKET_TYPE, REDIS_URL, REDIS_AUTH and REDIS_TLS
// as one --store URL. Their default store is Redis on the unix socket
// /var/run/nutcracker/ratelimit.sock.
absl::Status Reader::Store() {
  const bool set = AnySet(
      {"BACKEND_TYPE", "REDIS_TYPE", "REDIS_SOCKET_TYPE", "REDIS_URL", "REDIS_AUTH", "REDIS_TLS"});
  if (given_("--store") || !(set || out_.theirs)) {
    return absl::OkStatus();
  }
  const std::optional<std::string> backend = Get("BACKEND_TYPE");
  if (backend && absl::AsciiStrToLower(*backend) == "memcache") {
    return Memcache();
  }
  Unread({"MEMCACHE_HOST_PORT", "MEMCACHE_SRV", "MEMCACHE_TLS"}, "BACKEND_TYPE is not memcache");
  if (backend && absl::AsciiStrToLower(*backend) != "redis") {
    return Malformed("BACKEND_TYPE", *backend, "expected redis or memcache");
  }
  const std::string type = absl::AsciiStrToLower(Get("REDIS_TYPE").value_or("single"));
  if (type != "single" && type != "cluster" && type != "sentinel") {
    return Malformed("REDIS_TYPE", *Get("REDIS_TYPE"), "expected SINGLE, CLUSTER or SENTINEL");
  }
  const std::string socket = absl::AsciiStrToLower(Get("REDIS_SOCKET_TYPE").value_or("unix"));
  if (socket != "unix" && socket != "tcp" && socket != "tcp4" && socket != "tcp6") {
    return Malformed("REDIS_SOCKET_TYPE", *Get("REDIS_SOCKET_TYPE"), "expected tcp or unix");
  }
  absl::StatusOr<bool> tls = Switch("REDIS_TLS", false);
  if (!tls.ok()) {
    return tls.status();
  }
  absl::StatusOr<std::string> store = StoreUrl(type, socket == "unix", *tls);
  if (!store.ok()) {
    return store.status();
  }
  Add("--store", *std::move(store), DescribeStore(type != "single"), false, !set);
  return RedisTls(*tls);
}

// BACKEND_TYPE=memcache: MEMCACHE_HOST_PORT as --store memcached://...; Redis's variables of
// the store are not read (their timeout and failure policy are: the Memcached store's too).
absl::Status Reader::Memcache() {
  absl::StatusOr<std::string> store =
      env::MemcacheStore(Get("MEMCACHE_HOST_PORT"), Get("MEMCACHE_SRV"), Get("MEMCACHE_TLS"));
  if (!store.ok()) {
    return store.status();
  }
  Unread({"REDIS_TYPE", "REDIS_SOCKET_TYPE", "REDIS_URL", "REDIS_AUTH", "REDIS_TLS",
          "REDIS_SENTINEL_AUTH"},
         "BACKEND_TYPE is memcache");
  Add("--store", *store,
      fmt::format("BACKEND_TYPE=memcache, MEMCACHE_HOST_PORT={}", *Get("MEMCACHE_HOST_PORT")),
      false, false);
  return absl::OkStatus();
}

// The store's URL from REDIS_URL, REDIS_AUTH and REDIS_TLS.
absl::StatusOr<std::string> Reader::StoreUrl(std::string_view type, bool unix_socket, bool tls) {
  const std::string url = Get("REDIS_URL").value_or("/var/run/nutcracker/ratelimit.sock");
  const std::string user_info = UserInfo(Get("REDIS_AUTH"));
  if (url.find("://") != std::string::npos) {
    // A whole URL, sluice's own form: used as it is, the other variables of the store aside.
    if (tls && !url.starts_with("rediss")) {
      return Malformed("REDIS_TLS", *Get("REDIS_TLS"), "REDIS_URL is a URL without TLS");
    }
    Unread({"REDIS_TYPE", "REDIS_SOCKET_TYPE", "REDIS_AUTH", "REDIS_SENTINEL_AUTH"},
           "REDIS_URL is a whole URL");
    return url;
  }
  if (type == "sentinel") {
    return SentinelUrl(url, tls);
  }
  Unread({"REDIS_SENTINEL_AUTH"}, "REDIS_TYPE is not SENTINEL");
  if (type == "cluster") {  // Theirs reaches a cluster over TCP whatever the socket type.
    std::string hosts = url;
    hosts.erase(std::remove(hosts.begin(), hosts.end(), ' '), hosts.end());
    return fmt::format("{}://{}{}", tls ? "rediss+cluster" : "redis+cluster", user_info, hosts);
  }
  if (unix_socket) {
    if (tls) {
      return Malformed("REDIS_TLS", *Get("REDIS_TLS"), "TLS to Redis over a unix socket");
    }
    return fmt::format("unix://{}{}", user_info,
                       std::filesystem::absolute(url).lexically_normal().string());
  }
  return fmt::format("{}://{}{}", tls ? "rediss" : "redis", user_info, url);
}

// REDIS_TYPE=SENTINEL: REDIS_URL is "master-name,host:port[,host:port...]", the sentinels
// (always over TCP, as theirs), with REDIS_AUTH for the master and REDIS_SENTINEL_AUTH for the
// sentinels ("password" or "user:password" both).
absl::StatusOr<std::string> Reader::SentinelUrl(const std::string& url, bool tls) {
  std::string list = url;
  list.erase(std::remove(list.begin(), list.end(), ' '), list.end());
  const size_t comma = list.find(',');
  if (comma == 0 || comma == std::string::npos || comma + 1 == list.size()) {
    return Malformed("REDIS_URL", url,
                     "with REDIS_TYPE=SENTINEL, expected master-name,host:port[,host:port...]");
  }
  std::string query;
  if (const std::optional<std::string> auth = Get("REDIS_SENTINEL_AUTH")) {
    const size_t colon = auth->find(':');
    query = colon == std::string::npos ? fmt::format("?sentinel_password={}", UrlEscape(*auth))
                                       : fmt::format("?sentinel_user={}&sentinel_password={}",
                                                     UrlEscape(auth->substr(0, colon)),
                                                     UrlEscape(auth->substr(colon + 1)));
  }
  return fmt::format("{}://{}{}/{}{}", tls ? "rediss+sentinel" : "redis+sentinel",
                     UserInfo(Get("REDIS_AUTH")), list.substr(comma + 1),
                     UrlEscape(list.substr(0, comma)), query);
}

// For messages about the store: the variables set, with their values but for REDIS_AUTH's and
// a whole URL's (which may hold a password), and the socket type when it is their default.
std::string Reader::DescribeStore(bool tcp) const {
  std::vector<std::string> described;
  for (std::string_view name : {"BACKEND_TYPE", "REDIS_TYPE", "REDIS_SOCKET_TYPE", "REDIS_URL"}) {
    if (const std::optional<std::string> value = Get(name)) {
      described.push_back(value->find("://") == std::string::npos
                              ? fmt::format("{}={}", name, *value)
                              : std::string(name));
    }
  }
  if (Set("REDIS_AUTH")) {
    described.emplace_back("REDIS_AUTH");
  }
  if (Set("REDIS_SENTINEL_AUTH")) {
    described.emplace_back("REDIS_SENTINEL_AUTH");
  }
  if (!Set("REDIS_SOCKET_TYPE") && !tcp) {
    described.emplace_back("REDIS_SOCKET_TYPE unset (unix, their default)");
  }
  return fmt::format("{}", fmt::join(described, ", "));
}

// With REDIS_TLS, the files of REDIS_TLS_CACERT, _CLIENT_CERT and _CLIENT_KEY, and
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION. Without it they are not read, as theirs.
absl::Status Reader::RedisTls(bool tls) {
  if (!tls) {
    return absl::OkStatus();
  }
  for (const auto& [variable, flag] : {std::pair{"REDIS_TLS_CACERT", "--redis-tls-ca"},
                                       std::pair{"REDIS_TLS_CLIENT_CERT", "--redis-tls-cert"},
                                       std::pair{"REDIS_TLS_CLIENT_KEY", "--redis-tls-key"}}) {
    if (const std::optional<std::string> file = Get(variable); file && !given_(flag)) {
      Add(flag, *file, variable, true, false);
    }
  }
  absl::StatusOr<bool> skip = Switch("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false);
  if (!skip.ok()) {
    return skip.status();
  }
  if (*skip && !given_("--redis-tls-skip-verify")) {
    Add("--redis-tls-skip-verify", "true", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", true, false);
  }
  return absl::OkStatus();
}

// GRPC_SERVER_USE_TLS with GRPC_SERVER_TLS_CERT and _KEY, and GRPC_CLIENT_TLS_CACERT for mTLS
// (GRPC_CLIENT_TLS_SAN too). Without GRPC_SERVER_USE_TLS they are not read, as theirs.
absl::Status Reader::GrpcTls() {
  absl::StatusOr<bool> use = Switch("GRPC_SERVER_USE_TLS", false);
  if (!use.ok() || !*use) {
    return use.status();
  }
  for (const auto& [variable, flag] : {std::pair{"GRPC_SERVER_TLS_CERT", "--grpc-tls-cert"},
                                       std::pair{"GRPC_SERVER_TLS_KEY", "--grpc-tls-key"},
                                       std::pair{"GRPC_CLIENT_TLS_CACERT", "--grpc-tls-client-ca"},
                                       std::pair{"GRPC_CLIENT_TLS_SAN", "--grpc-tls-client-san"}}) {
    const std::optional<std::string> value = Get(variable);
    if (given_(flag)) {
      continue;
    }
    if (value) {
      Add(flag, *value, variable, true, false);
    } else if (flag == std::string_view("--grpc-tls-cert") ||
               flag == std::string_view("--grpc-tls-key")) {
      return absl::InvalidArgumentError(fmt::format(
          "GRPC_SERVER_USE_TLS=true needs {}: the file of the server's {}", variable,
          flag == std::string_view("--grpc-tls-cert") ? "certificate chain" : "private key"));
    }
  }
  return absl::OkStatus();
}

// USE_STATSD (their default: true), STATSD_HOST (localhost), STATSD_PORT (8125) as --statsd,
// STATS_FLUSH_INTERVAL as --statsd-interval.
absl::Status Reader::Statsd() {
  const bool set = AnySet({"USE_STATSD", "STATSD_HOST", "STATSD_PORT"});
  absl::StatusOr<bool> use = Switch("USE_STATSD", true);
  if (!use.ok()) {
    return use.status();
  }
  if (given_("--statsd") || !*use || !(set || out_.theirs)) {
    return absl::OkStatus();
  }
  int port = 8125;
  if (const std::optional<std::string> text = Get("STATSD_PORT")) {
    const std::optional<int64_t> n = Integer(*text);
    if (!n || *n < 1 || *n > 65535) {
      return Malformed("STATSD_PORT", *text, "expected a port number from 1 to 65535");
    }
    port = static_cast<int>(*n);
  }
  Add("--statsd", JoinHostPort(Get("STATSD_HOST").value_or("localhost"), port),
      "USE_STATSD/STATSD_HOST/STATSD_PORT", false, !set);
  if (const std::optional<std::string> interval = Get("STATS_FLUSH_INTERVAL");
      interval && !given_("--statsd-interval")) {
    absl::StatusOr<std::string> value = Convert("STATS_FLUSH_INTERVAL", *interval, Kind::kDuration);
    if (!value.ok()) {
      return value.status();
    }
    Add("--statsd-interval", *std::move(value), "STATS_FLUSH_INTERVAL", false, false);
  }
  return absl::OkStatus();
}

absl::Status Reader::Simples() {
  for (const Simple& simple : kSimple) {
    const std::optional<std::string> value = Get(simple.variable);
    if (!value || given_(simple.flag)) {
      continue;
    }
    absl::StatusOr<std::string> converted = Convert(simple.variable, *value, simple.kind);
    if (!converted.ok()) {
      return converted.status();
    }
    if (simple.kind == Kind::kTimeout && *converted == "0s") {
      out_.ignored.push_back(
          fmt::format("{}=0 (no timeout: sluiced keeps its own)", simple.variable));
      continue;
    }
    Add(simple.flag, *std::move(converted), std::string(simple.variable), false, false);
  }
  return absl::OkStatus();
}

}  // namespace

Environment ProcessEnvironment() {
  Environment environment;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text = *entry;
    const size_t equals = text.find('=');
    if (equals != std::string_view::npos) {
      environment.emplace(text.substr(0, equals), text.substr(equals + 1));
    }
  }
  return environment;
}

absl::StatusOr<EnvSettings> ReadEnvironment(const Environment& environment,
                                            const FlagGiven& given) {
  return Reader(environment, given).Read();
}

}  // namespace sluice::server
