#pragma once

// What an error Redis answers means for RedisStore, read in one place for every error it can
// meet: a whole call's (the reply is the error) and one `redis.call` raised inside the script
// (requests.lua answers it for its request alone). Either Redis cannot decide now, which the
// failure policy answers as it answers a lost connection or a timeout, or our call is wrong,
// which is the call's own error (Internal) and no policy can mend.

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace sluice::internal {

enum class RedisErrorKind : uint8_t {
  // Redis cannot decide now: out of memory (OOM), busy with a script (BUSY), loading its data
  // (LOADING), a cluster without all its slots (CLUSTERDOWN, TRYAGAIN), too few replicas to
  // write (NOREPLICAS), a failed save that stops writes (MISCONF), our access taken away
  // (NOAUTH, NOPERM, WRONGPASS). Unavailable: the failure policy decides.
  kUnavailable,
  // This server is not, or no longer, a master we can write to (READONLY: a failover demoted
  // it; MASTERDOWN: a replica cut off from its master). As kUnavailable, and the master must be
  // found again: reconnect (a DNS name may now name the new master), ask the sentinels again,
  // ask a cluster for its slot map again.
  kNotMaster,
  // Anything else: our call is wrong (wrong arguments, a script error, a key of another type:
  // WRONGTYPE). Internal, that call's alone.
  kCall,
};

// Reads Redis's error text ("OOM command not allowed when ...") by its first word.
RedisErrorKind ClassifyRedisError(std::string_view text);

// "redis: <text>", Unavailable or Internal as ClassifyRedisError says.
absl::Status RedisErrorStatus(std::string_view text);

// ClassifyRedisError of the error text in a status RedisErrorStatus made; kCall for any other.
RedisErrorKind ClassifyRedisStatus(const absl::Status& status);

// The error text in a status RedisErrorStatus made ("OOM command not allowed..."); the whole
// message for any other.
std::string_view RedisErrorText(const absl::Status& status);

// Whether the failure policy decides a call that failed with `status`: Redis could not be
// reached in time or cannot decide now (Unavailable, DeadlineExceeded), as opposed to the
// call's own error.
inline bool IsStoreUnavailable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

}  // namespace sluice::internal
