#include "sluice/memory_store.h"

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"
#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "tests/testing/random.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using testing::Random;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

class MemoryStoreAlgorithmTest : public ::testing::TestWithParam<Algorithm> {};

// The store is the pure algorithm plus a table of states: the same trace over several keys
// gives the same decisions as deciding on per-key states directly.
TEST_P(MemoryStoreAlgorithmTest, DecidesAsThePureAlgorithm) {
  Random random(testing::Seed(100 + static_cast<uint64_t>(GetParam())));
  for (int c = 0; c < 50; ++c) {
    MemoryStore store;
    const Limit limit = random.LimitFor(store, GetParam());
    absl::flat_hash_map<std::string, AnyState> reference;
    int64_t t = kEpoch;
    for (int row = 0; row < 200; ++row) {
      t += random.Gap(limit);
      if (At(t) >= MemoryStore::kLatest) {
        break;  // The store decides up to 2200 only (its documented range).
      }
      const std::string key = "key" + std::to_string(random.Between(0, 5));
      const int64_t cost = random.Cost(limit);
      auto [it, inserted] = reference.try_emplace(key, InitialState(GetParam()));
      const Decision expected = Decide(limit, it->second, At(t), cost);
      const absl::StatusOr<Decision> got = store.Decide(limit, key, cost, At(t));
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(*got, expected) << limit.ToString() << " row " << row;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, MemoryStoreAlgorithmTest,
                         ::testing::ValuesIn(testing::AllAlgorithms()), testing::AlgorithmTestName);

// gcra and leaky_bucket tables divide by each limit's N' and P' their own way (libdivide,
// src/memory/divisors.h): many rates, short traces with steps back in time, every figure as
// the pure algorithm gives it.
TEST(MemoryStoreTest, BucketTablesDecideAsThePureAlgorithmAtEveryRate) {
  Random random(testing::Seed(2300));
  for (const Algorithm algorithm : {Algorithm::kGcra, Algorithm::kLeakyBucket}) {
    MemoryStore store;
    for (int c = 0; c < 2000; ++c) {
      const Limit limit = random.LimitFor(store, algorithm);
      const std::string key = fmt::format("key{}", c);  // A limit may be drawn twice.
      AnyState reference = InitialState(algorithm);
      int64_t t = kEpoch + random.Between(0, 1'000'000'000);
      for (int row = 0; row < 20; ++row) {
        t += random.OneIn(8) ? -random.Between(0, limit.period().count()) : random.Gap(limit);
        t = std::clamp<int64_t>(t, 0, MemoryStore::kLatest.time_since_epoch().count() - 1);
        const int64_t cost = random.Cost(limit);
        const Decision expected = Decide(limit, reference, At(t), cost);
        const absl::StatusOr<Decision> got = store.Decide(limit, key, cost, At(t));
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_EQ(*got, expected) << limit.ToString() << " row " << row << " t " << t;
      }
    }
  }
}

TEST(MemoryStoreTest, DecidesOnlyWithinItsTimeRange) {
  MemoryStore store;
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra,
                                 .limit = 1'000'000'000,
                                 .period = 1s});  // Compact: 1000 per ms.
  EXPECT_TRUE(store.Decide(limit, "k", 1, MemoryStore::kLatest - 1us).ok());
  EXPECT_EQ(store.Decide(limit, "k", 1, MemoryStore::kLatest).status().message(),
            "time 7258118400000000us is outside the memory store's range, 1970 to 2200");
  EXPECT_EQ(store.Decide(limit, "k", 1, At(-1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  const LimitedKey one[] = {{&limit, "k"}};
  std::vector<Decision> each(1);
  EXPECT_EQ(store.DecideAll(one, 1, At(-1), each).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MemoryStoreTest, OnlyAnAdmissionCreatesAKey) {
  MemoryStore store;
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = 1, .period = 1s});
  ASSERT_TRUE(store.Decide(limit, "query", 0, At(kEpoch))->allowed);
  ASSERT_FALSE(store.Decide(limit, "too-big", 2, At(kEpoch))->allowed);
  EXPECT_EQ(store.KeyCount(), 0u);
  ASSERT_TRUE(store.Decide(limit, "real", 1, At(kEpoch))->allowed);
  EXPECT_EQ(store.KeyCount(), 1u);
}

TEST(MemoryStoreTest, EachLimitKeepsItsOwnStateForAKey) {
  MemoryStore store;
  const Limit a = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 1, .period = 1s});
  const Limit b = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 1, .period = 1min});
  EXPECT_TRUE(store.Decide(a, "alice", 1, At(kEpoch))->allowed);
  EXPECT_TRUE(store.Decide(b, "alice", 1, At(kEpoch))->allowed);
  EXPECT_FALSE(store.Decide(a, "alice", 1, At(kEpoch))->allowed);
  EXPECT_TRUE(store.Decide(a, "bob", 1, At(kEpoch))->allowed);
  EXPECT_EQ(store.KeyCount(), 3u);
}

