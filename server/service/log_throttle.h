#pragma once

// A log line that may come from every request (a store that is down, a partner that answers
// with a lower remaining each time) written at most once every so often, with how many were
// held back since. The clock is the caller's wall clock: a step back counts as the time gone
// (one line more), not as a wait for the clock to catch up (silence for as long as the step).
//
// Thread-safe: any number of threads may ask at once; one of them gets the line.

#include <atomic>
#include <cstdint>

namespace sluice::server {

class LogThrottle {
 public:
  explicit LogThrottle(int64_t every_us) : every_us_(every_us) {}

  // Counts one line; true when it is to be written at `now_us`, and then *held is how many
  // were counted since the last written (this one included), and *first whether none was.
  bool Allow(int64_t now_us, uint64_t* held, bool* first) {
    held_.fetch_add(1, std::memory_order_relaxed);
    int64_t last = last_.load(std::memory_order_relaxed);
    if ((last != INT64_MIN && now_us >= last && now_us - last < every_us_) ||
        !last_.compare_exchange_strong(last, now_us, std::memory_order_relaxed)) {
      return false;
    }
    *held = held_.exchange(0, std::memory_order_relaxed);
    *first = last == INT64_MIN;
    return true;
  }

 private:
  const int64_t every_us_;
  std::atomic<int64_t> last_{INT64_MIN};  // When a line was last written; INT64_MIN: never.
  std::atomic<uint64_t> held_{0};
};

}  // namespace sluice::server
