// ParseMemcachedUrl (sluice/memcached_store.h).

#include <string>

#include "fmt/format.h"

#include "sluice/memcached_store.h"
#include "src/core/host_port.h"
#include "src/core/status.h"

namespace sluice {
namespace {

constexpr std::string_view kScheme = "memcached://";

absl::StatusOr<MemcachedEndpoint> ParseServer(std::string_view url, std::string_view text) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(fmt::format("memcached URL '{}': {}", url, why));
  };
  absl::StatusOr<internal::HostPort> parsed =
      internal::ParseHostPort(text, MemcachedEndpoint{}.port);
  if (!parsed.ok()) {
    return bad(internal::Message(parsed.status()));
  }
  MemcachedEndpoint server{.host = std::move(parsed->host), .port = parsed->port};
  if (server.host.find_first_of("/@?#") != std::string::npos) {
    return bad(fmt::format("'{}' is not a host (no user, path or query is taken)", server.host));
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
