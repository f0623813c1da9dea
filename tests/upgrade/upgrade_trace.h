#pragma once

// The traces of the upgrade fixture (tests/upgrade/README.md): one limit of each algorithm on
// three keys, trace A decided by the release that wrote the fixture (what its stores then held
// is the fixture), trace B decided by it after (its answers are the fixture's too) and by this
// release from that state. Shared, as it is, by write_fixture.cc, which was built against that
// release, and by the tests: both sides must ask the same.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "sluice/decision.h"
#include "sluice/limit.h"

namespace sluice::upgrade {

inline constexpr const char* kKeys[] = {"a", "b", "{c}:x"};
inline constexpr int64_t kStart = 1'800'000'000'000'000;  // 2027-01-15, in us.

// 5 per second of each algorithm (sliding_buckets in 4 buckets; the buckets with bursts).
inline std::vector<Limit> Limits() {
  const std::chrono::seconds second(1);
  std::vector<Limit> out;
  for (const LimitSpec& spec : std::vector<LimitSpec>{
           {.algorithm = Algorithm::kFixedWindow, .limit = 5, .period = second},
           {.algorithm = Algorithm::kSlidingLog, .limit = 5, .period = second},
           {.algorithm = Algorithm::kSlidingWindow, .limit = 5, .period = second},
           {.algorithm = Algorithm::kSlidingBuckets, .limit = 5, .period = second, .buckets = 4},
           {.algorithm = Algorithm::kTokenBucket, .limit = 5, .period = second, .burst = 8},
           {.algorithm = Algorithm::kGcra, .limit = 5, .period = second, .burst = 3},
           {.algorithm = Algorithm::kLeakyBucket, .limit = 5, .period = second, .burst = 3},
       }) {
    out.push_back(*Limit::Create(spec));
  }
  return out;
}

struct Step {
  size_t limit;
  std::string key;
  int64_t time;
  int64_t cost;
};

// Every limit on a key in turn, 50 ms apart, costs 1 and 2: each fills and is denied.
inline std::vector<Step> TraceA() {
  std::vector<Step> out;
  for (int i = 0; i < 30; ++i) {
    for (size_t l = 0; l < 7; ++l) {
      out.push_back({l, kKeys[i % 3], kStart + i * 50'000, 1 + i % 2});
    }
  }
  return out;
}

// From 1.5 s on, 37 ms apart, costs 0 to 2: windows that turn, buckets that refill.
inline std::vector<Step> TraceB() {
  std::vector<Step> out;
  for (int j = 0; j < 40; ++j) {
    for (size_t l = 0; l < 7; ++l) {
      out.push_back({l, kKeys[j % 3], kStart + 1'500'000 + j * 37'000, j % 3});
    }
  }
  return out;
}

// A step and its answer, as the fixture's *_answers.txt holds them, one a line.
inline std::string FormatAnswer(const Step& s, const Decision& d) {
  return std::to_string(s.limit) + ' ' + s.key + ' ' + std::to_string(s.time) + ' ' +
         std::to_string(s.cost) + ' ' + (d.allowed ? "1" : "0") + ' ' +
         std::to_string(d.remaining) + ' ' + std::to_string(d.reset_after.count()) + ' ' +
         std::to_string(d.retry_after.count()) + ' ' + std::to_string(d.delay.count());
}

}  // namespace sluice::upgrade
