// CallerLimits (server/caller_limits.h): the distinct limits callers have in use, bounded, each
// freed once its keys have reset. The race test also runs under ThreadSanitizer.

#include "server/caller_limits.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "tests/testing/util.h"

namespace sluice::server {
namespace {

using sluice::testing::At;
using sluice::testing::kEpoch;
using sluice::testing::MustLimit;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

Limit PerSecond(int64_t n) { return MustLimit({.limit = n, .period = 1s}); }

TEST(CallerLimitsTest, HorizonCoversEveryAlgorithmsReset) {
  // Two periods (a sliding window) and the time a burst takes to drain.
  EXPECT_GE(CallerLimits::Horizon(PerSecond(10)), 2s);
  EXPECT_GE(CallerLimits::Horizon(MustLimit({.algorithm = Algorithm::kGcra,
                                             .limit = 1,
                                             .period = 1s,
                                             .burst = 100})),
            100s);
  // No overflow at the largest figures.
  EXPECT_GT(CallerLimits::Horizon(MustLimit({.algorithm = Algorithm::kTokenBucket,
                                             .limit = 1,
                                             .period = Limit::kMaxPeriod,
                                             .burst = Limit::kMaxCount})),
            Limit::kMaxPeriod);
}

TEST(CallerLimitsTest, ALimitIsInUseUntilItsKeysHaveReset) {
  CallerLimits limits;
  const Timestamp start = At(kEpoch);
  for (int64_t n = 1; n <= static_cast<int64_t>(kMaxCallerLimits); ++n) {
    ASSERT_TRUE(limits.Admit(PerSecond(n), start)) << n;
  }
  EXPECT_FALSE(limits.Admit(PerSecond(0x7fff), start));
  EXPECT_TRUE(limits.Admit(PerSecond(7), start));  // In use: admitted.
  // Within a horizon of the last use, nothing is free.
  const Timestamp soon = start + CallerLimits::Horizon(PerSecond(kMaxCallerLimits));
  EXPECT_FALSE(limits.Admit(PerSecond(0x7fff), soon));
  // Limit 7, used again a little later, stays at least a horizon after that; the others,
  // used last at `start`, have gone by then.
  const Timestamp again = soon + 2s;
  ASSERT_TRUE(limits.Admit(PerSecond(7), again));
  const Timestamp later = again + CallerLimits::Horizon(PerSecond(7));
  EXPECT_EQ(limits.InUse(later), 1u);
  for (int64_t n = 5000; n < 5000 + static_cast<int64_t>(kMaxCallerLimits) - 1; ++n) {
    ASSERT_TRUE(limits.Admit(PerSecond(n), later)) << n;
  }
  EXPECT_TRUE(limits.Admit(PerSecond(7), later));
  EXPECT_FALSE(limits.Admit(PerSecond(1), later));  // Gone, and no room to come back.
}

// Threads admitting overlapping sets of new limits at once, then again once those are idle:
// never more than kMaxCallerLimits distinct ones admitted in a round.
TEST(CallerLimitsRaceTest, NeverMoreThanTheCapInUse) {
  CallerLimits limits;
  constexpr int kThreads = 4;
  for (int round = 0; round < 3; ++round) {
    const Timestamp now = At(kEpoch) + round * 1h;
    std::vector<std::atomic<bool>> admitted(3000);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < 1000; ++i) {
          const int n = (t * 500 + i) % 3000;
          if (limits.Admit(PerSecond(round * 10'000 + n + 1), now)) {
            admitted[n].store(true, std::memory_order_relaxed);
          }
        }
      });
    }
    for (std::thread& thread : threads) {
      thread.join();
    }
    size_t distinct = 0;
    for (const std::atomic<bool>& a : admitted) {
      distinct += a.load() ? 1 : 0;
    }
    EXPECT_EQ(distinct, kMaxCallerLimits) << round;  // 2,500 asked for.
    EXPECT_EQ(limits.InUse(now), kMaxCallerLimits) << round;
  }
}

}  // namespace
}  // namespace sluice::server
