// A change of limit (sluice/convert.h): hand-worked examples of each rule, and seeded random
// traces (the seed is printed; replay with SLUICE_SEED=...):
//   - gcra and token_bucket, which decide alike, still decide alike after the same change;
//   - after a change of shape, what the new limit admits in its first window is at most what
//     it admits from nothing less what the old limit had used, and at most what the old
//     limit's capacity and rate allow over that window (brute force, unit by unit).

#include "sluice/convert.h"

#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "sluice/settle.h"
#include "tests/testing/random.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::At;
using testing::kEpoch;
using testing::kHourStart;
using testing::MustLimit;
using testing::Random;

constexpr int64_t kMinute = 60'000'000;
constexpr int64_t kHour = testing::kHourUs;

// Charges `units` one at a time at `t` under `limit`; how many were admitted.
int64_t Take(const Limit& limit, AnyState& state, int64_t t, int64_t units) {
  int64_t admitted = 0;
  while (admitted < units && Decide(limit, state, At(t), 1).allowed) {
    ++admitted;
  }
  return admitted;
}

Decision Query(const Limit& limit, AnyState state, int64_t t) {
  return Decide(limit, state, At(t), 0);
}

TEST(ConvertTest, ALoweredFixedWindowKeepsItsCountAndDeniesUntilTheWindowEnds) {
  const Limit before = MustLimit({.limit = 1000, .period = 1h});
  const Limit after = MustLimit({.limit = 100, .period = 1h});
  AnyState state = FixedWindowState{};
  ASSERT_EQ(Take(before, state, kHourStart, 500), 500);
  AnyState moved = ConvertState(before, state, after, At(kHourStart + kMinute), kMaxDebt);
  EXPECT_EQ(Query(after, moved, kHourStart + kMinute),
            (Decision{.allowed = false,
                      .remaining = 0,
                      .reset_after = Micros{kHour - kMinute},
                      .retry_after = Micros{kHour - kMinute}}));
  EXPECT_EQ(Take(after, moved, kHourStart + kHour - 1, 1), 0);
  EXPECT_EQ(Take(after, moved, kHourStart + kHour, 1000), 100)
      << "the next window is the new limit's";
}

TEST(ConvertTest, ARaisedFixedWindowGivesOnlyTheDifference) {
  const Limit before = MustLimit({.limit = 10, .period = 1h});
  const Limit after = MustLimit({.limit = 100, .period = 1h});
  AnyState state = FixedWindowState{};
  ASSERT_EQ(Take(before, state, kHourStart, 10), 10);
  AnyState moved = ConvertState(before, state, after, At(kHourStart + kMinute), kMaxDebt);
  EXPECT_EQ(Take(after, moved, kHourStart + kMinute, 1000), 90);
}

TEST(ConvertTest, ALoweredLimitIsCappedAtWhatTheNewOneHoldsOldestUnitsFirst) {
  const Limit before = MustLimit({.algorithm = Algorithm::kSlidingLog, .limit = 10, .period = 1s});
  const Limit after = MustLimit({.algorithm = Algorithm::kSlidingLog, .limit = 4, .period = 1s});
  AnyState state = SlidingLogState{};
  for (int64_t i = 0; i < 10; ++i) {
    ASSERT_EQ(Take(before, state, kHourStart + i * 1000, 1), 1);
  }
  const AnyState moved = ConvertState(before, state, after, At(kHourStart + 9000), /*max_debt=*/0);
  const CountQueue& log = std::get<SlidingLogState>(moved).log;
  ASSERT_EQ(log.total(), 4);
  EXPECT_EQ(log.entries().front().index, kHourStart + 6000) << "the four newest entries are kept";
  // Full until the first kept entry leaves, as the uncapped log of 10 would be.
  AnyState probe = moved;
  EXPECT_EQ(Take(after, probe, kHourStart + 1'006'000 - 1, 1), 0);
  EXPECT_EQ(Take(after, probe, kHourStart + 1'006'000, 2), 1);
}

