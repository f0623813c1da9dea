// ParseMemcachedUrl (sluice/memcached_store.h).

#include <charconv>
#include <string>

#include "fmt/format.h"

#include "sluice/memcached_store.h"

namespace sluice {
namespace {

constexpr std::string_view kScheme = "memcached://";

absl::StatusOr<MemcachedEndpoint> ParseServer(std::string_view url, std::string_view text) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(fmt::format("memcached URL '{}': {}", url, why));
  };
  MemcachedEndpoint server;
  std::string_view port;
  if (text.starts_with('[')) {  // [IPv6]:port
    const size_t close = text.find(']');
    if (close == std::string_view::npos) {
      return bad("an IPv6 address needs its closing ']'");
    }
    server.host = std::string(text.substr(1, close - 1));
    text.remove_prefix(close + 1);
    if (!text.empty() && !text.starts_with(':')) {
      return bad("expected ':port' after ']'");
    }
    port = text.empty() ? "" : text.substr(1);
  } else {
    const size_t colon = text.find(':');
    server.host = std::string(text.substr(0, colon));
    port = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  }
  if (server.host.empty()) {
    return bad("a server with no host");
  }
  if (server.host.find_first_of("/@?#") != std::string::npos) {
    return bad(fmt::format("'{}' is not a host (no user, path or query is taken)", server.host));
  }
  if (!port.empty()) {
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || end != port.data() + port.size() || value < 1 || value > 65535) {
      return bad(fmt::format("port '{}' is not a number from 1 to 65535", port));
    }
    server.port = static_cast<uint16_t>(value);
  }
  return server;
}

}  // namespace

absl::StatusOr<MemcachedStoreOptions> ParseMemcachedUrl(std::string_view url) {
  if (!url.starts_with(kScheme)) {
    return absl::InvalidArgumentError(
        fmt::format("memcached URL '{}': expected memcached://host[:port][,host[:port]...]", url));
  }
  MemcachedStoreOptions options;
  std::string_view rest = url.substr(kScheme.size());
  while (true) {
    const size_t comma = rest.find(',');
    absl::StatusOr<MemcachedEndpoint> server = ParseServer(url, rest.substr(0, comma));
    if (!server.ok()) {
      return server.status();
    }
    for (const MemcachedEndpoint& seen : options.servers) {
      if (seen == *server) {
        return absl::InvalidArgumentError(fmt::format(
            "memcached URL '{}': server {}:{} appears twice", url, server->host, server->port));
      }
    }
    options.servers.push_back(*std::move(server));
    if (comma == std::string_view::npos) {
      break;
    }
    rest.remove_prefix(comma + 1);
  }
  return options;
}

}  // namespace sluice
