#include "sluice/direct_limiter.h"

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
        divisors_(limit_) {}

  const Limit& limit() const { return limit_; }
  Clock& clock() { return clock_; }
  bool shapes_traffic() const { return shapes_traffic_; }

  // Decides into `result`, which holds a Decision: the caller's, written in place, not copied
  // through the stack (a copy's mixed-width loads and stores cost more than the decision).
  void Decide(int64_t cost, Timestamp now, absl::StatusOr<Decision>& result) {
    if (cost < 0 || now < kEarliest || now >= kLatest) [[unlikely]] {
      result = Invalid(cost, now);
    } else if (compact_) [[likely]] {
      DecideCompact(cost, now, *result);
    } else {
      DecideWide(cost, now, *result);
    }
  }

 private:
  [[gnu::always_inline]] void DecideCompact(int64_t cost, Timestamp now, Decision& out) {
    int64_t seen = tat_.load(std::memory_order_acquire);
    while (true) {
      Int128 tat = internal::CompactTat<GcraState>::Unpack(seen).tat;
      const WideDecision d =
          internal::DecideTat(limit_, tat, now, cost, shapes_traffic_, divisors_);
      // A failed exchange loads the word that beat us into `seen`: decide again on it.
      if (!d.allowed || cost == 0 ||
          tat_.compare_exchange_weak(seen, internal::CompactTat<GcraState>::Pack({.tat = tat}),
                                     std::memory_order_acq_rel, std::memory_order_acquire)) {
        out = internal::NarrowWide(d);
        return;
      }
    }
  }

  void DecideWide(int64_t cost, Timestamp now, Decision& out) {
    internal::SpinLockHolder hold(mu_);
    out = internal::NarrowWide(
        internal::DecideTat(limit_, wide_tat_, now, cost, shapes_traffic_, divisors_));
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
        "token_bucket use gcra, which decides the same; for a window, a Limiter over a "
        "MemoryStore)",
        limit.ToString()));
  }
  return std::unique_ptr<DirectLimiter>(
      new DirectLimiter(std::make_unique<Impl>(std::move(limit), clock)));
}

DirectLimiter::DirectLimiter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DirectLimiter::~DirectLimiter() = default;

const Limit& DirectLimiter::limit() const { return impl_->limit(); }

absl::StatusOr<Decision> DirectLimiter::Check(int64_t cost) {
  return CheckAt(cost, impl_->clock().Now());
}

absl::StatusOr<Decision> DirectLimiter::CheckAt(int64_t cost, Timestamp now) {
  absl::StatusOr<Decision> result(Decision{});
  impl_->Decide(cost, now, result);
  return result;
}

absl::StatusOr<Decision> DirectLimiter::Acquire(int64_t cost, Timestamp deadline) {
  return internal::AcquireWith(impl_->clock(), impl_->shapes_traffic(), cost, deadline,
                               [this](int64_t c, Timestamp now) { return CheckAt(c, now); });
}

}  // namespace sluice
