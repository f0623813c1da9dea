#include "sluice/convert.h"

#include <algorithm>
#include <cassert>
#include <variant>

#include "src/core/calendar.h"
#include "src/core/convert.h"
#include "src/core/integers.h"
#include "src/core/sliding_window.h"

namespace sluice {
namespace {

using internal::CeilDiv;
using internal::FloorDiv;
using internal::Us;

// The buckets' level at t, times P' (tokens x P'): what token_bucket would test a request
// against, and gcra's B*P' - (TAT - t*N')+.
Int128 BucketLevel(const Limit& l, const AnyState& state, int64_t t) {
  const Int128 n = l.rate_units();
  const Int128 p = l.rate_period_us();
  const Int128 capacity = Int128{l.burst()} * p;
  if (const auto* s = std::get_if<TokenBucketState>(&state)) {
    return s->last == kNoTime ? capacity : std::min(capacity, s->level + (Int128{t} - s->last) * n);
  }
  const Int128 tat = std::holds_alternative<GcraState>(state)
                         ? std::get<GcraState>(state).tat
                         : std::get<LeakyBucketState>(state).tat;
  return capacity - std::max<Int128>(0, tat - Int128{t} * n);
}

// The first time the state's figures are read at: max(now, last) for the states that record
// a last time, now for gcra and leaky_bucket (as Decide reads them).
int64_t FirstTime(const AnyState& state, Timestamp now) {
  const int64_t t = Us(now);
  return std::visit(
      [&](const auto& s) -> int64_t {
        if constexpr (requires { s.last; }) {
          return std::max(t, s.last);
        } else {
          return t;
        }
      },
      state);
}

// sliding_log and sliding_buckets: counts in buckets of `width` us, a window of `span` buckets.
struct Windowed {
  int64_t width;
  int64_t span;
};
Windowed WindowedOf(const Limit& l) {
  return l.algorithm() == Algorithm::kSlidingLog
             ? Windowed{1, l.period().count()}
             : Windowed{l.period().count() / l.buckets(), l.buckets()};
}

// The units `from` counts at t (rounded up for the buckets).
Int128 Used(const Limit& from, const AnyState& state, int64_t t) {
  const int64_t p = from.period().count();
  switch (from.algorithm()) {
    case Algorithm::kFixedWindow: {
      const auto& s = std::get<FixedWindowState>(state);
      const internal::WindowSpan w = internal::FixedWindowAt(from, t);
      return w.start <= s.last && s.last < w.end ? s.count : 0;
    }
    case Algorithm::kSlidingWindow: {
      const internal::SlidingWindowAt at =
          internal::MoveSlidingWindow(std::get<SlidingWindowState>(state), p, Timestamp(Micros(t)));
      return Int128{at.cur} + CeilDiv(Int128{at.prev} * (p - at.r), p);
    }
    case Algorithm::kSlidingLog:
    case Algorithm::kSlidingBuckets: {
      const CountQueue& q = from.algorithm() == Algorithm::kSlidingLog
                                ? std::get<SlidingLogState>(state).log
                                : std::get<SlidingBucketsState>(state).buckets;
      const Windowed w = WindowedOf(from);
      Int128 used = 0;
      for (const CountQueue::Entry& e : q.entries()) {
        if ((Int128{e.index} + w.span) * w.width > t) {
          used += e.count;
        }
      }
      return used;
    }
    case Algorithm::kTokenBucket:
    case Algorithm::kGcra:
    case Algorithm::kLeakyBucket: {
      const Int128 p_units = from.rate_period_us();
      return std::max<Int128>(
          0, CeilDiv(Int128{from.burst()} * p_units - BucketLevel(from, state, t), p_units));
    }
  }
  return 0;
}

// An upper bound on what `from` admits in [t, e) from `state` (e > t): its room now, and a
// whole limit for each of its windows that starts before e.
Int128 Allow(const Limit& from, const AnyState& state, int64_t t, int64_t e) {
  const Int128 n = from.limit();
  const int64_t p = from.period().count();
  // Window starts k*P in (t, e): the windows after t's that begin before e.
  const Int128 starts = std::max<Int128>(0, FloorDiv(Int128{e} - 1, p) - FloorDiv(t, p));
  switch (from.algorithm()) {
    case Algorithm::kFixedWindow: {
      const Int128 calendar_starts =
          from.calendar() ? internal::CalendarWindowsBetween(from, t, e - 1) : starts;
      return std::max<Int128>(0, n - Used(from, state, t)) + n * calendar_starts;
    }
    case Algorithm::kSlidingWindow: {
      // Within a window an admission needs cur + c <= N, whatever the previous window holds.
      const internal::SlidingWindowAt at =
          internal::MoveSlidingWindow(std::get<SlidingWindowState>(state), p, Timestamp(Micros(t)));
      return std::max<Int128>(0, n - at.cur) + n * starts;
    }
    case Algorithm::kSlidingLog:
    case Algorithm::kSlidingBuckets: {
      // Any `span` consecutive buckets lie in one window, which holds at most N.
      const Windowed w = WindowedOf(from);
      const Int128 buckets = FloorDiv(Int128{e} - 1, w.width) - FloorDiv(t, w.width) + 1;
      return n * CeilDiv(buckets, w.span);
    }
    case Algorithm::kTokenBucket:
    case Algorithm::kGcra:
    case Algorithm::kLeakyBucket: {
      // The level refills at N' per us, capped at B*P' (which only lowers this bound).
      const Int128 refilled = BucketLevel(from, state, t) + (Int128{e} - t) * from.rate_units();
      return std::max<Int128>(0, FloorDiv(refilled, from.rate_period_us()));
    }
  }
  return 0;
}

// The end of `to`'s first window from t, and what it admits in [t, e) from nothing.
struct FirstWindow {
  int64_t end;
  Int128 fresh;
};
FirstWindow FirstWindowOf(const Limit& to, int64_t t) {
  const int64_t p = to.period().count();
  switch (to.algorithm()) {
    case Algorithm::kFixedWindow:
      return {static_cast<int64_t>(internal::FixedWindowAt(to, t).end), to.limit()};
    case Algorithm::kSlidingWindow:
      return {static_cast<int64_t>((FloorDiv(t, p) + 1) * p), to.limit()};
    case Algorithm::kSlidingLog:
      return {t + p, to.limit()};
    case Algorithm::kSlidingBuckets: {
      const int64_t width = p / to.buckets();
      return {static_cast<int64_t>((FloorDiv(t, width) + to.buckets()) * width), to.limit()};
    }
    default:
      return {t + p, Int128{to.burst()} + to.limit()};
  }
}

// `to`'s state after v units charged at t on a new key. REQUIRES: 0 < v <= capacity + debt.
AnyState Seed(const Limit& to, int64_t t, int64_t v) {
  switch (to.algorithm()) {
    case Algorithm::kFixedWindow:
      return FixedWindowState{.last = t, .count = v};
    case Algorithm::kSlidingWindow:
      return SlidingWindowState{.last = t, .cur = v, .prev = 0};
    case Algorithm::kSlidingLog: {
      SlidingLogState s{.last = t};
      s.log.Add(t, v);
      return s;
    }
    case Algorithm::kSlidingBuckets: {
      SlidingBucketsState s{.last = t};
      s.buckets.Add(static_cast<int64_t>(FloorDiv(t, to.period().count() / to.buckets())), v);
      return s;
    }
    case Algorithm::kTokenBucket:
      return TokenBucketState{.level = (Int128{to.burst()} - v) * to.rate_period_us(), .last = t};
    case Algorithm::kGcra:
      return GcraState{.tat = Int128{t} * to.rate_units() + Int128{v} * to.rate_period_us()};
    case Algorithm::kLeakyBucket:
      return LeakyBucketState{.tat = Int128{t} * to.rate_units() + Int128{v} * to.rate_period_us()};
  }
  return InitialState(to.algorithm());
}

// A window's or log's counts, kept as they are; their total capped at `ceiling` by taking the
// excess off the oldest entries, which leave first, so that the usage at every later time is
// min(what it was, ceiling).
CountQueue Capped(const CountQueue& q, int64_t ceiling) {
  int64_t excess = std::max<int64_t>(0, q.total() - ceiling);
  CountQueue out;
  for (const CountQueue::Entry& e : q.entries()) {
    const int64_t taken = std::min(excess, e.count);
    excess -= taken;
    if (e.count > taken) {
      out.Add(e.index, e.count - taken);
    }
  }
  return out;
}

// Same shape: see the header.
AnyState Carry(const Limit& from, const AnyState& state, const Limit& to, Timestamp now,
               int64_t ceiling) {
  switch (to.algorithm()) {
    case Algorithm::kFixedWindow: {
      FixedWindowState s = std::get<FixedWindowState>(state);
      s.count = std::min(s.count, ceiling);
      return s;
    }
    case Algorithm::kSlidingWindow: {
      SlidingWindowState s = std::get<SlidingWindowState>(state);
      s.cur = std::min(s.cur, ceiling);
      s.prev = std::min(s.prev, ceiling);
      return s;
    }
    case Algorithm::kSlidingLog: {
      const auto& s = std::get<SlidingLogState>(state);
      return SlidingLogState{.last = s.last, .log = Capped(s.log, ceiling)};
    }
    case Algorithm::kSlidingBuckets: {
      const auto& s = std::get<SlidingBucketsState>(state);
      return SlidingBucketsState{.last = s.last, .buckets = Capped(s.buckets, ceiling)};
    }
    default:
      break;
  }
  // The buckets: the used units, in P1' per unit, become the same units in P2' per unit.
  const int64_t t = FirstTime(state, now);
  const Int128 p1 = from.rate_period_us();
  const Int128 p2 = to.rate_period_us();
  const Int128 used1 = Int128{from.burst()} * p1 - BucketLevel(from, state, t);
  // ceil(used1 * P2' / P1'), with used1 = q*P1' + r so that no product passes 128 bits:
  // used1 can reach (B + D)*P1', and times P2' that would be 10^45 for absurd but valid limits.
  const Int128 q = FloorDiv(used1, p1);
  const Int128 used2 = std::min(q * p2 + CeilDiv((used1 - q * p1) * p2, p1), Int128{ceiling} * p2);
  if (used2 <= 0) {
    return InitialState(to.algorithm());
  }
  if (to.algorithm() == Algorithm::kTokenBucket) {
    return TokenBucketState{.level = Int128{to.burst()} * p2 - used2, .last = t};
  }
  const Int128 tat = Int128{t} * to.rate_units() + used2;
  return to.algorithm() == Algorithm::kGcra ? AnyState(GcraState{.tat = tat})
                                            : AnyState(LeakyBucketState{.tat = tat});
}

}  // namespace

int64_t internal::FirstWindowEnd(const Limit& to, int64_t t) { return FirstWindowOf(to, t).end; }

bool SameShape(const Limit& from, const Limit& to) {
  return from.algorithm() == to.algorithm() && from.period() == to.period() &&
         from.buckets() == to.buckets() && from.calendar() == to.calendar() &&
         from.time_zone() == to.time_zone();
}

AnyState ConvertState(const Limit& from, const AnyState& state, const Limit& to, Timestamp now,
                      int64_t max_debt) {
  assert(state.index() == static_cast<size_t>(from.algorithm()));
  assert(max_debt >= 0);
  const int64_t capacity = UsesBurst(to.algorithm()) ? to.burst() : to.limit();
  const int64_t ceiling = capacity + max_debt;
  {
    // A state that has fully reset carries nothing: it decides as a new key does.
    AnyState probe = state;
    if (Decide(from, probe, now, 0).reset_after == Micros{0}) {
      return InitialState(to.algorithm());
    }
  }
  if (SameShape(from, to)) {
    return Carry(from, state, to, now, ceiling);
  }
  const int64_t t = FirstTime(state, now);
  const FirstWindow first = FirstWindowOf(to, t);
  const Int128 used = Used(from, state, t);
  const Int128 lump = std::max(used, first.fresh - Allow(from, state, t, first.end));
  const Int128 v = std::min<Int128>(lump, ceiling);
  if (v <= 0) {
    return InitialState(to.algorithm());
  }
  return Seed(to, t, static_cast<int64_t>(v));
}

}  // namespace sluice
