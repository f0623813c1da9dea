#include "sluice/limiter.h"

#include <algorithm>
#include <cassert>
#include <utility>

#include "absl/container/inlined_vector.h"

#include "src/core/acquire.h"

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
  using internal::Queueing;
  return internal::AcquireWith(clock_, shapes_traffic_ ? Queueing::kAskFirst : Queueing::kNone,
                               cost, deadline,
                               [&](int64_t c, Timestamp now, Micros /*max_delay: a store cannot*/) {
                                 return DecideAll(key, c, now);
                               });
}

}  // namespace sluice
