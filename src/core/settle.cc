#include "sluice/settle.h"

#include <algorithm>
#include <cassert>
#include <limits>
#include <variant>

#include "fmt/format.h"

#include "src/core/calendar.h"
#include "src/core/integers.h"
#include "src/core/sliding_window.h"

namespace sluice {
namespace {

using internal::CeilDiv;
using internal::FloorDiv;
using internal::Us;

constexpr Int128 kMaxUs = std::numeric_limits<int64_t>::max();

Timestamp AtSaturated(Int128 us) {
  return Timestamp{Micros{static_cast<int64_t>(std::clamp<Int128>(us, kNoTime, kMaxUs))}};
}

// The units that still fit below the ceiling, at most the `x` asked for: ChargePast's c.
int64_t Fits(Int128 room, int64_t x) {
  return static_cast<int64_t>(std::clamp<Int128>(room, 0, x));
}

// ChargePast per algorithm: the rules of docs/algorithms.md's "Settling". Each changes the
// state only when it charges something, as an admission does, and then records t' as its time.

int64_t ChargePastTo(const Limit& limit, FixedWindowState& s, Timestamp now, int64_t x,
                     int64_t debt) {
  const int64_t t = std::max(Us(now), s.last);
  const int64_t count = s.last >= internal::FixedWindowAt(limit, t).start ? s.count : 0;
  const int64_t c = Fits(Int128{limit.limit()} + debt - count, x);
  if (c > 0) {
    s = {.last = t, .count = count + c};
  }
  return c;
}

int64_t ChargePastTo(const Limit& limit, SlidingWindowState& s, Timestamp now, int64_t x,
                     int64_t debt) {
  const int64_t p = limit.period().count();
  const internal::SlidingWindowAt at = internal::MoveSlidingWindow(s, p, now);
  const Int128 room =
      (Int128{limit.limit()} + debt) * p - Int128{at.prev} * (p - at.r) - Int128{at.cur} * p;
  const int64_t c = Fits(FloorDiv(room, p), x);
  if (c > 0) {
    s = {.last = at.t, .cur = at.cur + c, .prev = at.prev};
  }
  return c;
}

// sliding_log (a bucket of 1 us per timestamp, P of them) and sliding_buckets, as Decide runs
// them: the buckets <= floor(t'/width) - span have left the window.
int64_t ChargePastToCounts(int64_t ceiling, int64_t width, int64_t span, int64_t& last,
                           CountQueue& queue, Timestamp now, int64_t x) {
  const int64_t t = std::max(Us(now), last);
  const Int128 bucket = FloorDiv(t, width);
  const Int128 gone = std::max<Int128>(bucket - span, kNoTime);
  int64_t used = queue.total();
  for (const CountQueue::Entry& e : queue.entries()) {
    if (e.index > gone) {
      break;
    }
    used -= e.count;
  }
  const int64_t c = Fits(Int128{ceiling} - used, x);
  if (c > 0) {
    queue.DropThrough(static_cast<int64_t>(gone));
    queue.Add(static_cast<int64_t>(bucket), c);
    last = t;
  }
  return c;
}

int64_t ChargePastTo(const Limit& limit, SlidingLogState& s, Timestamp now, int64_t x,
                     int64_t debt) {
  return ChargePastToCounts(limit.limit() + debt, 1, limit.period().count(), s.last, s.log, now, x);
}

int64_t ChargePastTo(const Limit& limit, SlidingBucketsState& s, Timestamp now, int64_t x,
                     int64_t debt) {
  return ChargePastToCounts(limit.limit() + debt, limit.period().count() / limit.buckets(),
                            limit.buckets(), s.last, s.buckets, now, x);
}

// The level may go below 0, to -D*P' at most: a debt that refills at N' per us like any deficit.
int64_t ChargePastTo(const Limit& limit, TokenBucketState& s, Timestamp now, int64_t x,
                     int64_t debt) {
  const Int128 n = limit.rate_units();
  const Int128 p = limit.rate_period_us();
  const Int128 capacity = Int128{limit.burst()} * p;
  const int64_t t = std::max(Us(now), s.last);
  const Int128 level =
      s.last == kNoTime ? capacity : std::min(capacity, s.level + (Int128{t} - s.last) * n);
  const int64_t c = Fits(FloorDiv(level + Int128{debt} * p, p), x);
  if (c > 0) {
    s = {.level = level - Int128{c} * p, .last = t};
  }
  return c;
}

// gcra and leaky_bucket, at t as given (as Decide): the TAT may run past t*N' + B*P', by D*P'
// at most.
int64_t ChargePastToTat(const Limit& limit, Int128& tat, Timestamp now, int64_t x, int64_t debt) {
  const Int128 p = limit.rate_period_us();
  const Int128 t_n = Int128{Us(now)} * limit.rate_units();
  const Int128 base = std::max(tat, t_n);
  const int64_t c = Fits(FloorDiv((Int128{limit.burst()} + debt) * p - (base - t_n), p), x);
  if (c > 0) {
    tat = base + Int128{c} * p;
  }
  return c;
}
int64_t ChargePastTo(const Limit& limit, GcraState& s, Timestamp now, int64_t x, int64_t debt) {
  return ChargePastToTat(limit, s.tat, now, x, debt);
}
int64_t ChargePastTo(const Limit& limit, LeakyBucketState& s, Timestamp now, int64_t x,
                     int64_t debt) {
  return ChargePastToTat(limit, s.tat, now, x, debt);
}

// How many units `before` holds at `now` that `after` does not: the give-back's size, read off
// the states, so that it is what was returned rather than what was asked. The buckets count a
// part of a unit as nothing (floor): only whole units can be admitted with it.
int64_t Returned(const Limit& limit, const AnyState& before, const AnyState& after, Timestamp now) {
  return std::visit(
      [&](const auto& b) -> int64_t {
        using State = std::decay_t<decltype(b)>;
        const State& a = std::get<State>(after);
        if constexpr (std::is_same_v<State, FixedWindowState>) {
          return b.count - a.count;
        } else if constexpr (std::is_same_v<State, SlidingWindowState>) {
          return (b.cur - a.cur) + (b.prev - a.prev);
        } else if constexpr (std::is_same_v<State, SlidingLogState>) {
          return b.log.total() - a.log.total();
        } else if constexpr (std::is_same_v<State, SlidingBucketsState>) {
          return b.buckets.total() - a.buckets.total();
        } else if constexpr (std::is_same_v<State, TokenBucketState>) {
          if (a == b) {
            return 0;
          }
          // GiveBack refilled the level to t' = max(now, last) before adding to it.
          const Int128 capacity = Int128{limit.burst()} * limit.rate_period_us();
          const Int128 elapsed = Int128{std::max(Us(now), b.last)} - b.last;
          const Int128 level = std::min(capacity, b.level + elapsed * limit.rate_units());
          return static_cast<int64_t>(FloorDiv(a.level - level, limit.rate_period_us()));
        } else {
          return static_cast<int64_t>(FloorDiv(b.tat - a.tat, limit.rate_period_us()));
        }
      },
      before);
}

}  // namespace

absl::Status ValidateSettlement(const Settlement& settlement) {
  if (settlement.units < 0 || settlement.units > Limit::kMaxCount) {
    return absl::InvalidArgumentError(
        fmt::format("cost must be 0 to {}, not {}", Limit::kMaxCount, settlement.units));
  }
  if (settlement.max_debt < kMinDebt || settlement.max_debt > kMaxDebt) {
    return absl::InvalidArgumentError(
        fmt::format("max_debt must be {} to {}, not {}", kMinDebt, kMaxDebt, settlement.max_debt));
  }
  if (settlement.charge.units < 0) {
    return absl::InvalidArgumentError(
        fmt::format("a charge's units must be >= 0, not {}", settlement.charge.units));
  }
  return absl::OkStatus();
}

int64_t ChargePast(const Limit& limit, AnyState& state, Timestamp now, int64_t units,
                   int64_t max_debt) {
  assert(state.index() == static_cast<size_t>(limit.algorithm()));
  assert(units >= 0 && max_debt >= kMinDebt && max_debt <= kMaxDebt);
  if (units <= 0) {
    return 0;
  }
  return std::visit([&](auto& s) { return ChargePastTo(limit, s, now, units, max_debt); }, state);
}

Settled Settle(const Limit& limit, AnyState& state, Timestamp now, const Settlement& settlement) {
  assert(ValidateSettlement(settlement).ok());
  Settled settled;
  const Charge& charge = settlement.charge;
  if (settlement.units < charge.units) {
    // The last units of the charge: for the windows they sit where the whole charge does; for
    // the buckets they are the part of it nearest its TAT, which the same `at` and `ahead` with
    // fewer units name (docs/algorithms.md, "Settling").
    const AnyState before = state;
    GiveBack(limit, state, now,
             {.at = charge.at, .units = charge.units - settlement.units, .ahead = charge.ahead});
    settled.given_back = Returned(limit, before, state, now);
  } else if (settlement.units > charge.units) {
    settled.charged =
        ChargePast(limit, state, now, settlement.units - charge.units, settlement.max_debt);
  }
  settled.after = Decide(limit, state, now, 0);
  return settled;
}

Timestamp GiveBackHorizon(const Limit& limit, const Charge& charge) {
  const Int128 at = Us(charge.at);
  const Int128 p = limit.period().count();
  switch (limit.algorithm()) {
    case Algorithm::kFixedWindow:
      return AtSaturated(internal::FixedWindowAt(limit, Us(charge.at)).end);
    case Algorithm::kSlidingWindow:
      return AtSaturated((FloorDiv(at, p) + 2) * p);
    case Algorithm::kSlidingLog:
      return AtSaturated(at + p);
    case Algorithm::kSlidingBuckets: {
      const Int128 width = p / limit.buckets();
      return AtSaturated((FloorDiv(at, width) + limit.buckets()) * width);
    }
    case Algorithm::kTokenBucket:
    case Algorithm::kGcra:
    case Algorithm::kLeakyBucket:
      return AtSaturated(at + CeilDiv(charge.ahead, limit.rate_units()));
  }
  return AtSaturated(kMaxUs);  // Unreachable: the switch covers every enumerator.
}

}  // namespace sluice
