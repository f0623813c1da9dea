#include "src/redis/url.h"

#include <cctype>
#include <charconv>
#include <limits>
#include <optional>
#include <string>

#include "fmt/format.h"

#include "sluice/redis_store.h"

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

absl::StatusOr<RedisEndpoint> ParseEndpoint(std::string_view url, std::string_view text) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(fmt::format("redis URL '{}': {}", url, why));
  };
  RedisEndpoint endpoint;
  std::string_view port;
  if (text.starts_with('[')) {  // [IPv6]:port
    const size_t close = text.find(']');
    if (close == std::string_view::npos) {
      return bad("an IPv6 address needs its closing ']'");
    }
    endpoint.host = std::string(text.substr(1, close - 1));
    text.remove_prefix(close + 1);
    if (!text.empty() && !text.starts_with(':')) {
      return bad("expected ':port' after ']'");
    }
    port = text.empty() ? "" : text.substr(1);
  } else {
    const size_t colon = text.find(':');
    endpoint.host = std::string(text.substr(0, colon));
    port = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  }
  if (endpoint.host.empty()) {
    return bad("no host");
  }
  if (!port.empty()) {
    const std::optional<unsigned> value = WholeNumber(port);
    if (!value || *value < 1 || *value > 65535) {
      return bad(fmt::format("port '{}' is not a number from 1 to 65535", port));
    }
    endpoint.port = static_cast<uint16_t>(*value);
  }
  return endpoint;
}

}  // namespace

std::string_view FailurePolicyName(FailurePolicy policy) {
  switch (policy) {
    case FailurePolicy::kAllow:
      return "allow";
    case FailurePolicy::kDeny:
      return "deny";
    case FailurePolicy::kLocal:
      return "local";
  }
  return "?";
}

absl::StatusOr<FailurePolicy> ParseFailurePolicy(std::string_view name) {
  for (FailurePolicy p : {FailurePolicy::kAllow, FailurePolicy::kDeny, FailurePolicy::kLocal}) {
    if (name == FailurePolicyName(p)) {
      return p;
    }
  }
  return absl::InvalidArgumentError(
      fmt::format("unknown failure policy '{}': use allow, deny or local", name));
}

namespace {

// The scheme at the start of `rest`, removed, and what it says about the options.
bool ReadScheme(std::string_view& rest, RedisStoreOptions& options, bool& unix_socket) {
  struct Scheme {
    std::string_view prefix;
    bool cluster;
    bool tls;
    bool unix_socket;
  };
  static constexpr Scheme kSchemes[] = {
      {"redis://", false, false, false},        {"rediss://", false, true, false},
      {"redis+cluster://", true, false, false}, {"rediss+cluster://", true, true, false},
      {"unix://", false, false, true},
  };
  for (const Scheme& scheme : kSchemes) {
    if (rest.starts_with(scheme.prefix)) {
      rest.remove_prefix(scheme.prefix.size());
      options.cluster = scheme.cluster;
      options.tls.enabled = scheme.tls;
      unix_socket = scheme.unix_socket;
      return true;
    }
  }
  return false;
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
  while (true) {
    const size_t comma = hosts.find(',');
    absl::StatusOr<RedisEndpoint> endpoint = ParseEndpoint(redacted, hosts.substr(0, comma));
    if (!endpoint.ok()) {
      return endpoint.status();
    }
    options.endpoints.push_back(*std::move(endpoint));
    if (comma == std::string_view::npos) {
      break;
    }
    hosts.remove_prefix(comma + 1);
  }
  if (!options.cluster && options.endpoints.size() > 1) {
    return bad("several hosts are for redis+cluster://");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RedisStoreOptions> ParseRedisUrl(std::string_view url) {
  const std::string redacted = RedactRedisUrl(url);
  RedisStoreOptions options;
  std::string_view rest = url;
  bool unix_socket = false;
  if (!ReadScheme(rest, options, unix_socket)) {
    return absl::InvalidArgumentError(fmt::format(
        "redis URL '{}': expected redis://host:port[/db], rediss://host:port[/db] (TLS), "
        "redis+cluster://host:port,host:port, rediss+cluster://... or "
        "unix:///path/to/redis.sock[?db=N]",
        redacted));
  }
  // The user info ends at the last '@' (a password may hold one); a socket's path starts
  // with the first "@/" (a path may hold an '@').
  const size_t at = unix_socket ? rest.find("@/") : rest.rfind('@');
  if (at != std::string_view::npos) {
    if (!ReadUserInfo(rest.substr(0, at), options)) {
      return absl::InvalidArgumentError(
          fmt::format("redis URL '{}': a '%' in the user or password must be followed by two "
                      "hex digits",
                      redacted));
    }
    rest.remove_prefix(at + 1);
  }
  absl::Status read =
      unix_socket ? ReadSocket(rest, redacted, options) : ReadHosts(rest, redacted, options);
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
  const size_t scheme = url.find("://");
  // As ParseRedisUrl reads it: a socket's path may hold an '@', a password too.
  const size_t at = url.starts_with("unix://") ? url.find("@/") : url.rfind('@');
  if (scheme == std::string_view::npos || at == std::string_view::npos || at < scheme) {
    return std::string(url);
  }
  const std::string_view userinfo = url.substr(scheme + 3, at - scheme - 3);
  const size_t colon = userinfo.find(':');
  const std::string_view user = colon == std::string_view::npos ? "" : userinfo.substr(0, colon);
  return fmt::format("{}{}:***{}", url.substr(0, scheme + 3), user, url.substr(at));
}

}  // namespace sluice
