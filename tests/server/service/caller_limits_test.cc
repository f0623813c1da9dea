// CallerLimits (server/caller_limits.h): the distinct limits callers have in use, bounded, each
// freed once its keys have reset. The race test also runs under ThreadSanitizer.

#include "server/service/caller_limits.h"

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
// A store that holds state of every limit until it could have reset (the horizon alone).
bool AlwaysHolds(const Limit&, Timestamp) { return true; }

TEST(CallerLimitsTest, HorizonCoversEveryAlgorithmsReset) {
  // Two periods (a sliding window) and the time a burst takes to drain.
  EXPECT_GE(CallerLimits::Horizon(PerSecond(10)), 2s);
  EXPECT_GE(CallerLimits::Horizon(
                MustLimit({.algorithm = Algorithm::kGcra, .limit = 1, .period = 1s, .burst = 100})),
            100s);
  // No overflow at the largest figures.
  EXPECT_GT(CallerLimits::Horizon(MustLimit({.algorithm = Algorithm::kTokenBucket,
                                             .limit = 1,
                                             .period = Limit::kMaxPeriod,
                                             .burst = Limit::kMaxCount})),
            Limit::kMaxPeriod);
}

TEST(CallerLimitsTest, ALimitIsInUseUntilItsKeysHaveReset) {
  CallerLimits limits(AlwaysHolds);
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

// Issue 19: 1,024 limits of a hundred years' period held every place for two centuries,
// whether or not the store kept a key of them. Once all are taken, a place whose limit holds
// no state goes to a new limit (a second after it was taken at the earliest), and the store is
// asked at most once a second.
TEST(CallerLimitsTest, WhenFullALimitHoldingNoStateGivesWay) {
  const auto century = [](int64_t n) {
    return MustLimit({.limit = n, .period = Limit::kMaxPeriod});
  };
  int asked = 0;
  CallerLimits limits([&](const Limit& limit, Timestamp) {
    ++asked;
    return limit.limit() % 2 == 0;  // The store keeps keys of the even limits only.
  });
  const Timestamp start = At(kEpoch);
  for (int64_t n = 1; n <= static_cast<int64_t>(kMaxCallerLimits); ++n) {
    ASSERT_TRUE(limits.Admit(century(n), start)) << n;
  }
  EXPECT_EQ(asked, 0);
  // Just taken: kept, whatever the store holds.
  EXPECT_FALSE(limits.Admit(century(5000), start + 999ms));
  EXPECT_EQ(asked, 0);
  // A second on, the odd ones give way: the store is asked about every place.
  const Timestamp later = start + 1999ms;
  ASSERT_TRUE(limits.Admit(century(5000), later));
  EXPECT_EQ(asked, static_cast<int>(kMaxCallerLimits));
  EXPECT_EQ(limits.InUse(later), kMaxCallerLimits / 2 + 1);
  EXPECT_TRUE(limits.Admit(century(2), later));  // Held its place.
  for (int64_t n = 6001; n < 6001 + static_cast<int64_t>(kMaxCallerLimits) / 2 - 1; ++n) {
    ASSERT_TRUE(limits.Admit(century(n), later)) << n;
  }
  // Full again, with odd limits among the new ones. The store is not asked again within a
  // second of the last time (the even ones it would be asked about are past kSettle)...
  EXPECT_FALSE(limits.Admit(century(1), later + 500ms));
  EXPECT_EQ(asked, static_cast<int>(kMaxCallerLimits)) << "asked again within a second";
  // ...and then it is, about every place, and the odd among 6001... give way.
  EXPECT_TRUE(limits.Admit(century(1), later + 1s));
  EXPECT_EQ(asked, 2 * static_cast<int>(kMaxCallerLimits));
  EXPECT_EQ(limits.InUse(later + 1s), kMaxCallerLimits - kMaxCallerLimits / 4 + 1);
}

// Threads admitting overlapping sets of new limits at once, then again once those are idle:
// never more than kMaxCallerLimits distinct ones admitted in a round.
TEST(CallerLimitsRaceTest, NeverMoreThanTheCapInUse) {
  CallerLimits limits(AlwaysHolds);
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
