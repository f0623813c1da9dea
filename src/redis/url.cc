#include "src/redis/url.h"

#include <cctype>
#include <charconv>
#include <limits>
#include <optional>
#include <string>

#include "fmt/format.h"

#include "sluice/redis_store.h"
#include "src/core/host_port.h"
#include "src/core/status.h"

namespace sluice {
namespace internal {

std::optional<unsigned> WholeNumber(std::string_view text) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

}  // namespace internal

namespace {

using internal::WholeNumber;

std::string PercentDecode(std::string_view s, bool& ok) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      ok = false;
      return out;
    }
    out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
    i += 2;
  }
  return out;
}

absl::StatusOr<RedisEndpoint> ParseEndpoint(std::string_view url, std::string_view text,
                                            uint16_t default_port) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(fmt::format("redis URL '{}': {}", url, why));
  };
  absl::StatusOr<internal::HostPort> server = internal::ParseHostPort(text, default_port);
  if (!server.ok()) {
    return bad(internal::Message(server.status()));
  }
  return RedisEndpoint{.host = std::move(server->host), .port = server->port};
}

constexpr std::string_view kSentinelPassword = "sentinel_password=";

// What follows a scheme: hosts, a socket's path, or sentinels and a master's name.
enum class SchemeKind { kHosts, kUnix, kSentinel };

struct Scheme {
  std::string_view prefix;
  bool cluster;
  bool tls;
  SchemeKind kind;
};
constexpr Scheme kSchemes[] = {
    {"redis://", false, false, SchemeKind::kHosts},
    {"rediss://", false, true, SchemeKind::kHosts},
    {"redis+cluster://", true, false, SchemeKind::kHosts},
    {"rediss+cluster://", true, true, SchemeKind::kHosts},
    {"redis+sentinel://", false, false, SchemeKind::kSentinel},
    {"rediss+sentinel://", false, true, SchemeKind::kSentinel},
    {"unix://", false, false, SchemeKind::kUnix},
};

// The scheme at the start of `rest`, removed, and what it says about the options.
bool ReadScheme(std::string_view& rest, RedisStoreOptions& options, SchemeKind& kind) {
  for (const Scheme& scheme : kSchemes) {
    if (rest.starts_with(scheme.prefix)) {
      rest.remove_prefix(scheme.prefix.size());
      options.cluster = scheme.cluster;
      options.tls.enabled = scheme.tls;
      kind = scheme.kind;
      return true;
    }
  }
  return false;
}

// Where the user info ends in `rest` (the URL after its scheme): npos when there is none.
// It ends at the last '@' (a password may hold one), but a socket's path starts with the first
// "@/" (a path may hold an '@'), and a sentinel URL's query, from its first '?', may hold one
// in sentinel_password= (so a '?' in the master's password must be escaped, as %3F).
size_t UserInfoEnd(std::string_view rest, SchemeKind kind) {
  switch (kind) {
    case SchemeKind::kUnix:
      return rest.find("@/");
    case SchemeKind::kSentinel:
      return rest.substr(0, rest.find('?')).rfind('@');
    case SchemeKind::kHosts:
      break;
  }
  return rest.rfind('@');
}

// "[user:]password" before an '@': the user and password, percent-escapes decoded. False for
// an escape without two hex digits.
bool ReadUserInfo(std::string_view userinfo, RedisStoreOptions& options) {
  const size_t colon = userinfo.find(':');
  bool ok = true;
  if (colon == std::string_view::npos) {
    options.password = PercentDecode(userinfo, ok);  // redis://secret@host, as redis-cli reads it
  } else {
    options.user = PercentDecode(userinfo.substr(0, colon), ok);
    options.password = PercentDecode(userinfo.substr(colon + 1), ok);
  }
  return ok;
}

// A database number: a whole number that fits an int.
std::optional<int> Database(std::string_view text) {
  const std::optional<unsigned> value = WholeNumber(text);
  if (!value || *value > static_cast<unsigned>(std::numeric_limits<int>::max())) {
    return std::nullopt;
  }
  return static_cast<int>(*value);
}

