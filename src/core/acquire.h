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

// `decide(cost, now)` returns an absl::StatusOr<Decision> and records the request if allowed.
// `shapes_traffic`: some limit is a leaky_bucket, whose admissions carry a delay.
template <typename DecideFn>
absl::StatusOr<Decision> AcquireWith(Clock& clock, bool shapes_traffic, int64_t cost,
                                     Timestamp deadline, DecideFn&& decide) {
  while (true) {
    const Timestamp now = clock.Now();
    if (shapes_traffic) {
      // A leaky_bucket admission cannot be taken back, so first ask (cost 0, which records
      // nothing) how long the queue would make this request wait.
      absl::StatusOr<Decision> queue = decide(0, now);
      if (!queue.ok()) {
        return queue.status();
      }
      if (now + queue->delay > deadline) {
        Decision d = *queue;
        d.allowed = false;
        d.retry_after = queue->delay - std::max(deadline - now, Micros{0});
        d.delay = Micros{0};
        return d;
      }
    }
    absl::StatusOr<Decision> d = decide(cost, now);
    if (!d.ok()) {
      return d;
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
