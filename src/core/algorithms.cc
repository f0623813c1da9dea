#include "sluice/algorithms.h"

#include <algorithm>
#include <cassert>

#include "src/core/calendar.h"
#include "src/core/integers.h"
#include "src/core/sliding_window.h"
#include "src/core/tat.h"

namespace sluice {
namespace {

using internal::CeilDiv;
using internal::DecideTat;
using internal::FloorDiv;
using internal::Us;

// The reference divides gcra's and leaky_bucket's figures by the CPU's division.
internal::PlainDivisors TatDivisors(const Limit& limit) {
  return {.n = limit.rate_units(), .p = limit.rate_period_us()};
}

// Narrows a figure that the limit's bounds keep within 64 bits.
int64_t Narrow(Int128 v) {
  assert(v >= std::numeric_limits<int64_t>::min() && v <= std::numeric_limits<int64_t>::max());
  return static_cast<int64_t>(v);
}
Micros NarrowMicros(Int128 v) { return Micros{Narrow(v)}; }

// sliding_log and sliding_buckets are one algorithm: counts in buckets of `width` us, a window
// of `span` buckets. sliding_log is the case width = 1us, span = P: a bucket per timestamp.
// Bucket i holds traffic until (i + span) * width, when it leaves the window.
Decision DecideWindowedCounts(int64_t limit, int64_t width, int64_t span, int64_t& last,
                              CountQueue& queue, Timestamp now, int64_t cost) {
  const int64_t t = std::max(Us(now), last);
  const int64_t bucket = Narrow(FloorDiv(t, width));
  auto leaves_at = [&](int64_t i) { return (Int128{i} + span) * width; };

  // Entries that have left the window stay in the queue until the next admission drops them.
  int64_t expired = 0;
  for (const CountQueue::Entry& e : queue.entries()) {
    if (leaves_at(e.index) > t) {
      break;
    }
    expired += e.count;
  }
  int64_t used = queue.total() - expired;

  Decision d;
  d.allowed = cost <= limit - used;
  if (d.allowed && cost > 0) {
    queue.DropThrough(Narrow(std::max<Int128>(Int128{bucket} - span, kNoTime)));
    queue.Add(bucket, cost);
    last = t;
    used += cost;
  }
  // A key in debt (a settle charged past the limit, sluice/settle.h) has used > limit.
  d.remaining = std::max<int64_t>(0, limit - used);
  if (used > 0) {
    d.reset_after = NarrowMicros(leaves_at(queue.entries().back().index) - t);
  }
  if (!d.allowed) {
    if (cost > limit) {
      d.retry_after = kNeverAllowed;
    } else {
      int64_t freed = 0;
      for (const CountQueue::Entry& e : queue.entries()) {
        if (leaves_at(e.index) <= t) {
          continue;
        }
        freed += e.count;
        if (used - freed <= limit - cost) {
          d.retry_after = NarrowMicros(leaves_at(e.index) - t);
          break;
        }
      }
    }
  }
  return d;
}

WideDecision DecideTokenBucket(const Limit& limit, TokenBucketState& state, Timestamp now,
                               int64_t cost) {
  const Int128 n = limit.rate_units();
  const Int128 p = limit.rate_period_us();
  const Int128 capacity = Int128{limit.burst()} * p;
  const int64_t t = std::max(Us(now), state.last);
  const Int128 level = state.last == kNoTime
                           ? capacity
                           : std::min(capacity, state.level + (Int128{t} - state.last) * n);
  const Int128 need = Int128{cost} * p;

  WideDecision d;
  d.allowed = level >= need;
  const Int128 after = d.allowed ? level - need : level;
  if (d.allowed && cost > 0) {
    state = {.level = after, .last = t};
  }
  d.remaining = std::max<Int128>(0, FloorDiv(after, p));  // A level in debt is below 0.
  d.reset_after_us = CeilDiv(capacity - after, n);
  if (!d.allowed) {
    d.retry_after_us = cost > limit.burst() ? kNeverAllowed.count() : CeilDiv(need - level, n);
  }
  return d;
}

WideDecision Widen(const Decision& d) {
  return {.allowed = d.allowed,
          .remaining = d.remaining,
          .reset_after_us = d.reset_after.count(),
          .retry_after_us = d.retry_after.count(),
          .delay_us = d.delay.count()};
}

// The exact figures: the bucket algorithms compute them in 128 bits; for the windows, whose
// figures are at most two periods, the 64-bit Decision is already exact.
WideDecision DecideExactly(const Limit& limit, TokenBucketState& state, Timestamp now,
                           int64_t cost) {
  return DecideTokenBucket(limit, state, now, cost);
}
WideDecision DecideExactly(const Limit& limit, GcraState& state, Timestamp now, int64_t cost) {
  return DecideTat(limit, state.tat, now, cost, /*shapes_traffic=*/false, TatDivisors(limit));
}
WideDecision DecideExactly(const Limit& limit, LeakyBucketState& state, Timestamp now,
                           int64_t cost) {
  return DecideTat(limit, state.tat, now, cost, /*shapes_traffic=*/true, TatDivisors(limit));
}
template <typename State>
WideDecision DecideExactly(const Limit& limit, State& state, Timestamp now, int64_t cost) {
  return Widen(Decide(limit, state, now, cost));
}

}  // namespace

void CountQueue::Add(int64_t index, int64_t count) {
  assert(count > 0);
  if (!empty() && entries_.back().index == index) {
    entries_.back().count += count;
  } else {
    assert(empty() || entries_.back().index < index);
    entries_.push_back({index, count});
  }
  total_ += count;
}

void CountQueue::DropThrough(int64_t index) {
  while (!empty() && entries_[head_].index <= index) {
    total_ -= entries_[head_].count;
    ++head_;
  }
  if (empty()) {
    entries_.clear();
    head_ = 0;
  } else if (head_ * 2 >= entries_.size()) {
    entries_.erase(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
}

void CountQueue::Subtract(int64_t index, int64_t count) {
  assert(count >= 0);
  // A give-back comes soon after its charge: look from the newest entry back.
  for (size_t i = entries_.size(); i > head_; --i) {
    Entry& e = entries_[i - 1];
    if (e.index < index) {
      return;
    }
    if (e.index == index) {
      const int64_t taken = std::min(count, e.count);
      e.count -= taken;
      total_ -= taken;
      if (e.count == 0) {
        entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i - 1));
      }
      return;
    }
  }
}

Decision Decide(const Limit& limit, FixedWindowState& state, Timestamp now, int64_t cost) {
  assert(cost >= 0);
  const int64_t n = limit.limit();
  const int64_t t = std::max(Us(now), state.last);
  const internal::WindowSpan window = internal::FixedWindowAt(limit, t);
  int64_t count = state.last >= window.start ? state.count : 0;  // last <= t < window.end.
  const Micros to_window_end = NarrowMicros(window.end - t);

  Decision d;
  d.allowed = cost <= n - count;
  if (d.allowed && cost > 0) {
    count += cost;
    state = {.last = t, .count = count};
  }
  d.remaining = std::max<int64_t>(0, n - count);  // count > N: in debt (sluice/settle.h).
  d.reset_after = count > 0 ? to_window_end : Micros{0};
  if (!d.allowed) {
    d.retry_after = cost > n ? kNeverAllowed : to_window_end;
  }
  return d;
}

Decision Decide(const Limit& limit, SlidingLogState& state, Timestamp now, int64_t cost) {
  assert(cost >= 0);
  return DecideWindowedCounts(limit.limit(), /*width=*/1, /*span=*/limit.period().count(),
                              state.last, state.log, now, cost);
}

Decision Decide(const Limit& limit, SlidingBucketsState& state, Timestamp now, int64_t cost) {
  assert(cost >= 0);
  return DecideWindowedCounts(limit.limit(), limit.period().count() / limit.buckets(),
                              limit.buckets(), state.last, state.buckets, now, cost);
}

Decision Decide(const Limit& limit, SlidingWindowState& state, Timestamp now, int64_t cost) {
  assert(cost >= 0);
  const int64_t n = limit.limit();
  const int64_t p = limit.period().count();
  const internal::SlidingWindowAt at = internal::MoveSlidingWindow(state, p, now);
  const int64_t t = at.t;
  const int64_t r = at.r;
  int64_t cur = at.cur;
  const int64_t prev = at.prev;
  const Int128 np = Int128{n} * p;
  // The sliding count at t, times P: the previous window weighs the part of it, (P - elapsed)/P,
  // that the window (t - P, t] still covers.
  auto weighted = [&](Int128 prev_units, Int128 elapsed, Int128 cur_units) {
    return prev_units * (p - elapsed) + cur_units * p;
  };

  Decision d;
  d.allowed = cost <= n && weighted(prev, r, Int128{cur} + cost) <= np;
  if (d.allowed && cost > 0) {
    cur += cost;
    state = {.last = t, .cur = cur, .prev = prev};
  }
  d.remaining = Narrow(std::max<Int128>(0, FloorDiv(np - weighted(prev, r, cur), p)));
  if (cur > 0) {
    d.reset_after = Micros{2 * p - r};
  } else if (prev > 0) {
    d.reset_after = Micros{p - r};
  }
  if (d.allowed) {
    return d;
  }
  if (cost > n) {
    d.retry_after = kNeverAllowed;
    return d;
  }
  // Without new requests the weighted count only falls, so the answer is the first instant at
  // which the condition holds: look in the rest of this window, then the next, then the one
  // after (where both counts have left and any cost <= N fits).
  const Int128 room_now = np - (Int128{cur} + cost) * p;  // prev * (P - r') must be <= this.
  if (prev > 0 && room_now >= 0) {
    const Int128 wait = std::max<Int128>(1, p - r - room_now / prev);
    if (wait <= p - r - 1) {
      d.retry_after = NarrowMicros(wait);
      return d;
    }
  }
  // In the next window prev' = cur, cur' = 0: cur * (P - r') <= (N - c) * P.
  if (cur == 0) {
    d.retry_after = Micros{p - r};
    return d;
  }
  const Int128 fits = (Int128{n} - cost) * p / cur;  // P - r' must be <= this.
  if (fits >= 1) {
    d.retry_after = NarrowMicros(p - r + std::max<Int128>(0, p - fits));
    return d;
  }
  d.retry_after = Micros{2 * p - r};
  return d;
}

Decision Decide(const Limit& limit, TokenBucketState& state, Timestamp now, int64_t cost) {
  assert(cost >= 0);
  return Narrow(DecideTokenBucket(limit, state, now, cost));
}

Decision Decide(const Limit& limit, GcraState& state, Timestamp now, int64_t cost) {
  assert(cost >= 0);
  return Narrow(
      DecideTat(limit, state.tat, now, cost, /*shapes_traffic=*/false, TatDivisors(limit)));
}

Decision Decide(const Limit& limit, LeakyBucketState& state, Timestamp now, int64_t cost) {
  assert(cost >= 0);
  return Narrow(
      DecideTat(limit, state.tat, now, cost, /*shapes_traffic=*/true, TatDivisors(limit)));
}

AnyState InitialState(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kFixedWindow:
      return FixedWindowState{};
    case Algorithm::kSlidingLog:
      return SlidingLogState{};
    case Algorithm::kSlidingWindow:
      return SlidingWindowState{};
    case Algorithm::kSlidingBuckets:
      return SlidingBucketsState{};
    case Algorithm::kTokenBucket:
      return TokenBucketState{};
    case Algorithm::kGcra:
      return GcraState{};
    case Algorithm::kLeakyBucket:
      return LeakyBucketState{};
  }
  return FixedWindowState{};  // Unreachable: the switch covers every enumerator.
}

Decision Decide(const Limit& limit, AnyState& state, Timestamp now, int64_t cost) {
  assert(state.index() == static_cast<size_t>(limit.algorithm()));
  return std::visit([&](auto& s) { return Decide(limit, s, now, cost); }, state);
}

WideDecision DecideWide(const Limit& limit, AnyState& state, Timestamp now, int64_t cost) {
  assert(cost >= 0);
  assert(state.index() == static_cast<size_t>(limit.algorithm()));
  return std::visit([&](auto& s) { return DecideExactly(limit, s, now, cost); }, state);
}

Decision Narrow(const WideDecision& wide) {
  assert(wide.remaining >= std::numeric_limits<int64_t>::min() &&
         wide.remaining <= std::numeric_limits<int64_t>::max());
  return internal::NarrowWide(wide);
}

}  // namespace sluice
