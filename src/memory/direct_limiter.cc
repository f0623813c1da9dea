#include "sluice/direct_limiter.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "fmt/format.h"

#include "sluice/algorithms.h"
#include "src/core/acquire.h"
#include "src/core/mutex.h"
#include "src/core/tat.h"
#include "src/memory/compact_state.h"
#include "src/memory/divisors.h"

namespace sluice {
namespace {

// After a lost compare-and-swap: pause 1, 2, 4 ... up to 64 times before trying again, so that
// the winner's next decisions find the cache line still its own. Measured on 2 threads with the
// time passed in, decisions in all against one thread's: TryAcquire 0.3x without, about 1x with
// (bench/peers/README.md, "One limiter without a key").
struct Backoff {
  int spins = 1;
  void Wait() {
    for (int i = 0; i < spins; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      _mm_pause();  // As SpinLock's wait (src/core/mutex.h).
#endif
    }
    spins = std::min(spins * 2, 64);
  }
};

}  // namespace

// The state and the decision. Most limits keep TAT in one atomic word and decide without a
// lock: read the word, decide on it, and publish the new TAT with a compare-and-swap that
// fails, and decides again, if another thread's decision landed in between. So each decision
// is made on the state every earlier one left, as under a lock. A denial and a cost of 0
// change nothing and write nothing. A limit whose TAT may outgrow 64 bits (TatFitsCompact
// says no: a rate of more than about 1,270 units per its reduced period) keeps the spec's
// 128-bit TAT under a lock instead.
class DirectLimiter::Impl {
 public:
  Impl(Limit limit, Clock& clock)
      : limit_(std::move(limit)),
        clock_(clock),
        shapes_traffic_(limit_.algorithm() == Algorithm::kLeakyBucket),
        compact_(internal::TatFitsCompact(limit_)),
        divisors_(limit_),
        n_(limit_.rate_units()),
        p_(limit_.rate_period_us()),
        capacity_(compact_ ? limit_.burst() * p_ : 0) {}

  const Limit& limit() const { return limit_; }
  Clock& clock() { return clock_; }
  bool shapes_traffic() const { return shapes_traffic_; }
  bool lock_free() const { return compact_; }

  // Decides into `result`, which holds a Decision: the caller's, written in place, not copied
  // through the stack (a copy's mixed-width loads and stores cost more than the decision).
  // `max_delay`: a leaky_bucket request whose place would be served later is not admitted (see
  // internal::AcquireWith); Check passes Micros::max(), no bound.
  void Decide(int64_t cost, Timestamp now, Micros max_delay, absl::StatusOr<Decision>& result) {
    if (cost < 0 || now < kEarliest || now >= kLatest) [[unlikely]] {
      result = Invalid(cost, now);
    } else if (compact_) [[likely]] {
      DecideCompact(cost, now, max_delay, *result);
    } else {
      DecideWide(cost, now, max_delay, *result);
    }
  }

  // The admission alone (DirectLimiter::TryAcquire).
  absl::StatusOr<bool> TryAcquire(int64_t cost, Timestamp now) {
    if (cost < 0 || now < kEarliest || now >= kLatest) [[unlikely]] {
      return Invalid(cost, now);
    }
    if (shapes_traffic_) [[unlikely]] {
      return absl::InvalidArgumentError(fmt::format(
          "{}: TryAcquire is for gcra; a leaky_bucket admission carries a delay, which only "
          "Check and Acquire return",
          limit_.ToString()));
    }
    if (cost > limit_.burst()) {
      return false;  // Never allowed.
    }
    if (!compact_) [[unlikely]] {
      Decision d;
      DecideWide(cost, now, Micros::max(), d);
      return d.allowed;
    }
    int64_t seen;
    return AdmitCompact(cost, now, seen);
  }

 private:
  using Word = internal::CompactTat<GcraState>;  // TAT in 64 bits; kNoTat as kNoCompactTat.

  // Decides on `tat` into `out`; whether to record the new `tat` (the request was admitted
  // with a cost). With a bound (Acquire's: internal::Queueing::kEnforced), a leaky_bucket
  // request first looks at the queue as a cost-0 request does, and if its place there would be
  // served after `max_delay`, takes nothing: `out` is that look, denied with retry_after 0
  // (AcquireWith's sign), its delay the wait (every new place's, whatever its cost).
  [[gnu::always_inline]] bool DecideOn(Int128& tat, int64_t cost, Timestamp now, Micros max_delay,
                                       Decision& out) const {
    if (shapes_traffic_ && max_delay < Micros::max()) [[unlikely]] {
      Int128 unchanged = tat;
      out = internal::NarrowWide(
          internal::DecideTat(limit_, unchanged, now, 0, shapes_traffic_, divisors_));
      if (out.delay > max_delay) {
        out.allowed = false;
        out.retry_after = Micros{0};
        return false;
      }
    }
    const WideDecision d = internal::DecideTat(limit_, tat, now, cost, shapes_traffic_, divisors_);
    out = internal::NarrowWide(d);
    return d.allowed && cost > 0;
  }

