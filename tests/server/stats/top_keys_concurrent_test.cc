// Top offenders under threads (server/stats/top_keys.h): rule limits first seen by several
// threads at once get one summary each, readers run beside writers, and no hit is lost. Also
// under ThreadSanitizer (the `concurrent` label).

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "server/stats/top_keys.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

using ::sluice::testing::At;
using ::sluice::testing::kEpoch;

constexpr int64_t kStart = kEpoch - kEpoch % 60'000'000;

TEST(TopOffendersConcurrentTest, WritersAndReadersLoseNoHit) {
  TopOffenders top;
  top.Enable(true);
  std::vector<RuleCounters> rules(8);
  constexpr int kThreads = 4;
  constexpr int kEach = 20'000;
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      for (const RuleTop& listed : top.Top({}, TopBy::kHits, 5, At(kStart))) {
        EXPECT_LE(listed.keys.size(), 5U);
      }
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const size_t r = static_cast<size_t>(i) % rules.size();
        top.Record(rules[r], fmt::format("rule{}", r), fmt::format("key{}", (i * 7 + t) % 100),
                   i % 3 == 0, 1, At(kStart + i));
      }
    });
  }
  for (std::thread& w : writers) {
    w.join();
  }
  done = true;
  reader.join();
  const std::vector<RuleTop> all = top.Top({}, TopBy::kHits, 100, At(kStart + kEach));
  ASSERT_EQ(all.size(), rules.size());  // One summary per rule limit, however it was raced.
  uint64_t hits = 0;
  for (const RuleTop& listed : all) {
    hits += listed.total;
  }
  EXPECT_EQ(hits, uint64_t{kThreads} * kEach);
}

}  // namespace
}  // namespace sluice::server
