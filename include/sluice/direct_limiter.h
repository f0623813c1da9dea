#pragma once

// DirectLimiter: one limit on one thing the process holds (an outgoing API's quota, a worker
// pool's pace), with no key and no store: what Guava's RateLimiter, governor's direct limiter
// or folly's TokenBucket is. For most limits its state is one 64-bit word that every decision
// updates with a compare-and-swap, so threads never wait for each other on a lock (lock_free()
// says whether this limit's is). A limit whose state may outgrow 64 bits (more than about 1,270
// units per its period in lowest terms: 1,999 a second, 1,000,003 a day) keeps the 128-bit
// state under a spin lock instead.
//
//   auto upstream = sluice::DirectLimiter::Create(
//       *sluice::Limit::Create({.algorithm = sluice::Algorithm::kGcra, .limit = 100,
//                               .period = 1s}),
//       sluice::SystemClock());
//   if (!(*upstream)->Check()->allowed) { /* wait, or drop the call */ }
//
// Its decisions are the spec's (docs/algorithms.md), to the bit: the same as a Limiter over a
// MemoryStore answers for one key, concurrent calls deciding in the order their updates land. For a
// key per user or IP, several limits all or nothing, or a limit shared by a fleet, use Limiter with
// a Store.
//
// Only gcra and leaky_bucket, whose state is one number: a window algorithm keeps counters,
// and token_bucket two numbers (it decides as gcra does, but treats a step back in time
// differently: use gcra, the same limit to the bit while the clock runs forward).
//
// Thread-safe: shared by any number of threads.

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/limit.h"
#include "sluice/memory_store.h"

namespace sluice {

class DirectLimiter {
 public:
  // The earliest and latest times it decides at: the memory store's, within which the state
  // of most limits provably fits one 64-bit word.
  static constexpr Timestamp kEarliest = MemoryStore::kEarliest;
  static constexpr Timestamp kLatest = MemoryStore::kLatest;

  // Errors: InvalidArgument for an algorithm other than gcra or leaky_bucket. `clock` must
  // outlive the limiter.
  static absl::StatusOr<std::unique_ptr<DirectLimiter>> Create(Limit limit, Clock& clock);

  ~DirectLimiter();
  DirectLimiter(const DirectLimiter&) = delete;
  DirectLimiter& operator=(const DirectLimiter&) = delete;

  const Limit& limit() const;

  // Whether decisions update one atomic word (true) or take a lock (a limit whose state may
  // outgrow 64 bits).
  bool lock_free() const;

  // Decides a request of `cost` units now (one clock read), and records it if allowed.
  // Errors: as CheckAt.
  absl::StatusOr<Decision> Check(int64_t cost = 1);

  // As Check, at a time the caller has already read.
  // Errors: InvalidArgument for a negative cost or a time outside [kEarliest, kLatest).
  absl::StatusOr<Decision> CheckAt(int64_t cost, Timestamp now);

  // Whether a request of `cost` units is admitted now, recording it if so: Check's `allowed`
  // without its figures, for a caller that only goes ahead or not (as Guava's tryAcquire).
  // The same admissions as Check, to the bit; it saves working out remaining and reset_after.
  // gcra only: a leaky_bucket admission carries a delay, which only Check and Acquire return.
  // Errors: as CheckAt; InvalidArgument on a leaky_bucket.
  absl::StatusOr<bool> TryAcquire(int64_t cost = 1);
  // As TryAcquire, at a time the caller has already read.
  absl::StatusOr<bool> TryAcquireAt(int64_t cost, Timestamp now);

  // Waits, on the Clock, until the request is allowed, as Limiter::Acquire does (including a
  // leaky_bucket's delay), and returns its Decision. Returns a denied Decision at once when the
  // request can never be allowed or not by `deadline`. A leaky_bucket request joins the queue
  // only if its place there is served by `deadline`, even when other threads join between its
  // look at the queue and its turn (a Limiter over a store can lose that race).
  // Errors: as Check.
  absl::StatusOr<Decision> Acquire(int64_t cost, Timestamp deadline);

 private:
  class Impl;
  explicit DirectLimiter(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
