#pragma once

// Blocks: a rule's `block: D` (ad hoc, "block": "15m"). Once a request is denied by that
// limit, every request on the key is denied for D, fleet-wide, whatever the limit would say,
// with retry_after at the block's end (rate-limiter-flexible's blockDuration, a WAF's
// mitigation timeout).
//
// A block lives in the store beside the limit, as a state of its own: a gcra limit of 1 per
// D with a burst of 1 on the key's block key. Taking its one unit starts a block, and cannot
// while one runs, so the requests a block denies never lengthen it; a cost-0 query answers
// remaining 0 while it runs and reset_after its time left, and 1 once it has ended. So every
// store keeps blocks as it keeps limits (in memory, in Redis for a fleet, in Memcached), and
// a reset forgets a block as it forgets a limit.

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "server/rules/rules.h"
#include "server/service/task.h"
#include "sluice/clock.h"
#include "sluice/limit.h"
#include "sluice/store.h"

namespace sluice::server {

// The limit that keeps blocks is BlockLimit (server/rules/rules.h), made as the rules load.

// The key a block on `key` is kept under: `key` and a suffix that starts with a control byte,
// which neither a rule's key's parts nor an ad hoc key can hold, so it names no limit's key.
std::string BlockKey(std::string_view key);
// Any such key beside `key`: the control byte, `what` and `limit` (feedback.h's keys).
std::string SideKey(std::string_view key, std::string_view what, std::string_view limit = {});

// The time left of the block on each of `blocks` at `now` (0 where none runs), asked of the
// store in one call. The limits and keys `blocks` points to must outlive the task.
internal::Task<absl::StatusOr<std::vector<Micros>>> BlocksLeft(Store& store,
                                                               std::vector<LimitedKey> blocks,
                                                               Timestamp now);

// What holds an ad hoc key back: the time left of its block and of its partner's pause
// (feedback.h); 0 where none runs.
struct HeldBack {
  Micros block{0};
  Micros pause{0};
  Micros left() const { return std::max(block, pause); }
};
// Asks, in one call, for the block under `block` (when not null) and the pause (when `pause`)
// on `key`. `block` and `key` must outlive the task.
internal::Task<absl::StatusOr<HeldBack>> AskHeldBack(Store& store, const Limit* block,
                                                     std::string_view key, bool pause,
                                                     Timestamp now);

// `decision`, of a request a block denies with `left` still to run: denied, nothing left,
// until the block's end.
void DenyForBlock(Decision& decision, Micros left);
// `decision`, of a request whose denial started a block of `duration`: told to come back no
// sooner than the block's end.
void WaitOutBlock(Decision& decision, Micros duration);

// Starts the block `block` at `now`, unless one runs there already.
internal::Task<absl::Status> StartBlock(Store& store, LimitedKey block, Timestamp now);

}  // namespace sluice::server
