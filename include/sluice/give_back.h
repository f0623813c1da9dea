#pragma once

// Giving back a charge: undoing, later, units that a decision admitted on one limit. A request
// whose limits live in several places (the slots of a Redis Cluster) is charged place by place
// and gives back what the earlier places took when a later one denies; a server that took a
// share of a key's quota gives back what it did not use. Not part of docs/algorithms.md's
// decisions: an extension of them, with one rule above all, that a give-back never lets a
// limit admit more than the spec would have admitted had the charge never been made.
//
//   windows (fixed_window, sliding_window, sliding_log, sliding_buckets): exact. The units
//     come off the count of the window (or bucket, or timestamp) they were charged to; once
//     that has left the window nothing is given back, for then the charge no longer counts.
//   token_bucket, gcra, leaky_bucket: exact when nothing else was charged on the key since;
//     otherwise at most the part of the charge still ahead of the clock. A bucket that refilled
//     to full after the charge "forgets" it, and others' charges since then may rest on that
//     forgetting: the give-back then returns less, or nothing. (With TAT1 the theoretical
//     arrival time just after the charge, TAT2 now's, and t the time of the give-back, the
//     state without the charge is max(TAT2 - u*T, G), with G, made of the later charges alone,
//     at most t + TAT2 - TAT1; the give-back sets max(TAT2 - u*T, t + TAT2 - TAT1).)
//
// The figures a charge leaves for its give-back are a Charge: the store that decided it fills
// it in (RedisStore's script in Redis's time; ChargeOf for a state in this process).
//
// Pure functions over the states of sluice/algorithms.h; thread-compatible as they are.

#include <cstdint>

#include "sluice/algorithms.h"
#include "sluice/clock.h"
#include "sluice/limit.h"

namespace sluice {

struct Charge {
  Timestamp at{};     // The time the charge was recorded at (the decision's t, after
                      // "time that runs backwards is the last time seen").
  int64_t units = 0;  // What was charged; 0: nothing to give back.
  Int128 ahead = 0;   // token_bucket, gcra, leaky_bucket: TAT - at*N' just after the charge
                      // (for token_bucket, its deficit B*P' - level), in the rate's lowest
                      // terms; 0 for the windows.
  friend bool operator==(const Charge&, const Charge&) = default;
};

// What the decision just made on `state` at `now` charged, given that it was allowed with
// cost `units` > 0. REQUIRES: that decision is the last change to `state`.
Charge ChargeOf(const Limit& limit, const AnyState& state, Timestamp now, int64_t units);

// Gives back `charge` on `state` at `now` (see above). Changes nothing when there is nothing
// to give back. REQUIRES: state.index() == static_cast<size_t>(limit.algorithm()); the charge
// was made on this limit and key.
void GiveBack(const Limit& limit, AnyState& state, Timestamp now, const Charge& charge);

}  // namespace sluice
