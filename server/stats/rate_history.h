#pragma once

// RateHistory: each rule limit's admitted and denied requests per second over the last
// kSeconds (15 minutes), for the operator's page (server/ui/) to draw as charts that move.
//
// The counters of CounterRegistry only ever grow; Sample reads them once a second (sluiced's
// control loop calls it) and files what each grew by since the last sample under the second
// it was read in. A sample that comes late (the loop was busy) files the whole growth in its
// own second and leaves the seconds it skipped at 0: the totals are kept, the shape is a
// second off. A sample in the same second as the last adds to that second.
//
// Bounded whatever the rules: at most kMaxSeries rule limits are followed, each from its first
// activity (admitted or denied moved); one whose kSeconds are all 0 gives its place up. The
// others are counted in untracked(). Memory: kMaxSeries * kSeconds * 8 bytes at most (1.8 MB),
// plus the names.
//
// Thread-safe: Sample and Recent may run on any threads (one mutex, held for one call).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"

#include "server/rules/rules.h"
#include "sluice/clock.h"
#include "src/core/mutex.h"

namespace sluice::server {

class RateHistory {
 public:
  static constexpr int kSeconds = 900;
  static constexpr size_t kMaxSeries = 256;

  // One rule limit's seconds, oldest first; the last is the second of the last sample.
  struct Series {
    std::string name;  // The counters' name (a rule limit's, as /metrics labels it).
    std::vector<uint32_t> admitted;
    std::vector<uint32_t> denied;
  };
  struct Window {
    Timestamp end;  // The start of the last second (the last sample's); epoch before any.
    std::vector<Series> series;  // In name order.
    size_t untracked = 0;        // Rule limits with activity that have no series.
  };

  // Files each counter's growth since the last sample under the second of `now`. The first
  // sample of a counter only learns where it stands (files nothing). `now` going back (a
  // clock stepped) files under the latest second seen.
  void Sample(const CounterRegistry& counters, Timestamp now);

  // The last `seconds` (1..kSeconds; clamped) of every series.
  Window Recent(int seconds) const;

 private:
  struct Followed {
    uint64_t admitted = 0;  // The counters' totals at the last sample.
    uint64_t denied = 0;
    bool tracked = false;  // Has a ring below.
    // kSeconds slots, second s at s % kSeconds; empty unless tracked.
    std::vector<uint32_t> admitted_ring;
    std::vector<uint32_t> denied_ring;
    int64_t last_active = INT64_MIN;  // The last second that filed something.
  };

  // Zeroes the slots of the seconds after last_second_ up to `second` in every ring.
  void Advance(int64_t second) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  mutable internal::Mutex mutex_;
  std::map<std::string, Followed, std::less<>> followed_ ABSL_GUARDED_BY(mutex_);
  size_t tracked_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t last_second_ ABSL_GUARDED_BY(mutex_) = INT64_MIN;  // Of the last sample.
};

}  // namespace sluice::server
