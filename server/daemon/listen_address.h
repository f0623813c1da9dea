#pragma once

// The addresses sluiced listens on (--http, --grpc, --debug) and sends to (--statsd), read
// from their HOST:PORT.

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace sluice::server {

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// "127.0.0.1:8080", "[::1]:8080", "localhost:8080", or ":8080" (host "0.0.0.0"). Errors
// name `flag`.
absl::StatusOr<HostPort> ParseHostPort(std::string_view flag, std::string_view text);

// A listener's HOST:PORT as it is bound: an IP address as it is; a host name ("localhost")
// resolved once, now, to its first IPv4 address, or its first IPv6 address when it has none
// (as Go's net.Listen does, so that `--http localhost:8080` means 127.0.0.1, not ::1 on one
// machine and 127.0.0.1 on the next); no host (":8080") every IPv4 interface, 0.0.0.0, which
// the log says, as it does what a name resolved to. Errors name `flag`.
absl::StatusOr<HostPort> ListenAddress(std::string_view flag, std::string_view text);

}  // namespace sluice::server
