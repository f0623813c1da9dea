#include "src/redis/errors.h"

#include <array>

#include "fmt/format.h"

#include "src/core/status.h"

namespace sluice::internal {
namespace {

// Redis's error prefixes for a server that cannot decide now (src/server.c's shared replies,
// cluster.c, acl.c, script.c), and for one that is not a master.
// TIMEOUT: the script's own (call.h's kExpired), for a call that reached Redis too late.
// CLOCK: the script's own too, for a calendar quota's time outside the windows it was sent
// (this host's clock and Redis's, or the key's, a window apart).
constexpr std::array<std::string_view, 12> kUnavailable = {
    "OOM",     "BUSY",   "LOADING", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS",
    "MISCONF", "NOAUTH", "NOPERM",  "WRONGPASS",   "TIMEOUT",  "CLOCK"};
constexpr std::array<std::string_view, 2> kNotMaster = {"READONLY", "MASTERDOWN"};
constexpr std::string_view kPrefix = "redis: ";  // RedisErrorStatus's.

}  // namespace

RedisErrorKind ClassifyRedisError(std::string_view text) {
  // Redis before 7 raises a command's error inside a script as the script's own, its place
  // first: "@user_script: 73: -OOM command not allowed...". The error is what follows.
  if (text.starts_with('@')) {
    if (const size_t at = text.rfind(": -"); at != std::string_view::npos) {
      text.remove_prefix(at + 2);
    }
  }
  if (text.starts_with('-')) {
    text.remove_prefix(1);
  }
  const std::string_view word = text.substr(0, text.find(' '));
  for (std::string_view prefix : kNotMaster) {
    if (word == prefix) {
      return RedisErrorKind::kNotMaster;
    }
  }
  for (std::string_view prefix : kUnavailable) {
    if (word == prefix) {
      return RedisErrorKind::kUnavailable;
    }
  }
  return RedisErrorKind::kCall;
}

absl::Status RedisErrorStatus(std::string_view text) {
  std::string message = fmt::format("{}{}", kPrefix, text);
  return ClassifyRedisError(text) == RedisErrorKind::kCall
             ? absl::InternalError(std::move(message))
             : absl::UnavailableError(std::move(message));
}

RedisErrorKind ClassifyRedisStatus(const absl::Status& status) {
  if (status.ok() || !Message(status).starts_with(kPrefix)) {
    return RedisErrorKind::kCall;
  }
  return ClassifyRedisError(RedisErrorText(status));
}

std::string_view RedisErrorText(const absl::Status& status) {
  std::string_view message = Message(status);
  if (message.starts_with(kPrefix)) {
    message.remove_prefix(kPrefix.size());
  }
  return message;
}

}  // namespace sluice::internal
