#pragma once

// Waiting without a thread, for POST /v1/acquire: a request that may go ahead only later
// parks its coroutine here, and a timer, the waiter ahead of it or its client's departure
// resumes it.
//
//   Timers      calls a function at a time (AsioTimers: a thread of its own; tests: manual).
//   WaitLines   one line per key, first come, first served: only the waiter at the head of a
//               line asks the store, so a late-comer cannot take what an earlier one waits
//               for. A waiter can be cancelled (its client went away, the server stops): it
//               is woken at once and gives up its place.
//
// Nothing here resumes a coroutine inline: every wake-up goes through Timers, so a waiter
// that leaves never runs the next one on its own stack.

#include <coroutine>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"

#include "sluice/clock.h"
#include "sluice/store.h"

namespace sluice::server {

class Timers {
 public:
  using Id = uint64_t;  // Names a timer for Cancel; never 0.

  virtual ~Timers() = default;
  // Calls `fn` once, at or after `when` on the server's clock, on a thread of the Timers
  // (never inside At). A time already past means as soon as possible.
  virtual Id At(Timestamp when, absl::AnyInvocable<void() &&> fn) = 0;
  // Drops the timer `id` and its `fn` if it has not run yet; else (or for 0) does nothing.
  // A waiter woken sooner cancels the timer it no longer needs, so that a timer far off
  // (the end of a max_wait) does not hold memory until then.
  virtual void Cancel(Id id) = 0;
};

// Timers on the system clock, run by a thread of their own. Destroying it stops the thread;
// callbacks still pending are dropped.
class AsioTimers final : public Timers {
 public:
  AsioTimers();
  ~AsioTimers() override;
  AsioTimers(const AsioTimers&) = delete;
  AsioTimers& operator=(const AsioTimers&) = delete;

  Id At(Timestamp when, absl::AnyInvocable<void() &&> fn) override;
  void Cancel(Id id) override;
  // Timers not yet run or cancelled (for tests).
  size_t pending() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::thread thread_;
};

// One waiting request. Created by the request's coroutine; shared with whoever may cancel it.
struct Waiter {
  explicit Waiter(std::string line_key) : line(std::move(line_key)) {}

  const std::string line;  // Waiters with equal lines are served in order of arrival.
  // The rest is guarded by the WaitLines' mutex.
  bool head = false;  // First in its line: may ask the store.
  bool in_line = false;
  absl::Status cancelled;  // Why it gave up (client gone, server stopping); OK while it waits.
  std::coroutine_handle<> parked;    // Suspended, waiting to be woken.
  uint64_t sleep = 0;                // Numbers sleeps, so that a stale timer wakes nobody.
  Timers::Id timer = 0;              // Its current park's timer: cancelled when woken sooner.
  std::vector<std::string> wake_on;  // Lease keys whose Notify ends its sleep (or the next).
  bool notified = false;             // Notify came while it was awake: it does not sleep.
};

class WaitLines {
  struct State;

 public:
  // `timers` must outlive the WaitLines; a timer that fires after it is gone does nothing.
  explicit WaitLines(Timers& timers);
  ~WaitLines();
  WaitLines(const WaitLines&) = delete;
  WaitLines& operator=(const WaitLines&) = delete;

  // What co_await Join and co_await Sleep wait on.
  class Park {
   public:
    bool await_ready() const noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> handle);
    void await_resume() const noexcept {}

   private:
    friend class WaitLines;
    Park(std::shared_ptr<State> state, std::shared_ptr<Waiter> waiter, Timestamp until, bool join,
         std::optional<std::vector<std::string>> wake_on = std::nullopt)
        : state_(std::move(state)),
          waiter_(std::move(waiter)),
          until_(until),
          join_(join),
          wake_on_(std::move(wake_on)) {}
    std::shared_ptr<State> state_;
    std::shared_ptr<Waiter> waiter_;
    Timestamp until_;
    bool join_;
    std::optional<std::vector<std::string>> wake_on_;  // SleepOnLeases.
  };

  // co_await Join(w, until): joins w's line at its end; resumes once w is at its head, or
  // cancelled, or at `until` if it is not at the head by then (Head says which).
  Park Join(std::shared_ptr<Waiter> waiter, Timestamp until) {
    return {state_, std::move(waiter), until, /*join=*/true};
  }
  // co_await Sleep(w, until): resumes at `until`, or at once when w is cancelled.
  Park Sleep(std::shared_ptr<Waiter> waiter, Timestamp until) {
    return {state_, std::move(waiter), until, /*join=*/false};
  }
  // Watch(w, keys) before w asks the store, then co_await SleepOnLeases(w, until, keys) if it
  // must wait for a slot: as Sleep, but also resumes when Notify names one of `keys`, and does
  // not sleep at all when Notify named one of the watched keys since Watch (a release while
  // w asked the store is not missed).
  void Watch(const std::shared_ptr<Waiter>& waiter, std::vector<std::string> keys);
  Park SleepOnLeases(std::shared_ptr<Waiter> waiter, Timestamp until,
                     std::vector<std::string> keys) {
    return {state_, std::move(waiter), until, /*join=*/false, std::move(keys)};
  }
  // Wakes the heads of lines watching or sleeping on any of `keys` (slots came back there).
  void Notify(std::span<const LeasedKey> keys);

  // Takes w out of its line; the next waiter, if any, becomes the head and is woken.
  void Leave(const std::shared_ptr<Waiter>& waiter);
  // Wakes w, which then sees `why` in Cancelled() and leaves.
  void Cancel(const std::shared_ptr<Waiter>& waiter, absl::Status why);
  // Cancels every waiter there is, and every one that comes later (the server stops).
  void CancelAll(absl::Status why);
  // Whether w is at the head of its line.
  bool Head(const Waiter& waiter) const;
  // Why w gave up; OK while it waits.
  absl::Status Cancelled(const Waiter& waiter) const;
  // Waiters in lines now.
  size_t waiting() const;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace sluice::server
