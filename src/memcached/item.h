#pragma once

// What a MemcachedStore item holds: one limit's state for one key, in the memory store's
// snapshot encoding (src/memory/snapshot.h) after a version byte and the algorithm's number.
// An item is data from the network: DecodeItem checks its shape and that its state is one
// this limit could have made (Plausible) before any algorithm runs on it.
//
// Pure functions: thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

#include "sluice/algorithms.h"
#include "sluice/clock.h"
#include "sluice/limit.h"

namespace sluice::internal {

std::string EncodeItem(const AnyState& state);

// The state `value` holds for `limit`. Internal naming `item_key` when it is not one.
absl::StatusOr<AnyState> DecodeItem(const Limit& limit, std::string_view value,
                                    std::string_view item_key);

// Memcached's longest relative exptime (30 days); a larger number is read as a Unix time.
inline constexpr int64_t kMaxRelativeExptime = 30LL * 86'400;

// The exptime of an item whose state resets after `reset_after`: reset_after + margin in
// whole seconds, rounded up, at least 1 (0 would mean "never"); 0 (never) past 30 days.
int64_t ExptimeOf(Micros reset_after, Micros margin);

// The exptime of a settle's `once` claim, kept until `once_until` (plus `margin`, as every
// item) as seen at `now`: whole seconds rounded up, relative when at most 30 days, else the
// absolute Unix time in seconds (which Memcached reads on its own clock, as it reads every
// time: the fleet's clocks must agree). nullopt when once_until <= now: nothing to keep.
std::optional<int64_t> OnceExptime(Timestamp once_until, Timestamp now, Micros margin);

}  // namespace sluice::internal