// After "unix://" and the user info: "/path/to/redis.sock[?db=N]".
absl::Status ReadSocket(std::string_view rest, std::string_view redacted,
                        RedisStoreOptions& options) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(fmt::format("redis URL '{}': {}", redacted, why));
  };
  const size_t question = rest.find('?');
  const std::string_view path = rest.substr(0, question);
  if (!path.starts_with('/')) {
    return bad("expected unix:///path/to/redis.sock: the socket's path must be absolute");
  }
  // sockaddr_un's sun_path: 108 bytes on Linux, with the terminating NUL.
  if (path.size() > 107) {
    return bad(
        fmt::format("the socket's path is {} bytes; a unix socket's is at most 107", path.size()));
  }
  options.endpoints.push_back({.host = "", .port = 0, .socket = std::string(path)});
  if (question == std::string_view::npos) {
    return absl::OkStatus();
  }
  const std::string_view query = rest.substr(question + 1);
  if (!query.starts_with("db=")) {
    return bad(fmt::format("unknown query '{}': the only one is ?db=N", query));
  }
  const std::optional<int> db = Database(query.substr(3));
  if (!db) {
    return bad(fmt::format("database '{}' is not a number", query.substr(3)));
  }
  options.database = *db;
  return absl::OkStatus();
}

// "host[:port][,host[:port]...]", added to `endpoints`.
absl::Status ReadEndpoints(std::string_view hosts, std::string_view redacted, uint16_t default_port,
                           std::vector<RedisEndpoint>& endpoints) {
  while (true) {
    const size_t comma = hosts.find(',');
    absl::StatusOr<RedisEndpoint> endpoint =
        ParseEndpoint(redacted, hosts.substr(0, comma), default_port);
    if (!endpoint.ok()) {
      return endpoint.status();
    }
    endpoints.push_back(*std::move(endpoint));
    if (comma == std::string_view::npos) {
      return absl::OkStatus();
    }
    hosts.remove_prefix(comma + 1);
  }
}

// After the scheme and the user info: "host[:port][,host[:port]...][/db]".
absl::Status ReadHosts(std::string_view rest, std::string_view redacted,
                       RedisStoreOptions& options) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(fmt::format("redis URL '{}': {}", redacted, why));
  };
  const size_t slash = rest.find('/');
  std::string_view hosts = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (options.cluster && !db.empty()) {
      return bad("a cluster has only database 0");
    }
    if (!db.empty()) {
      const std::optional<int> value = Database(db);
      if (!value) {
        return bad(fmt::format("database '{}' is not a number", db));
      }
      options.database = *value;
    }
  }
  if (absl::Status s = ReadEndpoints(hosts, redacted, 6379, options.endpoints); !s.ok()) {
    return s;
  }
  if (!options.cluster && options.endpoints.size() > 1) {
    return bad("several hosts are for redis+cluster://");
  }
  return absl::OkStatus();
}

// A sentinel URL's query: "name=value" pairs, "&"-separated.
absl::Status ReadSentinelQuery(std::string_view query, std::string_view redacted,
                               RedisStoreOptions& options) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(fmt::format("redis URL '{}': {}", redacted, why));
  };
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    query.remove_prefix(amp == std::string_view::npos ? query.size() : amp + 1);
    const size_t eq = param.find('=');
    const std::string_view name = param.substr(0, eq);
    const std::string_view value =
        eq == std::string_view::npos ? std::string_view() : param.substr(eq + 1);
    bool ok = true;
    if (name == "db") {
      const std::optional<int> db = Database(value);
      if (!db) {
        return bad(fmt::format("database '{}' is not a number", value));
      }
      options.database = *db;
    } else if (name == "sentinel_user") {
      options.sentinel.user = PercentDecode(value, ok);
    } else if (name == "sentinel_password") {
      options.sentinel.password = PercentDecode(value, ok);
    } else if (!param.empty()) {
      return bad(
          fmt::format("unknown query parameter '{}': expected db, sentinel_user or "
                      "sentinel_password",
                      name));
    }
    if (!ok) {
      return bad(fmt::format("a '%' in {} must be followed by two hex digits", name));
    }
  }
  return absl::OkStatus();
}

