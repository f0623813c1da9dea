#pragma once

// sluiced run from envoyproxy/ratelimit's environment: their settings, environment variables
// (their src/settings/settings.go), read once at start and turned into sluiced's flags, so that
// a container spec written for them starts sluiced unchanged. A flag given on the command line
// wins: the variables behind it are not read at all. docs/server.md ("Running from
// envoyproxy/ratelimit's environment") has the table this file implements.
//
// Pure: reads variables through the function it is given and knows nothing of CLI11 (main.cc
// applies the result). Thread-compatible.

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace sluice::server {

// Variables by name. An empty value counts as unset: a template that leaves a value blank
// means "the default".
using Environment = std::map<std::string, std::string, std::less<>>;
// The process's environment (environ).
Environment ProcessEnvironment();
// Whether the command line gave `flag` ("--http"): then its variables are not read.
using FlagGiven = std::function<bool(std::string_view flag)>;

// A flag of sluiced's as their settings give it.
struct EnvFlag {
  std::string flag;       // "--http".
  std::string value;      // "0.0.0.0:8080"; "true" or "false" for a switch.
  std::string variables;  // Where it comes from, for messages: "HOST/PORT".
  // When this build has no such flag: true refuses to start (TLS material must not be dropped
  // silently), false lists `variables` as ignored (unless the value is only their default).
  bool required = false;
  bool only_defaults = false;  // No variable behind it is set: their default alone.
};

struct EnvSettings {
  std::vector<EnvFlag> flags;
  // Their variables set here that sluiced does not use (tracing, xDS, memcache, local cache,
  // per-second Redis, ...), by name, to be logged once.
  std::vector<std::string> ignored;
  // Their variables found set (names only: values may be secrets).
  std::vector<std::string> found;
  // A variable of theirs only they use is set: their defaults apply to the settings no
  // variable gives (listen on 0.0.0.0:8080 and :8081, rules from /srv/runtime_data/current,
  // Redis on their unix socket, log level WARN). Names other programs use too (HOST, PORT,
  // LOG_LEVEL, LOG_FORMAT, REDIS_URL) apply alone but bring no defaults.
  bool theirs = false;
};

// Their settings as sluiced's flags. Errors (InvalidArgument) name the variable and what is
// wrong: a malformed value (PORT=abc, SHADOW_MODE=maybe), or a setting sluiced refuses rather
// than ignore because it would serve something else (REDIS_TYPE=SENTINEL, BACKEND_TYPE=memcache,
// CONFIG_TYPE=GRPC_XDS_SOTW, GRPC_UDS).
absl::StatusOr<EnvSettings> ReadEnvironment(const Environment& environment, const FlagGiven& given);

// Most connections to Redis sluiced opens; REDIS_POOL_SIZE above it is lowered to it.
inline constexpr int kMaxRedisConnections = 64;

}  // namespace sluice::server
