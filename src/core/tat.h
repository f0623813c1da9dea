#pragma once

// The arithmetic of gcra and leaky_bucket (the spec's TAT), in a header so that it inlines:
// the memory store decides on a compact TAT (src/memory/table.cc) with this code compiled
// into its probe, and algorithms.cc's Decide overloads run the same code. One copy of the
// maths, whoever calls it.
//
// Pure functions over values: thread-safe.

#include <algorithm>
#include <cstdint>
#include <limits>

#include "sluice/algorithms.h"
#include "sluice/limit.h"
#include "src/core/integers.h"

namespace sluice::internal {

// How the 64-bit path divides its numerators, all of them >= 0, by N' and P': here by the
// CPU's division. The hot paths (the memory store's tables, DirectLimiter) pass their own,
// which divide by multiplying (src/memory/divisors.h): the same quotients, a few times faster.
struct PlainDivisors {
  int64_t n;
  int64_t p;
  int64_t ByN(int64_t a) const { return a / n; }
  int64_t ByP(int64_t a) const { return a / p; }
};

// The 128-bit path divides by FloorDiv, its shortcut for operands that fit 64 bits.
struct WideDivisors {
  Int128 n;
  Int128 p;
  Int128 ByN(Int128 a) const { return FloorDiv(a, n); }
  Int128 ByP(Int128 a) const { return FloorDiv(a, p); }
};

// The spec's gcra in integers of type Int: 128 bits always suffice; 64 bits do when every
// product fits (see DecideTat), and then each step is a single instruction.
template <typename Int, typename Divisors>
[[gnu::always_inline]] inline WideDecision DecideTatIn(Int n, Int p, Int capacity, Int t_n, Int tat,
                                                       Int cost, int64_t burst, bool shapes_traffic,
                                                       Int128& tat_out, const Divisors& div) {
  const Int base = std::max(tat, t_n);
  const Int backlog = base + cost * p - t_n;
  WideDecision d;
  d.allowed = backlog <= capacity;
  if (d.allowed && cost > 0) {
    tat_out = base + cost * p;
  }
  const Int ahead = (d.allowed ? backlog : base - t_n);  // max(TAT, t*N) - t*N, after.
  // ahead <= capacity unless time stepped back or the key is in debt (sluice/settle.h); all
  // numerators here are >= 0 but that one.
  d.remaining = ahead <= capacity ? div.ByP(capacity - ahead) : 0;
  d.reset_after_us = div.ByN(ahead + n - 1);  // ceil(ahead / N)
  if (!d.allowed) {
    d.retry_after_us =
        cost > burst ? Int128{kNeverAllowed.count()} : Int128{div.ByN(backlog - capacity + n - 1)};
  } else if (shapes_traffic) {
    d.delay_us = div.ByN(base - t_n + n - 1);
  }
  return d;
}

// Whether gcra admits a request, and the TAT it then leaves, without the figures: the spec's
// "allowed iff backlog <= B*P; then TAT = base + c*P" alone, for a caller that wants yes or no
// (DirectLimiter::TryAcquire). The same test as DecideTatIn's, written as
// max(TAT, t*N) - t*N <= B*P - c*P so that nothing overflows, even after a step back in time.
// REQUIRES: all >= 0; cost_p = c*P <= capacity = B*P; t_n + capacity and tat fit an int64
// (CompactTat's bound).
[[gnu::always_inline]] inline bool AdmitTat64(int64_t t_n, int64_t tat, int64_t cost_p,
                                              int64_t capacity, int64_t& tat_out) {
  const int64_t base = std::max(tat, t_n);
  if (base - t_n > capacity - cost_p) {
    return false;
  }
  tat_out = base + cost_p;
  return true;
}

// gcra and leaky_bucket share state and arithmetic; leaky_bucket adds the delay. `div`
// divides by the limit's N' and P' (PlainDivisors{n, p}, or the table's own).
template <typename Divisors = PlainDivisors>
[[gnu::always_inline]] inline WideDecision DecideTat(const Limit& limit, Int128& tat, Timestamp now,
                                                     int64_t cost, bool shapes_traffic,
                                                     const Divisors& div) {
  const int64_t n = limit.rate_units();
  const int64_t p = limit.rate_period_us();
  const Int128 capacity = Int128{limit.burst()} * p;  // B*P
  const Int128 t_n = Int128{Us(now)} * n;
  // 64 bits hold every value below if t*N, B*P, c*P and TAT stay under 2^61: their sums then
  // stay under 2^63. True for ordinary limits until the year 2200 or so.
  constexpr Int128 kSmall = Int128{1} << 61;
  const Int128 cost_p = Int128{cost} * p;
  if (t_n >= 0 && t_n < kSmall && capacity < kSmall && cost_p < kSmall && tat < kSmall) [[likely]] {
    const int64_t tat64 = tat < 0 ? 0 : static_cast<int64_t>(tat);  // kNoTat: "long ago".
    return DecideTatIn<int64_t>(n, p, static_cast<int64_t>(capacity), static_cast<int64_t>(t_n),
                                tat64, cost, limit.burst(), shapes_traffic, tat, div);
  }
  return DecideTatIn<Int128>(n, p, capacity, t_n, tat, cost, limit.burst(), shapes_traffic, tat,
                             WideDivisors{n, p});
}

// The Decision of `wide`: its times saturated at Micros::max() (see WideDecision).
// REQUIRES: wide.remaining fits in 64 bits (the limit's bounds keep it there).
[[gnu::always_inline]] inline Decision NarrowWide(const WideDecision& wide) {
  auto saturate = [](Int128 us) {
    return Micros{static_cast<int64_t>(std::min<Int128>(us, std::numeric_limits<int64_t>::max()))};
  };
  return {.allowed = wide.allowed,
          .remaining = static_cast<int64_t>(wide.remaining),
          .reset_after = saturate(wide.reset_after_us),
          .retry_after = saturate(wide.retry_after_us),
          .delay = saturate(wide.delay_us)};
}

}  // namespace sluice::internal
