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

absl::StatusOr<RedisStoreOptions> ParseRedisUrl(std::string_view url) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(fmt::format("redis URL '{}': {}", RedactRedisUrl(url), why));
  };
  RedisStoreOptions options;
  std::string_view rest = url;
  if (rest.starts_with("redis://")) {
    rest.remove_prefix(8);
  } else if (rest.starts_with("redis+cluster://")) {
    rest.remove_prefix(16);
    options.cluster = true;
  } else {
    return bad("expected redis://host:port[/db] or redis+cluster://host:port,host:port");
  }
  const size_t at = rest.rfind('@');
  if (at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    rest.remove_prefix(at + 1);
    const size_t colon = userinfo.find(':');
    bool ok = true;
    if (colon == std::string_view::npos) {
      options.password = PercentDecode(userinfo, ok);  // redis://secret@host, as redis-cli reads it
    } else {
      options.user = PercentDecode(userinfo.substr(0, colon), ok);
      options.password = PercentDecode(userinfo.substr(colon + 1), ok);
    }
    if (!ok) {
      return bad("a '%' in the user or password must be followed by two hex digits");
    }
  }
  const size_t slash = rest.find('/');
  std::string_view hosts = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (options.cluster && !db.empty()) {
      return bad("a cluster has only database 0");
    }
    if (!db.empty()) {
      const std::optional<unsigned> value = WholeNumber(db);
      if (!value || *value > static_cast<unsigned>(std::numeric_limits<int>::max())) {
        return bad(fmt::format("database '{}' is not a number", db));
      }
      options.database = static_cast<int>(*value);
    }
  }
  while (true) {
    const size_t comma = hosts.find(',');
    absl::StatusOr<RedisEndpoint> endpoint =
        ParseEndpoint(RedactRedisUrl(url), hosts.substr(0, comma));
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
  return options;
}

std::string RedactRedisUrl(std::string_view url) {
  const size_t scheme = url.find("://");
  const size_t at = url.rfind('@');
  if (scheme == std::string_view::npos || at == std::string_view::npos || at < scheme) {
    return std::string(url);
  }
  const std::string_view userinfo = url.substr(scheme + 3, at - scheme - 3);
  const size_t colon = userinfo.find(':');
  const std::string_view user = colon == std::string_view::npos ? "" : userinfo.substr(0, colon);
  return fmt::format("{}{}:***{}", url.substr(0, scheme + 3), user, url.substr(at));
}

}  // namespace sluice