// After "redis+sentinel://" and the user info:
// "host[:port][,host[:port]...]/master-name[?query]", the hosts being the sentinels'.
absl::Status ReadSentinel(std::string_view rest, std::string_view redacted,
                          RedisStoreOptions& options) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(fmt::format("redis URL '{}': {}", redacted, why));
  };
  const size_t question = rest.find('?');
  const std::string_view query =
      question == std::string_view::npos ? std::string_view() : rest.substr(question + 1);
  rest = rest.substr(0, question);
  const size_t slash = rest.find('/');
  const std::string_view hosts = rest.substr(0, slash);
  if (hosts.empty()) {
    return bad("no sentinel: expected redis+sentinel://host:port[,host:port...]/master-name");
  }
  const std::string_view name =
      slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  if (name.empty()) {
    return bad("no master name: expected redis+sentinel://host:port[,host:port...]/master-name");
  }
  if (name.find('/') != std::string_view::npos) {
    return bad(fmt::format("master name '{}' holds a '/' (the database is ?db=N)", name));
  }
  bool ok = true;
  options.sentinel.master_name = PercentDecode(name, ok);
  if (!ok) {
    return bad("a '%' in the master name must be followed by two hex digits");
  }
  if (absl::Status s = ReadEndpoints(hosts, redacted, 26379, options.sentinel.endpoints); !s.ok()) {
    return s;
  }
  return ReadSentinelQuery(query, redacted, options);
}

// A sentinel URL's query with the value of sentinel_password hidden.
std::string RedactQuery(std::string_view query) {
  std::string out;
  while (true) {
    const size_t amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    out += param.starts_with(kSentinelPassword) ? fmt::format("{}***", kSentinelPassword)
                                                : std::string(param);
    if (amp == std::string_view::npos) {
      return out;
    }
    out += '&';
    query.remove_prefix(amp + 1);
  }
}

}  // namespace

absl::StatusOr<RedisStoreOptions> ParseRedisUrl(std::string_view url) {
  const std::string redacted = RedactRedisUrl(url);
  RedisStoreOptions options;
  std::string_view rest = url;
  SchemeKind kind = SchemeKind::kHosts;
  if (!ReadScheme(rest, options, kind)) {
    return absl::InvalidArgumentError(fmt::format(
        "redis URL '{}': expected redis://host:port[/db], rediss://host:port[/db] (TLS), "
        "redis+cluster://host:port,host:port, rediss+cluster://..., "
        "redis+sentinel://host:port,host:port/master-name, rediss+sentinel://... or "
        "unix:///path/to/redis.sock[?db=N]",
        redacted));
  }
  const size_t at = UserInfoEnd(rest, kind);
  if (at != std::string_view::npos) {
    if (!ReadUserInfo(rest.substr(0, at), options)) {
      return absl::InvalidArgumentError(
          fmt::format("redis URL '{}': a '%' in the user or password must be followed by two "
                      "hex digits",
                      redacted));
    }
    rest.remove_prefix(at + 1);
  }
  absl::Status read = kind == SchemeKind::kUnix       ? ReadSocket(rest, redacted, options)
                      : kind == SchemeKind::kSentinel ? ReadSentinel(rest, redacted, options)
                                                      : ReadHosts(rest, redacted, options);
  if (!read.ok()) {
    return read;
  }
  return options;
}

std::string RedisEndpointName(const RedisEndpoint& endpoint) {
  if (!endpoint.socket.empty()) {
    return fmt::format("unix:{}", endpoint.socket);
  }
  if (endpoint.host.find(':') != std::string::npos) {
    return fmt::format("[{}]:{}", endpoint.host, endpoint.port);
  }
  return fmt::format("{}:{}", endpoint.host, endpoint.port);
}

std::string RedactRedisUrl(std::string_view url) {
  RedisStoreOptions ignored;
  SchemeKind kind = SchemeKind::kHosts;
  std::string_view rest = url;
  if (!ReadScheme(rest, ignored, kind)) {
    return std::string(url);
  }
  const std::string_view scheme = url.substr(0, url.size() - rest.size());
  std::string out(scheme);
  // As ParseRedisUrl reads it.
  if (const size_t at = UserInfoEnd(rest, kind); at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    const size_t colon = userinfo.find(':');
    out += colon == std::string_view::npos ? "" : userinfo.substr(0, colon);
    out += ":***";
    rest.remove_prefix(at);
  }
  if (const size_t question = rest.find('?');
      kind == SchemeKind::kSentinel && question != std::string_view::npos) {
    out += rest.substr(0, question + 1);
    out += RedactQuery(rest.substr(question + 1));  // The sentinels' password.
    return out;
  }
  out += rest;
  return out;
}

}  // namespace sluice
