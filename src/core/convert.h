#pragma once

// What sluice/convert.h's ConvertState computes that another store's own copy of it needs from
// the server: RedisStore's script (src/redis/convert.lua) converts inside Redis, but a calendar
// quota's windows far from now are known here only.
//
// Pure functions: thread-safe.

#include <cstdint>

#include "sluice/limit.h"

namespace sluice::internal {

// The end of `to`'s first window from t (us since the epoch): the span in which a key whose
// limit changed to `to` at t admits at most the stricter of its two limits.
int64_t FirstWindowEnd(const Limit& to, int64_t t);

}  // namespace sluice::internal
