#include "sluice/give_back.h"

#include <algorithm>
#include <cassert>
#include <variant>

#include "src/core/calendar.h"
#include "src/core/integers.h"

namespace sluice {
namespace {

using internal::FloorDiv;
using internal::Us;

Timestamp At(int64_t us) { return Timestamp{Micros{us}}; }

// How much of a bucket charge may come back at t*N' = `t_n`: the part still ahead of the clock,
// TAT1 - t*N', at most the units charged (x P'); <= 0 for nothing (sluice/give_back.h).
Int128 Returnable(const Limit& limit, const Charge& c, Int128 t_n) {
  const Int128 tat1 = Int128{Us(c.at)} * limit.rate_units() + c.ahead;
  return std::min<Int128>(Int128{c.units} * limit.rate_period_us(), tat1 - t_n);
}

void GiveBackTo(const Limit& limit, FixedWindowState& s, Timestamp, const Charge& c) {
  const internal::WindowSpan charged = internal::FixedWindowAt(limit, Us(c.at));
  if (s.last != kNoTime && charged.start <= s.last && s.last < charged.end) {
    s.count = std::max<int64_t>(0, s.count - c.units);
  }
}

void GiveBackTo(const Limit& limit, SlidingWindowState& s, Timestamp, const Charge& c) {
  if (s.last == kNoTime) {
    return;
  }
  const int64_t p = limit.period().count();
  const Int128 window = FloorDiv(Us(c.at), p);
  const Int128 last_window = FloorDiv(s.last, p);
  if (window == last_window) {
    s.cur = std::max<int64_t>(0, s.cur - c.units);
  } else if (window + 1 == last_window) {  // Since shifted into `prev`.
    s.prev = std::max<int64_t>(0, s.prev - c.units);
  }
}

void GiveBackTo(const Limit&, SlidingLogState& s, Timestamp, const Charge& c) {
  s.log.Subtract(Us(c.at), c.units);
}

void GiveBackTo(const Limit& limit, SlidingBucketsState& s, Timestamp, const Charge& c) {
  const int64_t width = limit.period().count() / limit.buckets();
  s.buckets.Subtract(static_cast<int64_t>(FloorDiv(Us(c.at), width)), c.units);
}

void GiveBackTo(const Limit& limit, TokenBucketState& s, Timestamp now, const Charge& c) {
  if (s.last == kNoTime) {  // A full bucket: nothing charged is left in it.
    return;
  }
  const Int128 n = limit.rate_units();
  const Int128 capacity = Int128{limit.burst()} * limit.rate_period_us();
  const int64_t t = std::max(Us(now), s.last);
  const Int128 level = std::min(capacity, s.level + (Int128{t} - s.last) * n);
  const Int128 give = std::min(Returnable(limit, c, Int128{t} * n), capacity - level);
  if (give > 0) {
    s = {.level = level + give, .last = t};
  }
}

// gcra and leaky_bucket: TAT - min(give, TAT - t*N'), never behind the clock.
void GiveBackToTat(const Limit& limit, Int128& tat, Timestamp now, const Charge& c) {
  const Int128 t_n = Int128{Us(now)} * limit.rate_units();
  const Int128 give = std::min(Returnable(limit, c, t_n), tat - t_n);
  if (tat != kNoTat && give > 0) {
    tat -= give;
  }
}
void GiveBackTo(const Limit& limit, GcraState& s, Timestamp now, const Charge& c) {
  GiveBackToTat(limit, s.tat, now, c);
}
void GiveBackTo(const Limit& limit, LeakyBucketState& s, Timestamp now, const Charge& c) {
  GiveBackToTat(limit, s.tat, now, c);
}

}  // namespace

Charge ChargeOf(const Limit& limit, const AnyState& state, Timestamp now, int64_t units) {
  assert(state.index() == static_cast<size_t>(limit.algorithm()));
  const Int128 n = limit.rate_units();
  return std::visit(
      [&](const auto& s) -> Charge {
        using State = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<State, TokenBucketState>) {
          const Int128 capacity = Int128{limit.burst()} * limit.rate_period_us();
          return {.at = At(s.last), .units = units, .ahead = capacity - s.level};
        } else if constexpr (std::is_same_v<State, GcraState> ||
                             std::is_same_v<State, LeakyBucketState>) {
          return {.at = At(Us(now)), .units = units, .ahead = s.tat - Int128{Us(now)} * n};
        } else {
          return {.at = At(s.last), .units = units, .ahead = 0};
        }
      },
      state);
}

void GiveBack(const Limit& limit, AnyState& state, Timestamp now, const Charge& charge) {
  assert(state.index() == static_cast<size_t>(limit.algorithm()));
  if (charge.units <= 0) {
    return;
  }
  std::visit([&](auto& s) { GiveBackTo(limit, s, now, charge); }, state);
}

}  // namespace sluice
