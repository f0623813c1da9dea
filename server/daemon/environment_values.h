#pragma once

// The values of envoyproxy/ratelimit's settings read as their Go program reads them
// (strconv.ParseBool, ParseInt, time.ParseDuration), and written as sluiced's flags read them:
// what server/daemon/environment.cc's passes share. Pure functions: thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "sluice/clock.h"

namespace sluice::server::env {

// How a variable's text is read.
enum class Kind : uint8_t {
  kSwitch,    // A bool: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False.
  kCount,     // A decimal integer, at least 1.
  kRatio,     // A decimal number.
  kDuration,  // Go's "1m30s", "250ms", "1.5s".
  kTimeout,   // A duration, where 0 means none to them (the caller keeps sluiced's own).
  kText,      // As it is.
};

// `value` of `variable` as its flag reads it ("true", "90s", ...), or InvalidArgument
// "VARIABLE=value: what was expected".
absl::StatusOr<std::string> Convert(std::string_view variable, std::string_view value, Kind kind);

// InvalidArgument "VARIABLE=value: why".
absl::Status Malformed(std::string_view variable, std::string_view value, std::string_view why);

// Go's strconv.ParseBool; nullopt for anything else.
std::optional<bool> GoBool(std::string_view text);
// A decimal integer, with an optional '+' or '-'; nullopt for anything else.
std::optional<int64_t> Integer(std::string_view text);
// Go's time.ParseDuration, not negative ("1h2m3.5s", "300ms", "0"), in microseconds rounded
// up (a timeout of some nanoseconds is not none); nullopt for anything else.
std::optional<Micros> GoDuration(std::string_view text);

// "host:port", "[v6::host]:port": as --http, --grpc, --debug and --statsd read it.
std::string JoinHostPort(std::string_view host, int port);

// BACKEND_TYPE=memcache's store: MEMCACHE_HOST_PORT's "host:port,host:port" as
// "memcached://host:port,host:port" (spaces dropped). InvalidArgument naming the variable when
// it is unset or has an empty entry, when MEMCACHE_SRV is set (DNS SRV discovery: not
// supported) or MEMCACHE_TLS is true (libmemcached speaks no TLS).
absl::StatusOr<std::string> MemcacheStore(const std::optional<std::string>& host_port,
                                          const std::optional<std::string>& srv,
                                          const std::optional<std::string>& tls);

}  // namespace sluice::server::env
