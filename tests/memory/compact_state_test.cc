// The memory store's compact encodings: a state packs into 64 bits and back unchanged at the
// edges the proofs name (the largest values that fit, the sentinels), a value past them is
// refused, and a limit whose bound does not fit gets the wide form, which holds it.

#include "src/memory/compact_state.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "sluice/limit.h"
#include "sluice/memory_store.h"
#include "src/memory/table.h"
#include "tests/testing/util.h"

namespace sluice::internal {
namespace {

using sluice::testing::At;
using sluice::testing::MustLimit;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// The last instant the store accepts, in µs.
constexpr int64_t kLastUs = 7'258'118'400'000'000 - 1;

// kCompactUntil x 1270 = 9,217,810,368,000,000,000 leaves 5,561,668,854,775,807 below
// INT64_MAX; x 1271 passes it. With a 1µs period N' = N and P' = 1, so the burst (at most
// Limit::kMaxCount) always fits beside 1270 and never beside 1271.
Limit Gcra(int64_t limit, int64_t period_us, int64_t burst) {
  return MustLimit(
      {.algorithm = Algorithm::kGcra, .limit = limit, .period = Micros(period_us), .burst = burst});
}
Limit TokenBucket(int64_t limit, int64_t period_us, int64_t burst) {
  return MustLimit({.algorithm = Algorithm::kTokenBucket,
                    .limit = limit,
                    .period = Micros(period_us),
                    .burst = burst});
}

TEST(CompactStateTest, TheStoresRangeIsTheProofsRange) {
  EXPECT_EQ(kCompactUntil, kLastUs + 1);
  EXPECT_EQ(kCompactUntil, MemoryStore::kLatest.time_since_epoch().count());
}

TEST(CompactStateTest, TatFitsWhenRateTimesTheEndOfTimePlusTheBurstFitsInt64) {
  EXPECT_TRUE(TatFitsCompact(Gcra(1270, 1, Limit::kMaxCount)));
  EXPECT_FALSE(TatFitsCompact(Gcra(1271, 1, 1)));
  // N' = 1270 and P' = 1,000,001 (coprime): the burst's share is the last 5,561,668,854,775,807
  // units, so a burst of 5,561,663,293 fits (with 112,514 to spare) and one more does not.
  EXPECT_TRUE(TatFitsCompact(Gcra(1270, 1'000'001, 5'561'663'293)));
  EXPECT_FALSE(TatFitsCompact(Gcra(1270, 1'000'001, 5'561'663'294)));
  // Exactly INT64_MAX: 5,561,668,854,775,807 = 156,707,459 x 35,490,773 (a prime, so P' = P).
  EXPECT_TRUE(TatFitsCompact(Gcra(1270, 35'490'773, 156'707'459)));
  EXPECT_FALSE(TatFitsCompact(Gcra(1270, 35'490'773, 156'707'460)));
  // The period divides out: 2540 per 2µs is 1270 per 1µs.
  EXPECT_TRUE(TatFitsCompact(Gcra(2540, 2, 1)));
}

TEST(CompactStateTest, LevelFitsWhenBurstTimesReducedPeriodFitsInt64) {
  // 10^15 x 9223 = 9,223,000,000,000,000,000 <= INT64_MAX < 10^15 x 9224.
  EXPECT_TRUE(LevelFitsCompact(TokenBucket(1, 9223, Limit::kMaxCount)));
  EXPECT_FALSE(LevelFitsCompact(TokenBucket(1, 9224, Limit::kMaxCount)));
  // Exactly INT64_MAX = 153,092,023 x 60,247,241,209.
  EXPECT_TRUE(LevelFitsCompact(TokenBucket(1, 60'247'241'209, 153'092'023)));
  EXPECT_FALSE(LevelFitsCompact(TokenBucket(1, 60'247'241'209, 153'092'024)));
  // P' is the period over gcd(N, P): 2 per 18446us is 1 per 9223us.
  EXPECT_TRUE(LevelFitsCompact(TokenBucket(2, 18'446, Limit::kMaxCount)));
}

template <typename State>
class CompactTatTest : public ::testing::Test {};
using TatStates = ::testing::Types<GcraState, LeakyBucketState>;
TYPED_TEST_SUITE(CompactTatTest, TatStates);

TYPED_TEST(CompactTatTest, RoundTripsEveryTatThatFits) {
  using Compact = CompactTat<TypeParam>;
  for (const Int128 tat : {Int128{kMax}, Int128{0}, Int128{1}, Int128{-1}, Int128{kMin + 1}}) {
    const TypeParam state{.tat = tat};
    ASSERT_TRUE(Compact::Fits(state)) << static_cast<int64_t>(tat);
    EXPECT_EQ(Compact::Pack(state), static_cast<int64_t>(tat));
    EXPECT_TRUE(Compact::Unpack(Compact::Pack(state)) == state) << static_cast<int64_t>(tat);
  }
}

TYPED_TEST(CompactTatTest, KeepsANewKeyAsTheOneValueNoTatCanTake) {
  using Compact = CompactTat<TypeParam>;
  const TypeParam fresh;
  ASSERT_EQ(fresh.tat, kNoTat);
  ASSERT_TRUE(Compact::Fits(fresh));
  EXPECT_EQ(Compact::Pack(fresh), kNoCompactTat);
  EXPECT_EQ(kNoCompactTat, kMin);
  EXPECT_TRUE(Compact::Unpack(kNoCompactTat) == fresh);
}

TYPED_TEST(CompactTatTest, RefusesWhatDoesNotFit) {
  using Compact = CompactTat<TypeParam>;
  EXPECT_FALSE(Compact::Fits(TypeParam{.tat = Int128{kMax} + 1}));
  EXPECT_FALSE(Compact::Fits(TypeParam{.tat = Int128{1} << 100}));
  EXPECT_FALSE(Compact::Fits(TypeParam{.tat = Int128{kMin}})) << "the new key's sentinel";
  EXPECT_FALSE(Compact::Fits(TypeParam{.tat = Int128{kMin} - 1}));
  EXPECT_FALSE(Compact::Fits(TypeParam{.tat = kNoTat + 1}));
}

TEST(CompactTokenBucketTest, RoundTripsTheLargestLevelAndEveryTime) {
  for (const TokenBucketState& state : {
           TokenBucketState{.level = kMax, .last = kLastUs},
           TokenBucketState{.level = 0, .last = 0},
           TokenBucketState{.level = 9'223'000'000'000'000'000, .last = kNoTime},
           TokenBucketState{},  // A new key: a full bucket, whatever its level.
       }) {
    ASSERT_TRUE(CompactTokenBucket::Fits(state)) << static_cast<int64_t>(state.level);
    const CompactTokenBucket::Stored stored = CompactTokenBucket::Pack(state);
    EXPECT_EQ(stored.level, static_cast<int64_t>(state.level));
    EXPECT_EQ(stored.last, state.last);
    EXPECT_TRUE(CompactTokenBucket::Unpack(stored) == state) << static_cast<int64_t>(state.level);
  }
  EXPECT_EQ(sizeof(CompactTokenBucket::Stored), 16u);
}

TEST(CompactTokenBucketTest, RefusesALevelPastInt64) {
  EXPECT_FALSE(CompactTokenBucket::Fits({.level = Int128{kMax} + 1, .last = 0}));
  EXPECT_FALSE(CompactTokenBucket::Fits({.level = Int128{1} << 100, .last = kLastUs}));
}

// The proofs, from the algorithms' side: at the last instant the store accepts, a limit that
// passes TatFitsCompact admits its whole burst into a TAT that still packs; one that fails it
// makes a TAT past 64 bits, which the wide form (AsIs) keeps exactly.
TEST(CompactStateTest, TheLargestTatALimitThatFitsCanReachPacks) {
  const Limit limit = Gcra(1270, 1, Limit::kMaxCount);
  GcraState state;
  ASSERT_TRUE(Decide(limit, state, At(kLastUs), Limit::kMaxCount).allowed);
  EXPECT_EQ(state.tat, Int128{kLastUs} * 1270 + Limit::kMaxCount);
  ASSERT_TRUE(CompactTat<GcraState>::Fits(state));
  EXPECT_TRUE(CompactTat<GcraState>::Unpack(CompactTat<GcraState>::Pack(state)) == state);
  // A backlog past the burst is denied, so the TAT grows no further.
  EXPECT_FALSE(Decide(limit, state, At(kLastUs), 1).allowed);
  EXPECT_TRUE(CompactTat<GcraState>::Fits(state));
}

TEST(CompactStateTest, ALimitThatDoesNotFitReachesPast64BitsAndKeepsTheWideForm) {
  const Limit limit = Gcra(1271, 1, 1);
  ASSERT_FALSE(TatFitsCompact(limit));
  GcraState state;
  ASSERT_TRUE(Decide(limit, state, At(kLastUs), 1).allowed);
  EXPECT_GT(state.tat, Int128{kMax});
  EXPECT_FALSE(CompactTat<GcraState>::Fits(state));
  EXPECT_TRUE(AsIs<GcraState>::Fits(state));
  EXPECT_TRUE(AsIs<GcraState>::Unpack(AsIs<GcraState>::Pack(state)) == state);
}

TEST(CompactStateTest, TheLargestLevelALimitThatFitsCanHoldPacks) {
  const Limit limit = TokenBucket(1, 9223, Limit::kMaxCount);
  TokenBucketState state;
  ASSERT_TRUE(Decide(limit, state, At(kLastUs), 1).allowed);
  EXPECT_EQ(state.level, Int128{Limit::kMaxCount - 1} * 9223);
  ASSERT_TRUE(CompactTokenBucket::Fits(state));
  EXPECT_TRUE(CompactTokenBucket::Unpack(CompactTokenBucket::Pack(state)) == state);
  // A full bucket, as a snapshot may carry it: B x P' itself.
  const TokenBucketState full{.level = Int128{Limit::kMaxCount} * 9223, .last = kLastUs};
  EXPECT_TRUE(CompactTokenBucket::Fits(full));
  EXPECT_TRUE(CompactTokenBucket::Unpack(CompactTokenBucket::Pack(full)) == full);
}

// Storable follows the table MakeTable chose: a compact table refuses a state past 64 bits; the
// wide table of a limit that does not fit takes it.
TEST(CompactStateTest, StorableFollowsTheEncodingTheLimitGets) {
  const GcraState wide{.tat = Int128{kMax} + 1};
  EXPECT_FALSE(Storable(Gcra(1270, 1, 1), wide));
  EXPECT_TRUE(Storable(Gcra(1271, 1, 1), wide));
  EXPECT_TRUE(Storable(Gcra(1270, 1, 1), GcraState{.tat = kMax}));

  const LeakyBucketState wide_leaky{.tat = Int128{kMax} + 1};
  const Limit leaky_compact = MustLimit(
      {.algorithm = Algorithm::kLeakyBucket, .limit = 1270, .period = Micros(1), .burst = 1});
  const Limit leaky_wide = MustLimit(
      {.algorithm = Algorithm::kLeakyBucket, .limit = 1271, .period = Micros(1), .burst = 1});
  EXPECT_FALSE(Storable(leaky_compact, wide_leaky));
  EXPECT_TRUE(Storable(leaky_wide, wide_leaky));

  const TokenBucketState deep{.level = Int128{kMax} + 1, .last = 0};
  EXPECT_FALSE(Storable(TokenBucket(1, 9223, Limit::kMaxCount), deep));
  EXPECT_TRUE(Storable(TokenBucket(1, 9224, Limit::kMaxCount), deep));
}

}  // namespace
}  // namespace sluice::internal
