#pragma once

// The wait behind Acquire, for Limiter (a key in a Store) and DirectLimiter (one limit held in
// the process): one loop over how each decides. It decides at the clock's time, sleeps on
// the same clock until the answer says to try again, and gives up at once when the request
// can never be allowed or not by the deadline.
//
// Thread-safe as `decide` and `clock` are.

#include <algorithm>
#include <cstdint>

#include "absl/status/statusor.h"

#include "sluice/clock.h"
#include "sluice/decision.h"

namespace sluice::internal {

// The answer to a leaky_bucket request whose place in the queue (`queue`: the queue as a
// cost-0 request sees it, its delay that place's wait) would be served after `deadline`:
// denied, retry_after how much the queue must shrink for a deadline as far away as this one.
inline Decision QueueTooLong(const Decision& queue, Timestamp now, Timestamp deadline) {
  Decision d = queue;
  d.allowed = false;
  d.retry_after = queue.delay - std::max(deadline - now, Micros{0});
  d.delay = Micros{0};
  return d;
}

// How Acquire keeps a leaky_bucket request out of a queue it could not leave by its deadline.
enum class Queueing {
  kNone,      // No limit is a leaky_bucket: nothing to keep out.
  kAskFirst,  // Ask the queue's length (cost 0), then join: a caller joining in between can
              // push our place past the deadline (a Store's decisions, which take no bound).
  kEnforced,  // Join only if our place is served by then, in one step (DirectLimiter's).
};

// `decide(cost, now, max_delay)` returns an absl::StatusOr<Decision> and records the request
// if allowed. With Queueing::kEnforced it does not admit a leaky_bucket request whose place
// would be served after `max_delay` (Micros::max(): no bound): it answers, recording nothing,
// with the queue as a cost-0 request sees it, denied with no retry_after (which no other
// denial has: see Decision), its delay that place's wait.
template <typename DecideFn>
absl::StatusOr<Decision> AcquireWith(Clock& clock, Queueing queueing, int64_t cost,
                                     Timestamp deadline, DecideFn&& decide) {
  while (true) {
    const Timestamp now = clock.Now();
    if (queueing == Queueing::kAskFirst) {
      // A leaky_bucket admission cannot be taken back, so first ask (cost 0, which records
      // nothing) how long the queue would make this request wait.
      absl::StatusOr<Decision> queue = decide(0, now, Micros::max());
      if (!queue.ok()) {
        return queue.status();
      }
      if (now + queue->delay > deadline) {
        return QueueTooLong(*queue, now, deadline);
      }
    }
    absl::StatusOr<Decision> d =
        decide(cost, now, queueing == Queueing::kEnforced ? deadline - now : Micros::max());
    if (!d.ok()) {
      return d;
    }
    if (!d->allowed && d->retry_after == Micros{0}) {
      return QueueTooLong(*d, now, deadline);  // kEnforced: our place would come too late.
    }
    if (d->allowed) {
      if (d->delay > Micros{0}) {
        clock.SleepUntil(now + d->delay);
      }
      return d;
    }
    if (d->never_allowed() || now + d->retry_after > deadline) {
      return d;
    }
    clock.SleepUntil(now + d->retry_after);
  }
}

}  // namespace sluice::internal
