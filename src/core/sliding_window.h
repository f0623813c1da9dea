#pragma once

// sliding_window's state as it stands at a time t, before anything is charged: the first step
// of every rule that reads it (docs/algorithms.md, "sliding_window"), so that a decision
// (algorithms.cc) and a settle's charge (settle.cc) cannot see different windows.
//
// A pure function over values: thread-safe.

#include <algorithm>
#include <cstdint>

#include "sluice/algorithms.h"
#include "sluice/clock.h"
#include "src/core/integers.h"

namespace sluice::internal {

struct SlidingWindowAt {
  int64_t t;      // max(now, last): a time earlier than the last one seen counts as that one.
  Int128 window;  // floor(t / P).
  int64_t r;      // t - window * P: how far into its window t is, 0 <= r < P.
  int64_t cur;    // Units of this window.
  int64_t prev;   // Units of the window before, which weighs (P - r) / P at t.
};

// Moving to the next window makes `cur` the new `prev`; moving further clears both.
inline SlidingWindowAt MoveSlidingWindow(const SlidingWindowState& s, int64_t p, Timestamp now) {
  SlidingWindowAt at{
      .t = std::max(Us(now), s.last), .window = 0, .r = 0, .cur = s.cur, .prev = s.prev};
  at.window = FloorDiv(at.t, p);
  const Int128 last_window = FloorDiv(s.last, p);
  if (at.window == last_window + 1) {
    at.prev = at.cur;
    at.cur = 0;
  } else if (at.window > last_window + 1) {
    at.prev = 0;
    at.cur = 0;
  }
  at.r = static_cast<int64_t>(at.t - at.window * p);
  return at;
}

}  // namespace sluice::internal