TEST(MemoryStoreTest, DecideAllIsAllOrNothing) {
  MemoryStore store;
  const Limit per_second =
      MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 2, .period = 1s});
  const Limit per_day =
      MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 3, .period = 24h});
  const LimitedKey both[] = {{&per_second, "u"}, {&per_day, "u"}};
  std::vector<Decision> each(2);
  const int64_t midnight = kEpoch - kEpoch % 86'400'000'000;  // Day windows start here.

  EXPECT_TRUE(store.DecideAll(both, 1, At(midnight), each)->allowed);
  EXPECT_TRUE(store.DecideAll(both, 1, At(midnight), each)->allowed);
  // The per-second limit denies the third: the per-day limit must not count it.
  const Decision third = *store.DecideAll(both, 1, At(midnight), each);
  EXPECT_FALSE(third.allowed);
  EXPECT_FALSE(each[0].allowed);
  EXPECT_EQ(each[0].retry_after, 1s);
  // The day limit would have allowed it; it reports its figures as they stand: 1 left.
  EXPECT_TRUE(each[1].allowed);
  EXPECT_EQ(each[1].remaining, 1);
  EXPECT_EQ(third.remaining, 0);
  EXPECT_EQ(third.retry_after, 1s);
  EXPECT_EQ(third.reset_after, 24h);

  // Next second: the day limit has exactly one left, so one passes and the next is denied by it.
  const Decision fourth = *store.DecideAll(both, 1, At(midnight + 1'000'000), each);
  EXPECT_TRUE(fourth.allowed);
  EXPECT_EQ(fourth.remaining, 0);
  const Decision fifth = *store.DecideAll(both, 1, At(midnight + 1'000'000), each);
  EXPECT_FALSE(fifth.allowed);
  EXPECT_TRUE(each[0].allowed);
  EXPECT_EQ(each[0].remaining, 1);  // Not consumed.
  EXPECT_EQ(fifth.retry_after, Micros(24LL * 3600 * 1'000'000 - 1'000'000));
}

TEST(MemoryStoreTest, CombinedDecisionTakesNeverAllowedAndTheLongestDelay) {
  MemoryStore store;
  const Limit leaky =
      MustLimit({.algorithm = Algorithm::kLeakyBucket, .limit = 10, .period = 1s, .burst = 5});
  const Limit small = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 2, .period = 1s});
  const LimitedKey both[] = {{&leaky, "k"}, {&small, "k"}};
  std::vector<Decision> each(2);
  EXPECT_EQ(store.DecideAll(both, 1, At(kEpoch), each)->delay, 0us);
  EXPECT_EQ(store.DecideAll(both, 1, At(kEpoch), each)->delay, 100ms);
  EXPECT_EQ(store.DecideAll(both, 3, At(kEpoch), each)->retry_after, kNeverAllowed);
}

TEST(MemoryStoreTest, RejectsBadRequestsWithoutChangingState) {
  MemoryStore store;
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = 1, .period = 1s});
  const absl::StatusOr<Decision> negative = store.Decide(limit, "k", -1, At(kEpoch));
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(negative.status().message(), "cost must be >= 0, not -1");

  std::vector<Decision> none;
  EXPECT_EQ(store.DecideAll({}, 1, At(kEpoch), none).status().message(),
            "a request needs at least one limit");
  const LimitedKey twice[] = {{&limit, "k"}, {&limit, "k"}};
  std::vector<Decision> each(2);
  EXPECT_EQ(store.DecideAll(twice, 1, At(kEpoch), each).status().message(),
            "limit gcra 1/1s burst 1 on key 'k' appears twice");
  EXPECT_EQ(store.KeyCount(), 0u);
}

TEST(MemoryStoreTest, RefusesMoreDistinctLimitsThanItHoldsTablesFor) {
  MemoryStore store;
  for (size_t i = 1; i <= MemoryStore::kMaxLimits; ++i) {
    const Limit limit = MustLimit({.limit = static_cast<int64_t>(i), .period = 1s});
    ASSERT_TRUE(store.Decide(limit, "k", 0, At(kEpoch)).ok()) << i;
  }
  const Limit one_more = MustLimit({.limit = 5000, .period = 1s});
  const absl::StatusOr<Decision> refused = store.Decide(one_more, "k", 1, At(kEpoch));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  // A limit it already holds still works.
  EXPECT_TRUE(store.Decide(MustLimit({.limit = 7, .period = 1s}), "k", 1, At(kEpoch)).ok());
}

TEST(MemoryStoreTest, RefusesSlidingLogsAboveItsCeilingAtConfigurationTime) {
  MemoryStore store;
  const Limit at = MustLimit({.algorithm = Algorithm::kSlidingLog,
                              .limit = MemoryStore::kMaxSlidingLogLimit,
                              .period = 1h});
  const Limit above = MustLimit({.algorithm = Algorithm::kSlidingLog,
                                 .limit = MemoryStore::kMaxSlidingLogLimit + 1,
                                 .period = 1h});
  EXPECT_TRUE(store.CheckLimit(at).ok());
  EXPECT_EQ(store.CheckLimit(above).message(),
            "sliding_log 10001/1h: the memory store keeps sliding_log limits of at most 10000 (a "
            "log entry per admitted timestamp per key); use sliding_buckets for a sliding window "
            "over more");
  EXPECT_EQ(store.Decide(above, "k", 1, At(kEpoch)).status(), store.CheckLimit(above));
  EXPECT_TRUE(store.Decide(at, "k", 1, At(kEpoch)).ok());
  EXPECT_TRUE(
      store
          .CheckLimit(MustLimit(
              {.algorithm = Algorithm::kSlidingBuckets, .limit = 1'000'000'000, .period = 1h}))
          .ok());
}

}  // namespace
}  // namespace sluice
