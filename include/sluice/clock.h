#pragma once

// Time as sluice sees it: integer microseconds since the Unix epoch (the spec's unit, and what
// Redis TIME returns), and the Clock interface through which library code learns the time.
// Library code never reads a system clock directly; it is handed a Clock&.
//
// Thread-safety: every Clock implementation is safe to call from any number of threads.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace sluice {

using Micros = std::chrono::microseconds;
using Timestamp = std::chrono::sys_time<Micros>;

class Clock {
 public:
  virtual ~Clock() = default;

  // The current time.
  virtual Timestamp Now() const = 0;

  // Blocks the calling thread until Now() >= deadline (at once if it already is).
  virtual void SleepUntil(Timestamp deadline) = 0;
};

// The process-wide wall clock (std::chrono::system_clock). It can step backwards when the
// system time is set; the algorithms treat a step back as "no time passed" for a key (see
// docs/algorithms.md).
Clock& SystemClock();

// A clock that moves only when told to: the clock of every deterministic test.
// SleepUntil blocks until another thread advances the time past the deadline, so a test can
// drive a waiting Limiter::Acquire step by step.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(Timestamp start = Timestamp{}) : now_(start) {}

  Timestamp Now() const override;
  void SleepUntil(Timestamp deadline) override;

  // Moves the time forward by `d` (backwards if negative) and wakes the sleepers whose
  // deadline has come.
  void Advance(Micros d);
  // Sets the time to `t`, forwards or backwards, and wakes the sleepers whose deadline has come.
  void Set(Timestamp t);

  // Blocks until at least `n` threads are inside SleepUntil. Tests use it to advance the
  // time only once a waiter is waiting.
  void AwaitSleepers(int n) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  Timestamp now_;     // Guarded by mu_.
  int sleepers_ = 0;  // Guarded by mu_.
};

}  // namespace sluice
