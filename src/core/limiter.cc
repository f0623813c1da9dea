#include "sluice/limiter.h"

#include <algorithm>
#include <cassert>
#include <utility>

#include "absl/container/inlined_vector.h"

namespace sluice {

Limiter::Limiter(Limit limit, Store& store, Clock& clock)
    : Limiter(std::vector<Limit>{limit}, store, clock) {}

Limiter::Limiter(std::vector<Limit> limits, Store& store, Clock& clock)
    : limits_(std::move(limits)),
      shapes_traffic_(
          std::any_of(limits_.begin(), limits_.end(),
                      [](const Limit& l) { return l.algorithm() == Algorithm::kLeakyBucket; })),
      store_(store),
      clock_(clock) {
  assert(!limits_.empty());
}

absl::StatusOr<Decision> Limiter::Check(std::string_view key, int64_t cost) {
  return CheckAt(key, cost, clock_.Now());
}

absl::StatusOr<Decision> Limiter::CheckAt(std::string_view key, int64_t cost, Timestamp now) {
  return DecideAll(key, cost, now);
}

absl::StatusOr<Decision> Limiter::DecideAll(std::string_view key, int64_t cost, Timestamp now) {
  if (limits_.size() == 1) {  // The common case needs no all-or-nothing bookkeeping.
    return store_.Decide(limits_.front(), key, cost, now);
  }
  absl::InlinedVector<LimitedKey, 4> requests;
  for (const Limit& limit : limits_) {
    requests.push_back({&limit, key});
  }
  absl::InlinedVector<Decision, 4> each(requests.size());
  return store_.DecideAll(requests, cost, now, std::span<Decision>(each.data(), each.size()));
}

absl::StatusOr<Decision> Limiter::Acquire(std::string_view key, int64_t cost, Timestamp deadline) {
  while (true) {
    const Timestamp now = clock_.Now();
    if (shapes_traffic_) {
      // A leaky_bucket admission cannot be taken back, so first ask (cost 0, which records
      // nothing) how long the queue would make this request wait.
      absl::StatusOr<Decision> queue = DecideAll(key, 0, now);
      if (!queue.ok()) {
        return queue.status();
      }
      if (now + queue->delay > deadline) {
        Decision d = *queue;
        d.allowed = false;
        d.retry_after = queue->delay - std::max(deadline - now, Micros{0});
        d.delay = Micros{0};
        return d;
      }
    }
    absl::StatusOr<Decision> d = DecideAll(key, cost, now);
    if (!d.ok()) {
      return d;
    }
    if (d->allowed) {
      if (d->delay > Micros{0}) {
        clock_.SleepUntil(now + d->delay);
      }
      return d;
    }
    if (d->never_allowed() || now + d->retry_after > deadline) {
      return d;
    }
    clock_.SleepUntil(now + d->retry_after);
  }
}

}  // namespace sluice
