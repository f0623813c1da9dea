#pragma once

// Random limits, gaps and costs for the property tests: tiny to huge limits, periods from
// 1 us to 400 days, gaps from none to days, costs 0, 1, up to and beyond the burst.

#include <algorithm>
#include <cstdint>
#include <random>

#include "absl/status/statusor.h"

#include "sluice/limit.h"
#include "sluice/store.h"

namespace sluice::testing {

class Random {
 public:
  explicit Random(uint64_t seed) : gen_(seed) {}

  int64_t Between(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(gen_);
  }
  bool OneIn(int n) { return Between(1, n) == 1; }

  // Limits from tiny to huge, periods from 1 us to 400 days.
  int64_t Count() {
    switch (Between(0, 3)) {
      case 0:
        return Between(1, 5);
      case 1:
        return Between(1, 100);
      case 2:
        return Between(1, 100'000);
      default:
        return Between(1, 1'000'000'000);
    }
  }
  Micros Period() {
    switch (Between(0, 4)) {
      case 0:
        return Micros(Between(1, 1'000));
      case 1:
        return Micros(Between(1, 10) * 100'000);
      case 2:
        return Micros(Between(1, 60) * 1'000'000);
      case 3:
        return Micros(Between(1, 24) * 3'600'000'000LL);
      default:
        return Micros(Between(1, 400) * 86'400'000'000LL);
    }
  }
  LimitSpec Spec(Algorithm algorithm) {
    LimitSpec spec{.algorithm = algorithm, .limit = Count(), .period = Period()};
    if (OneIn(2)) {
      spec.burst = OneIn(2) ? Between(1, 2 * spec.limit) : Count();
    }
    if (algorithm == Algorithm::kSlidingBuckets) {
      const int64_t k = Between(1, 100);
      spec.period = Micros(spec.period.count() / k * k + (spec.period.count() < k ? k : 0));
      spec.buckets = k;
    }
    return spec;
  }
  // A valid Limit: draws specs until Limit::Create accepts one.
  Limit ValidLimit(Algorithm algorithm) {
    while (true) {
      if (absl::StatusOr<Limit> limit = Limit::Create(Spec(algorithm)); limit.ok()) {
        return *limit;
      }
    }
  }

  // A valid Limit that `store` can also keep (a store may bound limits further).
  Limit LimitFor(const Store& store, Algorithm algorithm) {
    while (true) {
      if (const Limit limit = ValidLimit(algorithm); store.CheckLimit(limit).ok()) {
        return limit;
      }
    }
  }

  // The gap to the next request: none, tiny, about one unit's interval, about a period, huge.
  int64_t Gap(const Limit& limit) {
    const int64_t interval = std::max<int64_t>(1, limit.period().count() / limit.limit());
    switch (Between(0, 5)) {
      case 0:
        return 0;
      case 1:
        return Between(0, 3);
      case 2:
        return Between(0, 2 * interval);
      case 3:
        return Between(0, limit.period().count());
      case 4:
        return Between(0, 3 * limit.period().count());
      default:
        return OneIn(10) ? Between(0, 1'000'000'000'000) : Between(0, interval);
    }
  }
  int64_t Cost(const Limit& limit) {
    switch (Between(0, 9)) {
      case 0:
        return 0;
      case 1:
        return Between(1, limit.burst() + 1);
      case 2:
        return limit.burst() + Between(1, 3);
      default:
        return 1;
    }
  }

 private:
  std::mt19937_64 gen_;
};

}  // namespace sluice::testing