TEST(ConvertTest, TheBucketsCarryTheUnitsUsedIntoTheNewRatesUnits) {
  const Limit before = MustLimit({.algorithm = Algorithm::kTokenBucket, .limit = 10, .period = 1s});
  const Limit after =
      MustLimit({.algorithm = Algorithm::kTokenBucket, .limit = 30, .period = 1s, .burst = 20});
  AnyState state = TokenBucketState{};
  ASSERT_EQ(Take(before, state, kHourStart, 7), 7);
  const AnyState moved = ConvertState(before, state, after, At(kHourStart), kMaxDebt);
  EXPECT_EQ(Query(after, moved, kHourStart).remaining, 13) << "7 used of the new 20";
  // gcra: the same units, ahead of the time now.
  const Limit gcra_before = MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s});
  const Limit gcra_after =
      MustLimit({.algorithm = Algorithm::kGcra, .limit = 30, .period = 1s, .burst = 20});
  AnyState tat = GcraState{};
  ASSERT_EQ(Take(gcra_before, tat, kHourStart, 7), 7);
  EXPECT_EQ(Query(gcra_after, ConvertState(gcra_before, tat, gcra_after, At(kHourStart), kMaxDebt),
                  kHourStart)
                .remaining,
            13);
}

TEST(ConvertTest, AbsurdButValidBucketsConvertWithoutOverflowing) {
  // Used units x P1' x P2' is about 10^39 here, past 128 bits: the conversion must not form it.
  const Micros century = 100 * 365 * 24h;
  const Limit before = MustLimit(
      {.algorithm = Algorithm::kTokenBucket, .limit = 7, .period = century, .burst = 100'000'000});
  const Limit after = MustLimit(
      {.algorithm = Algorithm::kTokenBucket, .limit = 11, .period = century, .burst = 100'000'000});
  AnyState state = TokenBucketState{};
  ASSERT_TRUE(Decide(before, state, At(kHourStart), 99'999'999).allowed);
  const AnyState moved = ConvertState(before, state, after, At(kHourStart), kMaxDebt);
  EXPECT_EQ(Query(after, moved, kHourStart).remaining, 1);
}

TEST(ConvertTest, AStateThatHasResetConvertsToANewKey) {
  const Limit before = MustLimit({.limit = 5, .period = 1s});
  for (const Algorithm a : testing::AllAlgorithms()) {
    const Limit after = MustLimit({.algorithm = a, .limit = 3, .period = 2s, .buckets = 2});
    AnyState state = FixedWindowState{};
    ASSERT_EQ(Take(before, state, kHourStart, 5), 5);
    EXPECT_EQ(ConvertState(before, state, after, At(kHourStart + 1'000'000), kMaxDebt),
              InitialState(a))
        << AlgorithmName(a);
  }
}

TEST(ConvertTest, AChangeOfPeriodHoldsTheFirstWindowToTheStricterLimit) {
  const Limit minute = MustLimit({.limit = 100, .period = 1min});
  const Limit hour = MustLimit({.limit = 1000, .period = 1h});
  // 100 used this minute, 30 minutes left in the hour: the old limit would allow 2900 more
  // (29 fresh minutes), the new one 900 after the 100: 900 it is.
  AnyState state = FixedWindowState{};
  ASSERT_EQ(Take(minute, state, kHourStart + 30 * kMinute, 100), 100);
  AnyState moved = ConvertState(minute, state, hour, At(kHourStart + 30 * kMinute + 1), kMaxDebt);
  EXPECT_EQ(Take(hour, moved, kHourStart + 30 * kMinute + 1, 5000), 900);
  // 100 used with 4.5 minutes left: the old limit allows 400 more (four minutes that start
  // before the hour ends), the new one 900: 400 it is.
  state = FixedWindowState{};
  ASSERT_EQ(Take(minute, state, kHourStart + 55 * kMinute, 100), 100);
  moved = ConvertState(minute, state, hour, At(kHourStart + 55 * kMinute + 30'000'000), kMaxDebt);
  EXPECT_EQ(Take(hour, moved, kHourStart + 55 * kMinute + 30'000'000, 5000), 400);
  EXPECT_EQ(Take(hour, moved, kHourStart + kHour, 5000), 1000) << "then the new limit alone";
}

// A random limit with a small period, so that a window can be walked microsecond by
// microsecond.
Limit SmallLimit(Random& random) {
  const auto algorithm = static_cast<Algorithm>(random.Between(0, 6));
  const int64_t period = random.Between(1, 12) * 4;  // Divisible by 2 and 4 buckets.
  return MustLimit({.algorithm = algorithm,
                    .limit = random.Between(1, 8),
                    .period = Micros{period},
                    .burst = random.Between(1, 8),
                    .buckets = random.OneIn(2) ? 2 : 4});
}

// Random requests under `limit` over [from, to); returns the state.
AnyState Trace(const Limit& limit, Random& random, int64_t from, int64_t to) {
  AnyState state = InitialState(limit.algorithm());
  for (int64_t t = from; t < to; t += random.Between(0, 6)) {
    Decide(limit, state, At(t), random.Between(0, 3));
  }
  return state;
}

