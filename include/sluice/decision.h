#pragma once

// Decision: the answer to one request, with the exact figures of docs/algorithms.md.
// A denial is a normal Decision, never an error.

#include <cstdint>
#include <span>

#include "sluice/clock.h"

namespace sluice {

// The retry_after of a request that can never be allowed (its cost exceeds the limit or the
// burst). On the wire (CSV, JSON) it is written as -1.
inline constexpr Micros kNeverAllowed{-1};

struct Decision {
  bool allowed = false;
  // Further cost-1 requests that would be allowed at this same instant, after this decision.
  int64_t remaining = 0;
  // Time until the limiter holds no trace of past traffic, if no request arrives; 0 if none.
  Micros reset_after{0};
  // 0 when allowed; when denied, the smallest wait (>= 1 us) after which this same request
  // would be allowed if nothing else arrived, or kNeverAllowed.
  Micros retry_after{0};
  // How long the caller must wait before acting on an allowed request (leaky_bucket only).
  Micros delay{0};

  bool never_allowed() const { return retry_after == kNeverAllowed; }
  friend bool operator==(const Decision&, const Decision&) = default;
};

// Combines the decisions of several limits on one request, as the spec's "Several limits on
// one request" says: allowed if all allowed; remaining the minimum; reset_after, retry_after
// and delay the maximum, with kNeverAllowed anywhere winning.
// REQUIRES: !each.empty().
Decision Combine(std::span<const Decision> each);

}  // namespace sluice
