#pragma once

// ManualTimers: the Timers of deterministic tests. Nothing runs until the test says so:
// RunUntil moves a ManualClock from one due timer to the next and runs each on the test's
// own thread, so waits (POST /v1/acquire) play out in order, without threads or sleeps.

#include <map>
#include <mutex>
#include <utility>

#include "server/service/waiting.h"
#include "sluice/clock.h"

namespace sluice::testing {

class ManualTimers final : public server::Timers {
 public:
  Id At(Timestamp when, absl::AnyInvocable<void() &&> fn) override {
    std::lock_guard lock(mu_);
    const Id id = next_id_++;
    pending_.emplace(std::pair{when, id}, std::move(fn));
    return id;
  }
  void Cancel(Id id) override {
    std::lock_guard lock(mu_);
    std::erase_if(pending_, [&](const auto& entry) { return entry.first.second == id; });
  }

  // Runs, in time order, every timer due by `until` (those they set too), setting `clock`
  // to each one's time (a time already past runs at the clock's time), then sets the clock
  // to `until`. Returns how many ran.
  int RunUntil(ManualClock& clock, Timestamp until) {
    int ran = 0;
    while (true) {
      absl::AnyInvocable<void() &&> fn;
      {
        std::lock_guard lock(mu_);
        if (pending_.empty() || pending_.begin()->first.first > until) {
          break;
        }
        auto first = pending_.begin();
        if (first->first.first > clock.Now()) {
          clock.Set(first->first.first);
        }
        fn = std::move(first->second);
        pending_.erase(first);
      }
      std::move(fn)();
      ++ran;
    }
    if (until > clock.Now()) {
      clock.Set(until);
    }
    return ran;
  }

  size_t pending() const {
    std::lock_guard lock(mu_);
    return pending_.size();
  }

 private:
  mutable std::mutex mu_;
  Id next_id_ = 1;
  // By time, then id: equal times run in the order they were set.
  std::map<std::pair<Timestamp, Id>, absl::AnyInvocable<void() &&>> pending_;
};

}  // namespace sluice::testing
