#include "server/stats/rate_history.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace sluice::server {
namespace {

using internal::MutexLock;

int64_t SecondOf(Timestamp t) {
  return std::chrono::floor<std::chrono::seconds>(t).time_since_epoch().count();
}

size_t SlotOf(int64_t second) {
  constexpr int64_t k = RateHistory::kSeconds;
  return static_cast<size_t>(((second % k) + k) % k);
}

// A second's count, kept in 32 bits: four billion requests a second is past any server.
void AddTo(uint32_t& slot, uint64_t grown) {
  constexpr uint64_t kMax = std::numeric_limits<uint32_t>::max();
  slot = static_cast<uint32_t>(std::min(kMax, slot + std::min(grown, kMax)));
}

}  // namespace

void RateHistory::Advance(int64_t second) {
  if (last_second_ != INT64_MIN && second > last_second_) {
    // The seconds skipped, and the new one, start at 0 (at most one lap of the rings).
    const int64_t from = std::max(last_second_ + 1, second - kSeconds + 1);
    for (auto& [name, followed] : followed_) {
      if (!followed.tracked) {
        continue;
      }
      for (int64_t s = from; s <= second; ++s) {
        followed.admitted_ring[SlotOf(s)] = 0;
        followed.denied_ring[SlotOf(s)] = 0;
      }
    }
  }
  last_second_ = std::max(last_second_, second);
}

void RateHistory::Sample(const CounterRegistry& counters, Timestamp now) {
  const auto all = counters.All();  // Outside our mutex: the registry has its own.
  MutexLock lock(mutex_);
  // Counters first seen after the first sample were made since the one before: all their
  // counts are new. Those seen at the first sample may have counted for long: only where they
  // stand is learnt.
  const bool first = last_second_ == INT64_MIN;
  Advance(SecondOf(now));
  const int64_t second = last_second_;
  for (const auto& [name, counter] : all) {
    const uint64_t admitted = counter->admitted.load(std::memory_order_relaxed);
    const uint64_t denied = counter->denied.load(std::memory_order_relaxed);
    auto it = followed_.find(name);
    if (it == followed_.end()) {
      it = followed_.emplace(name, Followed{}).first;
      if (first) {
        it->second.admitted = admitted;
        it->second.denied = denied;
      }
    }
    Followed& followed = it->second;
    const uint64_t admitted_grown = admitted - followed.admitted;
    const uint64_t denied_grown = denied - followed.denied;
    followed.admitted = admitted;
    followed.denied = denied;
    if (admitted_grown == 0 && denied_grown == 0) {
      continue;
    }
    followed.last_active = second;
    if (!followed.tracked) {
      if (tracked_ >= kMaxSeries) {
        continue;
      }
      followed.tracked = true;
      ++tracked_;
      followed.admitted_ring.assign(kSeconds, 0);
      followed.denied_ring.assign(kSeconds, 0);
    }
    AddTo(followed.admitted_ring[SlotOf(second)], admitted_grown);
    AddTo(followed.denied_ring[SlotOf(second)], denied_grown);
  }
  // A series with nothing in its window gives its place up.
  for (auto& [name, followed] : followed_) {
    if (followed.tracked && second - followed.last_active >= kSeconds) {
      followed.tracked = false;
      --tracked_;
      followed.admitted_ring = {};
      followed.denied_ring = {};
    }
  }
}

RateHistory::Window RateHistory::Recent(int seconds) const {
  const int n = std::clamp(seconds, 1, kSeconds);
  MutexLock lock(mutex_);
  Window window;
  if (last_second_ == INT64_MIN) {
    return window;
  }
  window.end = Timestamp{std::chrono::seconds(last_second_)};
  for (const auto& [name, followed] : followed_) {
    if (!followed.tracked) {
      if (followed.last_active != INT64_MIN && last_second_ - followed.last_active < kSeconds) {
        ++window.untracked;
      }
      continue;
    }
    Series series{.name = name};
    series.admitted.reserve(static_cast<size_t>(n));
    series.denied.reserve(static_cast<size_t>(n));
    for (int64_t s = last_second_ - n + 1; s <= last_second_; ++s) {
      series.admitted.push_back(followed.admitted_ring[SlotOf(s)]);
      series.denied.push_back(followed.denied_ring[SlotOf(s)]);
    }
    window.series.push_back(std::move(series));
  }
  return window;
}

}  // namespace sluice::server
