#pragma once

// Helpers shared by the tests: exact timestamps, limits that must be valid, and the seed of
// the random traces.

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/limit.h"

namespace sluice {

// Decisions in test failures as their figures, not their bytes.
inline void PrintTo(const Decision& d, std::ostream* os) {
  *os << "{allowed " << d.allowed << ", remaining " << d.remaining << ", reset_after "
      << d.reset_after.count() << ", retry_after " << d.retry_after.count() << ", delay "
      << d.delay.count() << "}";
}

}  // namespace sluice

namespace sluice::testing {

using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace): tests read better.

// Every algorithm, in enum order, and a printable test name for a parameter of that type:
//   INSTANTIATE_TEST_SUITE_P(AllAlgorithms, SomeTest, ::testing::ValuesIn(AllAlgorithms()),
//                            AlgorithmTestName);
inline std::vector<Algorithm> AllAlgorithms() {
  std::vector<Algorithm> all;
  for (int a = 0; a <= static_cast<int>(Algorithm::kLeakyBucket); ++a) {
    all.push_back(static_cast<Algorithm>(a));
  }
  return all;
}
inline std::string AlgorithmTestName(const ::testing::TestParamInfo<Algorithm>& info) {
  return std::string(AlgorithmName(info.param));
}

// A realistic epoch time (2023-11-14T22:13:20Z), aligned to every period up to a second.
inline constexpr int64_t kEpoch = 1'700'000'000'000'000;

// An hour in us, and the first start of an hour after kEpoch: for examples whose windows are
// hours.
inline constexpr int64_t kHourUs = 3'600'000'000;
inline constexpr int64_t kHourStart = (kEpoch / kHourUs + 1) * kHourUs;

inline Timestamp At(int64_t us) { return Timestamp(Micros(us)); }

// A Limit that the test knows to be valid; a failure to create it fails the test.
inline Limit MustLimit(const LimitSpec& spec) {
  absl::StatusOr<Limit> limit = Limit::Create(spec);
  EXPECT_TRUE(limit.ok()) << limit.status();
  return limit.ok() ? *limit : *Limit::Create({.limit = 1, .period = Micros{1}});
}

// The seed of a random test: SLUICE_SEED from the environment, or `fallback`. Printed, so a
// failure can be replayed with SLUICE_SEED=<seed>.
inline uint64_t Seed(uint64_t fallback) {
  uint64_t seed = fallback;
  if (const char* env = std::getenv("SLUICE_SEED"); env != nullptr) {
    seed = std::strtoull(env, nullptr, 10);
  }
  std::cout << "[ seed     ] SLUICE_SEED=" << seed << "\n";
  return seed;
}

}  // namespace sluice::testing
