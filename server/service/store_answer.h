#pragma once

// Awaiting the store from a coroutine (task.h): co_await StoreDecision(...) for
// Store::DecideAllAsync, StoreCharge(...) for ChargeAllAsync, StoreLeases(...) for
// LeaseAllAsync, StoreSettle(...) and StoreReset(...) for SettleAllAsync and ResetAllAsync.
//
// Each awaiter serves one co_await. The store may answer it on any thread, before or after
// the coroutine suspends; one atomic exchange orders the two.

#include <atomic>
#include <coroutine>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/store.h"

namespace sluice::server {

// Awaits a store call that answers a `Result` (absl::StatusOr<Decision> through a DecideDone,
// absl::Status through a StatusDone): `start` makes the call. The store may answer before the call
// returns (the memory store) or later on its own thread (Redis): whichever of the answer and the
// suspension comes second resumes the coroutine, so an answer at once costs no suspension at all.
template <typename Start, typename Result = absl::StatusOr<Decision>>
class StoreAnswer {
 public:
  explicit StoreAnswer(Start start) : start_(std::move(start)) {}

  bool await_ready() const noexcept { return false; }
  // Not inlined: clang before 17 may write to the coroutine's frame after an inlined
  // await_suspend has handed the coroutine to another thread (LLVM issues 56301, 65054).
  [[gnu::noinline]] bool await_suspend(std::coroutine_handle<> waiting) {
    waiting_ = waiting;
    start_([this](Result result) {
      result_.emplace(std::move(result));
      const std::coroutine_handle<> waiting = waiting_;
      // After this exchange the awaiter may be gone (the coroutine resumed and went on).
      if (state_.exchange(kAnswered, std::memory_order_acq_rel) == kSuspended) {
        waiting.resume();
      }
    });
    return state_.exchange(kSuspended, std::memory_order_acq_rel) != kAnswered;
  }
  Result await_resume() { return *std::move(result_); }

 private:
  enum State : int { kStarted, kSuspended, kAnswered };
  Start start_;
  std::coroutine_handle<> waiting_;
  std::optional<Result> result_;
  std::atomic<int> state_{kStarted};
};

// co_await StoreDecision(...): Store::DecideAllAsync's answer.
inline auto StoreDecision(Store& store, std::span<const LimitedKey> keys, int64_t cost,
                          Timestamp now, std::span<Decision> each) {
  return StoreAnswer([&store, keys, cost, now, each](DecideDone done) {
    store.DecideAllAsync(keys, cost, now, each, std::move(done));
  });
}

// co_await StoreCharge(...): Store::ChargeAllAsync's answer.
inline auto StoreCharge(Store& store, std::span<const LimitedKey> keys, int64_t cost, Timestamp now,
                        std::span<Decision> each, std::span<Charge> charges) {
  return StoreAnswer([&store, keys, cost, now, each, charges](DecideDone done) {
    store.ChargeAllAsync(keys, cost, now, each, charges, std::move(done));
  });
}

// co_await StoreSettle(...): Store::SettleAllAsync's answer.
inline auto StoreSettle(Store& store, std::span<const LimitedKey> keys,
                        std::span<const Settlement> settlements, std::string_view once,
                        Timestamp once_until, Timestamp now, std::span<Settled> settled) {
  auto start = [&store, keys, settlements, once, once_until, now, settled](StatusDone done) {
    store.SettleAllAsync(keys, settlements, once, once_until, now, settled, std::move(done));
  };
  return StoreAnswer<decltype(start), absl::Status>(std::move(start));
}

// co_await StoreReset(...): Store::ResetAllAsync's answer.
inline auto StoreReset(Store& store, std::span<const LimitedKey> keys, Timestamp now) {
  auto start = [&store, keys, now](StatusDone done) {
    store.ResetAllAsync(keys, now, std::move(done));
  };
  return StoreAnswer<decltype(start), absl::Status>(std::move(start));
}

// co_await StoreLeases(...): Store::LeaseAllAsync's answer.
inline auto StoreLeases(Store& store, LeaseOp op, std::span<const LeasedKey> keys,
                        std::string_view id, Micros ttl, Timestamp now, std::span<Decision> each) {
  return StoreAnswer([&store, op, keys, id, ttl, now, each](DecideDone done) {
    store.LeaseAllAsync(op, keys, id, ttl, now, each, std::move(done));
  });
}

}  // namespace sluice::server
