#pragma once

// LimitDivisors: how gcra's and leaky_bucket's figures are divided by a limit's N' and P' on
// the hot paths (the 64-bit path of src/core/tat.h): the memory store's tables and the
// DirectLimiter each make one per limit. A 64-bit division takes 15 to 40
// cycles, and a decision makes two or three: on a hot key they were a third of the decision.
// libdivide turns each into a multiply and a shift, with a divider made once per limit. Its
// quotients are exact for every unsigned 64-bit numerator (Granlund and Montgomery's method,
// the one compilers use to divide by a constant), and every numerator there is >= 0, so the
// figures are the same to the bit as the CPU's division gives (a test compares them). Debian's
// libdivide-dev, a header: proven magic numbers rather than our own.
//
// Immutable once made: thread-safe.

#include <libdivide.h>

#include <cstdint>

#include "sluice/limit.h"

namespace sluice::internal {

class LimitDivisors {
 public:
  explicit LimitDivisors(const Limit& limit)
      : n_(static_cast<uint64_t>(limit.rate_units())),
        p_(static_cast<uint64_t>(limit.rate_period_us())) {}

  // REQUIRES: a >= 0.
  int64_t ByN(int64_t a) const { return static_cast<int64_t>(static_cast<uint64_t>(a) / n_); }
  int64_t ByP(int64_t a) const { return static_cast<int64_t>(static_cast<uint64_t>(a) / p_); }

 private:
  libdivide::divider<uint64_t> n_;
  libdivide::divider<uint64_t> p_;
};

}  // namespace sluice::internal
