#include "server/service/caller_limits.h"

#include <algorithm>
#include <limits>

#include "absl/hash/hash.h"

namespace sluice::server {
namespace {

constexpr int64_t kForever = std::numeric_limits<int64_t>::max() / 4;

int64_t SaturatingAdd(int64_t a, int64_t b) { return a > kForever - b ? kForever : a + b; }

}  // namespace

Micros CallerLimits::Horizon(const Limit& limit) {
  const __int128 period = limit.period().count();
  const __int128 drain = period * limit.burst() / limit.limit() + 1;
  return Micros(static_cast<int64_t>(std::min<__int128>(2 * period + drain, kForever)));
}

CallerLimits::Place* CallerLimits::Find(uint64_t hash, int64_t now_us) {
  for (size_t probe = 0, i = hash & (kSlots - 1); probe < kSlots;
       ++probe, i = (i + 1) & (kSlots - 1)) {
    Place& place = places_[i];
    const uint64_t seen = place.hash.load(std::memory_order_acquire);
    if (seen == kEmpty) {
      return nullptr;
    }
    if (seen == hash) {
      // The first place with this hash is its only one in use (a new one is put at the first
      // place free on the way): out of use, it is a new limit.
      return place.until_us.load(std::memory_order_relaxed) > now_us ? &place : nullptr;
    }
  }
  return nullptr;
}

void CallerLimits::Touch(Place& place, int64_t now_us, int64_t horizon_us) {
  // Written once a horizon at most, so that a limit every thread uses is a line they share
  // for reading: kept between one and two horizons ahead.
  if (place.until_us.load(std::memory_order_relaxed) - now_us < horizon_us) {
    place.until_us.store(SaturatingAdd(now_us, 2 * horizon_us), std::memory_order_relaxed);
  }
}

bool CallerLimits::Admit(const Limit& limit, Timestamp now) {
  const uint64_t hash = absl::Hash<Limit>{}(limit) | 1;
  const int64_t now_us = now.time_since_epoch().count();
  const int64_t horizon_us = Horizon(limit).count();
  if (Place* place = Find(hash, now_us); place != nullptr) [[likely]] {
    Touch(*place, now_us, horizon_us);
    return true;
  }
  internal::MutexLock lock(mu_);
  if (Place* place = Find(hash, now_us); place != nullptr) {  // Another thread put it.
    Touch(*place, now_us, horizon_us);
    return true;
  }
  if (InUse(now) >= kMaxCallerLimits) {
    FreeIdle(now);
    if (InUse(now) >= kMaxCallerLimits) {
      return false;
    }
  }
  for (size_t probe = 0, i = hash & (kSlots - 1); probe < kSlots;
       ++probe, i = (i + 1) & (kSlots - 1)) {
    Place& place = places_[i];
    const uint64_t seen = place.hash.load(std::memory_order_relaxed);
    if (seen == kEmpty || seen == hash ||
        place.until_us.load(std::memory_order_relaxed) <= now_us) {
      // The time first, then the hash (release): a reader that sees the hash sees the time.
      place.until_us.store(SaturatingAdd(now_us, 2 * horizon_us), std::memory_order_relaxed);
      place.hash.store(hash, std::memory_order_release);
      limits_[i] = limit;
      taken_us_[i] = now_us;
      return true;
    }
  }
  return false;  // Unreachable: at most a quarter of the places are in use.
}

void CallerLimits::FreeIdle(Timestamp now) {
  const int64_t now_us = now.time_since_epoch().count();
  if (now_us < next_sweep_us_) {
    return;
  }
  next_sweep_us_ = SaturatingAdd(now_us, kSweepEvery.count());
  for (size_t i = 0; i < kSlots; ++i) {
    Place& place = places_[i];
    if (place.until_us.load(std::memory_order_relaxed) > now_us && limits_[i].has_value() &&
        now_us - taken_us_[i] >= kSettle.count() && !holds_state_(*limits_[i], now)) {
      // Out of use; the hash stays, so that probes go on past it. A reader that found the
      // place a moment ago admits this once (see the header).
      place.until_us.store(0, std::memory_order_relaxed);
    }
  }
}

size_t CallerLimits::InUse(Timestamp now) const {
  const int64_t now_us = now.time_since_epoch().count();
  return static_cast<size_t>(std::count_if(places_.begin(), places_.end(), [&](const Place& p) {
    return p.hash.load(std::memory_order_relaxed) != kEmpty &&
           p.until_us.load(std::memory_order_relaxed) > now_us;
  }));
}

}  // namespace sluice::server
