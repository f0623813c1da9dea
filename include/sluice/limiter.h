#pragma once

// Limiter: the front door of the library. It binds one or more Limits to a Store and a Clock
// and answers for a key: Check (decide now) and Acquire (wait until allowed, within a
// deadline). With several limits (10 per second and 1000 per day, say) a request is decided
// all or nothing: allowed only if every limit allows it, and then every limit counts it.
//
//   sluice::MemoryStore store;
//   sluice::Limiter limiter(*sluice::Limit::Create({.algorithm = sluice::Algorithm::kGcra,
//                                                   .limit = 10, .period = 1s}),
//                           store, sluice::SystemClock());
//   if (!limiter.Check("alice")->allowed) { /* answer 429 */ }
//
// Thread-safe: a Limiter may be shared by any number of threads.

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/limit.h"
#include "sluice/store.h"

namespace sluice {

class Limiter {
 public:
  // `store` and `clock` must outlive the Limiter.
  Limiter(Limit limit, Store& store, Clock& clock);
  // REQUIRES: !limits.empty().
  Limiter(std::vector<Limit> limits, Store& store, Clock& clock);

  const std::vector<Limit>& limits() const { return limits_; }

  // Decides a request of `cost` units on `key` now (one clock read), and records it if allowed.
  // Errors: InvalidArgument for a negative cost; the store's errors.
  absl::StatusOr<Decision> Check(std::string_view key, int64_t cost = 1);

  // As Check, at a time the caller has already read (a server reads its clock once for a
  // batch of requests).
  absl::StatusOr<Decision> CheckAt(std::string_view key, int64_t cost, Timestamp now);

  // Waits, on the Clock, until the request is allowed, then records it and returns its
  // Decision (allowed). For leaky_bucket it also waits out the delay, so the caller may act
  // at once when Acquire returns. Returns a denied Decision at once, without waiting, when
  // the request can never be allowed (retry_after == kNeverAllowed) or cannot be allowed by
  // `deadline` (retry_after then says how long until it could be, for a leaky_bucket queue:
  // until its wait would fit a deadline as far away as this one).
  // Under contention another caller can take the capacity this one waited for; Acquire then
  // waits again, still bounded by `deadline`.
  // Errors: as Check.
  absl::StatusOr<Decision> Acquire(std::string_view key, int64_t cost, Timestamp deadline);

 private:
  absl::StatusOr<Decision> DecideAll(std::string_view key, int64_t cost, Timestamp now);

  std::vector<Limit> limits_;
  bool shapes_traffic_;  // Some limit is a leaky_bucket, whose admissions carry a delay.
  Store& store_;
  Clock& clock_;
};

}  // namespace sluice