// The most a limit admits in [from, to) from `state`: unit requests, as many as it takes at
// each microsecond (admitting as early as possible admits the most).
int64_t Greedy(const Limit& limit, AnyState state, int64_t from, int64_t to) {
  int64_t admitted = 0;
  for (int64_t t = from; t < to; ++t) {
    admitted += Take(limit, state, t, 1'000);
  }
  return admitted;
}

TEST(ConvertPropertyTest, GcraAndTokenBucketStillDecideAlikeAfterTheSameChange) {
  Random random(testing::Seed(34));
  for (int i = 0; i < 300; ++i) {
    const Limit a = SmallLimit(random);
    const Limit b = SmallLimit(random);
    auto as = [](const Limit& l, Algorithm alg) {
      return MustLimit({.algorithm = alg,
                        .limit = l.limit(),
                        .period = l.period(),
                        .burst = l.burst(),
                        .buckets = l.buckets()});
    };
    const Limit ga = as(a, Algorithm::kGcra);
    const Limit ta = as(a, Algorithm::kTokenBucket);
    const Limit gb = as(b, Algorithm::kGcra);
    const Limit tb = as(b, Algorithm::kTokenBucket);
    const int64_t change = kEpoch + random.Between(0, 200);
    const uint64_t trace_seed = random.Between(0, 1'000'000);
    Random r1(trace_seed);
    Random r2(trace_seed);
    const AnyState g = ConvertState(ga, Trace(ga, r1, kEpoch, change), gb, At(change), kMaxDebt);
    const AnyState tk = ConvertState(ta, Trace(ta, r2, kEpoch, change), tb, At(change), kMaxDebt);
    for (int64_t t = change; t < change + 3 * b.period().count(); t += 3) {
      ASSERT_EQ(Query(gb, g, t).remaining, Query(tb, tk, t).remaining)
          << a.ToString() << " -> " << b.ToString() << " at " << t - kEpoch;
    }
  }
}

TEST(ConvertPropertyTest, TheFirstWindowAfterAChangeOfShapeAdmitsNoMoreThanTheStricterLimit) {
  Random random(testing::Seed(3434));
  int changes = 0;
  while (changes < 2000) {
    const Limit a = SmallLimit(random);
    const Limit b = SmallLimit(random);
    if (SameShape(a, b)) {
      continue;
    }
    ++changes;
    const int64_t change = kEpoch + random.Between(0, 300);
    const AnyState before = Trace(a, random, kEpoch, change);
    const int64_t t = change + random.Between(0, 3);
    const AnyState after = ConvertState(a, before, b, At(t), kMaxDebt);
    // The window the rule holds: t's window for fixed_window and sliding_window, P from the
    // first time for the others (every state a trace leaves has last <= t).
    const int64_t p = b.period().count();
    const bool aligned =
        b.algorithm() == Algorithm::kFixedWindow || b.algorithm() == Algorithm::kSlidingWindow;
    const int64_t width = b.algorithm() == Algorithm::kSlidingBuckets ? p / b.buckets() : 1;
    const int64_t end = aligned ? (t / p + 1) * p
                        : b.algorithm() == Algorithm::kSlidingBuckets
                            ? (t / width + b.buckets()) * width
                            : t + p;
    const bool bucket = b.algorithm() == Algorithm::kTokenBucket ||
                        b.algorithm() == Algorithm::kGcra ||
                        b.algorithm() == Algorithm::kLeakyBucket;
    const int64_t fresh = bucket ? b.burst() + b.limit() : b.limit();
    // What the old limit counts as used: its capacity less what it would still admit now.
    const bool a_bucket = a.algorithm() == Algorithm::kTokenBucket ||
                          a.algorithm() == Algorithm::kGcra ||
                          a.algorithm() == Algorithm::kLeakyBucket;
    const int64_t a_capacity = a_bucket ? a.burst() : a.limit();
    const int64_t used = a_capacity - Query(a, before, t).remaining;
    const int64_t a_rate =
        a_capacity + a.limit() * ((end - t + a.period().count() - 1) / a.period().count() + 1);
    const int64_t admitted = Greedy(b, after, t, end);
    ASSERT_LE(admitted, std::max<int64_t>(0, fresh - used))
        << a.ToString() << " -> " << b.ToString() << " at " << t - kEpoch;
    if (Query(a, before, t).reset_after == Micros{0}) {
      continue;  // A state that has reset is a new key's: the old limit holds nothing back.
    }
    ASSERT_LE(admitted, a_rate) << a.ToString() << " -> " << b.ToString() << " at " << t - kEpoch;
  }
}

}  // namespace
}  // namespace sluice
