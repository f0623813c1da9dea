#pragma once

// What the decision benchmarks share: the time as a server reads it (BatchClock), and the
// check that a benchmark meant to admit every call did (Admitted).

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "benchmark/benchmark.h"

#include "sluice/clock.h"
#include "sluice/decision.h"

namespace sluice {

// Once per batch of 1024 requests, not once per request: the "time passed in" benchmarks
// decide at it, so that they measure the decision, not the clock.
class BatchClock {
 public:
  Timestamp Now() {
    if ((++calls_ & 1023) == 1) {
      now_ = SystemClock().Now();
    }
    return now_;
  }

 private:
  int64_t calls_ = 0;
  Timestamp now_;
};

// Whether `d` admitted its request; else the benchmark stops with an error. The peers' hot
// limiters admit every call, and a denial writes nothing, so a figure mixing denials would not
// compare. Also keeps `d` from being optimised away.
inline bool Admitted(benchmark::State& bench, const absl::StatusOr<Decision>& d) {
  benchmark::DoNotOptimize(d);
  if (!d.ok() || !d->allowed) [[unlikely]] {
    const std::string why = d.ok() ? "a call was denied" : d.status().ToString();
    bench.SkipWithError(why.c_str());
    return false;
  }
  return true;
}

// As above, for a yes-or-no answer (DirectLimiter::TryAcquire).
inline bool Admitted(benchmark::State& bench, const absl::StatusOr<bool>& admitted) {
  benchmark::DoNotOptimize(admitted);
  if (!admitted.ok() || !*admitted) [[unlikely]] {
    const std::string why = admitted.ok() ? "a call was denied" : admitted.status().ToString();
    bench.SkipWithError(why.c_str());
    return false;
  }
  return true;
}

}  // namespace sluice
