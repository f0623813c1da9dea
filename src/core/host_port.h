#pragma once

// A server's "host", "host:port", "[IPv6]" or "[IPv6]:port", as the shared stores' URLs write
// it (redis://, memcached://). Each store wraps the error in its own URL's context.
//
// Pure functions: thread-safe.

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace sluice::internal {

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// `text` read, `default_port` when it names none. InvalidArgument saying what is wrong (no
// host, an unclosed '[', a port that is not 1 to 65535), without `text`'s context.
absl::StatusOr<HostPort> ParseHostPort(std::string_view text, uint16_t default_port);

}  // namespace sluice::internal