  // The one compare-and-swap loop. Whether a request of `cost` (REQUIRES: <= the burst) is
  // admitted, its new TAT published; `seen` is the word it was decided on. The window between
  // reading the word and exchanging it holds only the admission's few instructions (the
  // figures are worked out after, on `seen`), so two threads on one limiter seldom collide; a
  // thread that lost an exchange waits a little, letting the winner's next ones through with
  // the cache line still its own, rather than failing again at once.
  [[gnu::always_inline]] bool AdmitCompact(int64_t cost, Timestamp now, int64_t& seen) {
    // TatFitsCompact bounds t*N' + B*P', so t*N', B*P' and c*P' (c <= B) fit 64 bits.
    const int64_t t_n = now.time_since_epoch().count() * n_;
    const int64_t cost_p = cost * p_;
    // Relaxed: the word is the whole state and publishes nothing else, and the exchanges on
    // one atomic word are totally ordered whatever their memory order.
    seen = tat_.load(std::memory_order_relaxed);
    Backoff backoff;
    while (true) {
      int64_t next;
      if (!internal::AdmitTat64(t_n, seen == internal::kNoCompactTat ? 0 : seen, cost_p, capacity_,
                                next)) {
        return false;
      }
      if (cost == 0 || tat_.compare_exchange_weak(seen, next, std::memory_order_relaxed)) {
        return true;  // A failed exchange loaded the word that beat us into `seen`.
      }
      backoff.Wait();
    }
  }

  [[gnu::always_inline]] void DecideCompact(int64_t cost, Timestamp now, Micros max_delay,
                                            Decision& out) {
    int64_t seen;
    if (cost <= limit_.burst() && max_delay == Micros::max()) [[likely]] {
      AdmitCompact(cost, now, seen);
      // The figures of the decision made on `seen`: DecideOn admits exactly when AdmitTat64
      // does (the spec's test, in other words); its new TAT was published by the exchange.
      Int128 tat = Word::Unpack(seen).tat;
      DecideOn(tat, cost, now, max_delay, out);
      return;
    }
    // Never allowed (cost > burst: nothing to write), or Acquire's bounded join of a
    // leaky_bucket queue, whose look at the queue goes in the same exchange.
    seen = tat_.load(std::memory_order_relaxed);
    while (true) {
      Int128 tat = Word::Unpack(seen).tat;
      if (!DecideOn(tat, cost, now, max_delay, out) ||
          tat_.compare_exchange_weak(seen, Word::Pack({.tat = tat}), std::memory_order_relaxed)) {
        return;
      }
    }
  }

  void DecideWide(int64_t cost, Timestamp now, Micros max_delay, Decision& out) {
    internal::SpinLockHolder hold(mu_);
    Int128 tat = wide_tat_;
    if (DecideOn(tat, cost, now, max_delay, out)) {
      wide_tat_ = tat;
    }
  }

  absl::Status Invalid(int64_t cost, Timestamp now) const {
    if (cost < 0) {
      return absl::InvalidArgumentError(fmt::format("cost must be >= 0, not {}", cost));
    }
    return absl::InvalidArgumentError(
        fmt::format("time {}us is outside the direct limiter's range, 1970 to 2200",
                    now.time_since_epoch().count()));
  }

  const Limit limit_;
  Clock& clock_;
  const bool shapes_traffic_;
  const bool compact_;  // TAT lives in tat_; else in wide_tat_ under mu_.
  const internal::LimitDivisors divisors_;
  const int64_t n_;         // N'
  const int64_t p_;         // P'
  const int64_t capacity_;  // B*P', when compact_.
  // On a line of its own: the word every thread writes should not share one with the
  // read-only fields every thread reads.
  alignas(64) std::atomic<int64_t> tat_{internal::kNoCompactTat};
  internal::SpinLock mu_;
  Int128 wide_tat_ ABSL_GUARDED_BY(mu_) = kNoTat;
};

absl::StatusOr<std::unique_ptr<DirectLimiter>> DirectLimiter::Create(Limit limit, Clock& clock) {
  if (limit.algorithm() != Algorithm::kGcra && limit.algorithm() != Algorithm::kLeakyBucket) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: a direct limiter keeps gcra or leaky_bucket, whose state is one number (for "
        "token_bucket use gcra, which decides the same while the clock runs forward; for a "
        "window, a Limiter over a MemoryStore)",
        limit.ToString()));
  }
  return std::unique_ptr<DirectLimiter>(
      new DirectLimiter(std::make_unique<Impl>(std::move(limit), clock)));
}

DirectLimiter::DirectLimiter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DirectLimiter::~DirectLimiter() = default;

const Limit& DirectLimiter::limit() const { return impl_->limit(); }
bool DirectLimiter::lock_free() const { return impl_->lock_free(); }

absl::StatusOr<Decision> DirectLimiter::Check(int64_t cost) {
  return CheckAt(cost, impl_->clock().Now());
}

absl::StatusOr<Decision> DirectLimiter::CheckAt(int64_t cost, Timestamp now) {
  absl::StatusOr<Decision> result(Decision{});
  impl_->Decide(cost, now, Micros::max(), result);
  return result;
}

absl::StatusOr<bool> DirectLimiter::TryAcquire(int64_t cost) {
  return impl_->TryAcquire(cost, impl_->clock().Now());
}

absl::StatusOr<bool> DirectLimiter::TryAcquireAt(int64_t cost, Timestamp now) {
  return impl_->TryAcquire(cost, now);
}

absl::StatusOr<Decision> DirectLimiter::Acquire(int64_t cost, Timestamp deadline) {
  using internal::Queueing;
  return internal::AcquireWith(impl_->clock(),
                               impl_->shapes_traffic() ? Queueing::kEnforced : Queueing::kNone,
                               cost, deadline, [this](int64_t c, Timestamp now, Micros max_delay) {
                                 absl::StatusOr<Decision> result(Decision{});
                                 impl_->Decide(c, now, max_delay, result);
                                 return result;
                               });
}

}  // namespace sluice
