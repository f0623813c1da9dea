#include "sluice/clock.h"

#include <thread>

namespace sluice {
namespace {

class SystemClockImpl final : public Clock {
 public:
  Timestamp Now() const override {
    return std::chrono::time_point_cast<Micros>(std::chrono::system_clock::now());
  }
  void SleepUntil(Timestamp deadline) override { std::this_thread::sleep_until(deadline); }
};

}  // namespace

Clock& SystemClock() {
  static auto* const clock = new SystemClockImpl();  // Never destroyed: no exit races.
  return *clock;
}

Timestamp ManualClock::Now() const {
  std::lock_guard lock(mu_);
  return now_;
}

void ManualClock::SleepUntil(Timestamp deadline) {
  std::unique_lock lock(mu_);
  ++sleepers_;
  changed_.notify_all();  // AwaitSleepers watches the count.
  changed_.wait(lock, [&] { return now_ >= deadline; });
  --sleepers_;
}

void ManualClock::Advance(Micros d) {
  std::lock_guard lock(mu_);
  now_ += d;
  changed_.notify_all();
}

void ManualClock::Set(Timestamp t) {
  std::lock_guard lock(mu_);
  now_ = t;
  changed_.notify_all();
}

void ManualClock::AwaitSleepers(int n) const {
  std::unique_lock lock(mu_);
  changed_.wait(lock, [&] { return sleepers_ >= n; });
}

}  // namespace sluice
