#pragma once

// The integer steps the algorithms share (algorithms.cc, give_back.cc): exact division of
// signed 128-bit numbers, and a Timestamp as the spec's microseconds.

#include <algorithm>
#include <cstdint>
#include <limits>

#include "sluice/algorithms.h"
#include "sluice/clock.h"

namespace sluice::internal {

// Division rounded towards minus infinity / plus infinity. REQUIRES: b > 0.
// A 128-bit division is a library call several times slower than a 64-bit one, and for most
// limits both operands fit in 64 bits: take the short path then.
inline Int128 FloorDiv(Int128 a, Int128 b) {
  constexpr Int128 kMin = std::numeric_limits<int64_t>::min();
  constexpr Int128 kMax = std::numeric_limits<int64_t>::max();
  if (a > kMin && a <= kMax && b <= kMax) {
    const auto a64 = static_cast<int64_t>(a);
    const auto b64 = static_cast<int64_t>(b);
    const int64_t q = a64 / b64;
    return (a64 % b64 != 0 && a64 < 0) ? q - 1 : q;
  }
  const Int128 q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}
inline Int128 CeilDiv(Int128 a, Int128 b) { return -FloorDiv(-a, b); }

// The time in us. The earliest time, INT64_MIN, is the states' "never" (kNoTime): a request
// then is taken 1 us later, so that what it records is not mistaken for nothing.
inline int64_t Us(Timestamp t) { return std::max(t.time_since_epoch().count(), kNoTime + 1); }

}  // namespace sluice::internal
