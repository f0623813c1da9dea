// Settles (sluice/settle.h): ChargePast, Settle and GiveBackHorizon by hand-worked examples for
// every algorithm, and on seeded random traces (the seed is printed; replay with
// SLUICE_SEED=...):
//   - a key in debt answers every figure exactly (remaining 0, retry_after the first wait that
//     admits, reset_after when it is as new), as the spec's figures promise;
//   - ChargePast never takes the key's usage past N + max_debt (B + max_debt), and charges all
//     it was asked unless that bound stops it;
//   - gcra and token_bucket still agree on every figure with debts in the trace;
//   - a give-back at or after GiveBackHorizon changes no decision, and one 1 us before it
//     still changes the state of a charge left alone.

#include "sluice/settle.h"

#include <limits>

#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "sluice/give_back.h"
#include "tests/testing/figures.h"
#include "tests/testing/random.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::At;
using testing::ExpectFiguresHold;
using testing::kEpoch;
using testing::MustLimit;
using testing::Random;

constexpr int kCases = 200;
constexpr int kRows = 40;

// Charges `cost` on `state` at `t`, returning what a give-back needs (units 0 when denied).
Charge ChargeAt(const Limit& limit, AnyState& state, int64_t t, int64_t cost) {
  const Decision d = Decide(limit, state, At(t), cost);
  return d.allowed && cost > 0 ? ChargeOf(limit, state, At(t), cost) : Charge{};
}

Decision Query(const Limit& limit, AnyState state, int64_t t) {
  return Decide(limit, state, At(t), 0);
}

TEST(ChargePastTest, FixedWindowChargesUpToTheLimitPlusTheDebt) {
  const Limit limit = MustLimit({.limit = 5, .period = 1s});
  AnyState state = FixedWindowState{};
  ASSERT_EQ(ChargeAt(limit, state, kEpoch, 3).units, 3);
  EXPECT_EQ(ChargePast(limit, state, At(kEpoch + 10), 10, 4), 6);  // 3 + 6 = N + D.
  EXPECT_EQ(std::get<FixedWindowState>(state), (FixedWindowState{.last = kEpoch + 10, .count = 9}));
  const FixedWindowState full = std::get<FixedWindowState>(state);
  EXPECT_EQ(ChargePast(limit, state, At(kEpoch + 20), 1, 4), 0);
  EXPECT_EQ(std::get<FixedWindowState>(state), full) << "charging nothing changed the state";
  EXPECT_EQ(Query(limit, state, kEpoch + 20), (Decision{.allowed = false,
                                                        .remaining = 0,
                                                        .reset_after = Micros{1'000'000 - 20},
                                                        .retry_after = Micros{1'000'000 - 20}}));
  EXPECT_EQ(ChargePast(limit, state, At(kEpoch + 1'000'000), 7, 0), 5);  // The next window.
}

TEST(ChargePastTest, FixedWindowTakesTimeSteppingBackAsTheLastTime) {
  const Limit limit = MustLimit({.limit = 5, .period = 1s});
  AnyState state = FixedWindowState{};
  ASSERT_EQ(ChargeAt(limit, state, kEpoch + 1'000'000, 5).units, 5);
  EXPECT_EQ(ChargePast(limit, state, At(kEpoch), 3, 1), 1);  // Counted in the later window.
  EXPECT_EQ(std::get<FixedWindowState>(state).last, kEpoch + 1'000'000);
}

TEST(ChargePastTest, SlidingWindowWeighsThePreviousWindow) {
  const Limit limit =
      MustLimit({.algorithm = Algorithm::kSlidingWindow, .limit = 10, .period = 1s});
  AnyState state = SlidingWindowState{};
  ASSERT_EQ(ChargeAt(limit, state, kEpoch - 1, 8).units, 8);
  // r = P/2: prev weighs 4, so 15 - 4 = 11 fit under N + D = 15.
  EXPECT_EQ(ChargePast(limit, state, At(kEpoch + 500'000), 20, 5), 11);
  EXPECT_EQ(std::get<SlidingWindowState>(state),
            (SlidingWindowState{.last = kEpoch + 500'000, .cur = 11, .prev = 8}));
  const Decision d = Query(limit, state, kEpoch + 500'000);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 0);
  // In the next window 11 * (P - r') <= 10 * P first holds at r' = 90,910.
  EXPECT_EQ(d.retry_after, Micros{500'000 + 90'910});
  EXPECT_EQ(d.reset_after, Micros{1'500'000});
  EXPECT_FALSE(Query(limit, state, kEpoch + 1'090'909).allowed);
  EXPECT_TRUE(Query(limit, state, kEpoch + 1'090'910).allowed);
}

TEST(ChargePastTest, SlidingLogAppendsWhatFitsAndWaitsForTheOldest) {
  const Limit limit =
      MustLimit({.algorithm = Algorithm::kSlidingLog, .limit = 3, .period = 1000us});
  AnyState state = SlidingLogState{};
  ASSERT_EQ(ChargeAt(limit, state, kEpoch, 2).units, 2);
  EXPECT_EQ(ChargePast(limit, state, At(kEpoch + 10), 5, 2), 3);
  EXPECT_EQ(std::get<SlidingLogState>(state).log.total(), 5);
  const Decision d = Query(limit, state, kEpoch + 10);
  EXPECT_EQ(d.remaining, 0);
  EXPECT_EQ(d.retry_after, Micros{990});  // The entry at +0 leaves: 3 <= N.
  EXPECT_EQ(d.reset_after, Micros{1000});
  // At +1000 the first entry has left: 3 of N + D = 5 used.
  EXPECT_EQ(ChargePast(limit, state, At(kEpoch + 1000), 5, 2), 2);
}

TEST(ChargePastTest, SlidingBucketsAddsToTheBucketOfNow) {
  const Limit limit =
      MustLimit({.algorithm = Algorithm::kSlidingBuckets, .limit = 4, .period = 1s, .buckets = 4});
  AnyState state = SlidingBucketsState{};
  ASSERT_EQ(ChargeAt(limit, state, kEpoch, 4).units, 4);
  EXPECT_EQ(ChargePast(limit, state, At(kEpoch + 300'000), 3, 2), 2);
  const Decision d = Decide(limit, state, At(kEpoch + 300'000), 1);
  EXPECT_EQ(d.remaining, 0);
  EXPECT_EQ(d.retry_after, Micros{700'000});  // Bucket 0 leaves at 1 s: 2 <= 4 - 1.
  EXPECT_EQ(d.reset_after, Micros{1'250'000 - 300'000});
}

TEST(ChargePastTest, TokenBucketGoesIntoDebtBelowEmpty) {
  const Limit limit =
      MustLimit({.algorithm = Algorithm::kTokenBucket, .limit = 10, .period = 1s, .burst = 10});
  AnyState state = TokenBucketState{};
  ASSERT_EQ(ChargeAt(limit, state, kEpoch, 10).units, 10);
  EXPECT_EQ(ChargePast(limit, state, At(kEpoch), 20, 5), 5);
  EXPECT_EQ(std::get<TokenBucketState>(state).level, -500'000);  // -5 tokens x P' = 100,000.
  const Decision d = Decide(limit, state, At(kEpoch), 1);
  EXPECT_EQ(d, (Decision{.allowed = false,
                         .remaining = 0,
                         .reset_after = Micros{1'500'000},
                         .retry_after = Micros{600'000}}));
  EXPECT_FALSE(Decide(limit, state, At(kEpoch + 599'999), 1).allowed);
  EXPECT_TRUE(Decide(limit, state, At(kEpoch + 600'000), 1).allowed);
}

TEST(ChargePastTest, NewTokenBucketStartsFull) {
  const Limit limit =
      MustLimit({.algorithm = Algorithm::kTokenBucket, .limit = 10, .period = 1s, .burst = 4});
  AnyState state = TokenBucketState{};
  EXPECT_EQ(ChargePast(limit, state, At(kEpoch), 100, 3), 7);
  EXPECT_EQ(std::get<TokenBucketState>(state),
            (TokenBucketState{.level = -300'000, .last = kEpoch}));
}

class TatChargePastTest : public ::testing::TestWithParam<Algorithm> {};

TEST_P(TatChargePastTest, RunsTheTatPastTheBurst) {
  const Limit limit = MustLimit({.algorithm = GetParam(), .limit = 10, .period = 1s, .burst = 10});
  AnyState state = InitialState(GetParam());
  ASSERT_EQ(ChargeAt(limit, state, kEpoch, 10).units, 10);
  EXPECT_EQ(ChargePast(limit, state, At(kEpoch), 20, 5), 5);
  const Int128 tat = GetParam() == Algorithm::kGcra ? std::get<GcraState>(state).tat
                                                    : std::get<LeakyBucketState>(state).tat;
  EXPECT_TRUE(tat == Int128{kEpoch} + 1'500'000);  // t*N' + (B + D)*P', N' = 1.
  const Decision d = Decide(limit, state, At(kEpoch), 1);
  EXPECT_EQ(d.remaining, 0);
  EXPECT_EQ(d.retry_after, Micros{600'000});
  EXPECT_EQ(d.reset_after, Micros{1'500'000});
  EXPECT_EQ(ChargePast(limit, state, At(kEpoch + 100'000), 3, 5), 1);  // One unit drained.
}

INSTANTIATE_TEST_SUITE_P(Tat, TatChargePastTest,
                         ::testing::Values(Algorithm::kGcra, Algorithm::kLeakyBucket),
                         testing::AlgorithmTestName);

TEST(SettleTest, FixedWindowGivesBackOrChargesTheDifference) {
  const Limit limit = MustLimit({.limit = 10, .period = 1s});
  AnyState state = FixedWindowState{};
  const Charge charge = ChargeAt(limit, state, kEpoch, 5);
  AnyState refunded = state;
  const Settled down =
      Settle(limit, refunded, At(kEpoch + 1), {.charge = charge, .units = 2, .max_debt = 1});
  EXPECT_EQ(down.given_back, 3);
  EXPECT_EQ(down.charged, 0);
  EXPECT_EQ(down.after.remaining, 8);

  const Settled up =
      Settle(limit, state, At(kEpoch + 1), {.charge = charge, .units = 12, .max_debt = 1});
  EXPECT_EQ(up.given_back, 0);
  EXPECT_EQ(up.charged, 6);  // 7 asked; 6 bring the count to N + D = 11.
  EXPECT_FALSE(up.after.allowed);
  EXPECT_EQ(up.after.remaining, 0);
}

TEST(SettleTest, TheSameCostChangesNothing) {
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s});
  AnyState state = GcraState{};
  const Charge charge = ChargeAt(limit, state, kEpoch, 4);
  const AnyState before = state;
  const Settled settled =
      Settle(limit, state, At(kEpoch + 5), {.charge = charge, .units = 4, .max_debt = 10});
  EXPECT_EQ(state, before);
  EXPECT_EQ(settled, (Settled{.after = Query(limit, before, kEpoch + 5)}));
}

// 6 then 4 empty the bucket at 0; the 4 are ahead of the clock until +1 s, the last of them
// from +0.6 s. Giving back `returned` of them at `t` returns what is still ahead, in whole units.
struct PartialCase {
  int64_t settle_to;
  int64_t t;
  int64_t given_back;
};

class TokenBucketSettleTest : public ::testing::TestWithParam<PartialCase> {};

TEST_P(TokenBucketSettleTest, ReturnsTheLastUnitsStillAheadOfTheClock) {
  const Limit limit =
      MustLimit({.algorithm = Algorithm::kTokenBucket, .limit = 10, .period = 1s, .burst = 10});
  AnyState state = TokenBucketState{};
  ASSERT_TRUE(Decide(limit, state, At(kEpoch), 6).allowed);
  const Charge charge = ChargeAt(limit, state, kEpoch, 4);
  const PartialCase c = GetParam();
  const Settled settled =
      Settle(limit, state, At(kEpoch + c.t), {.charge = charge, .units = c.settle_to});
  EXPECT_EQ(settled.given_back, c.given_back);
  EXPECT_EQ(settled.after, Query(limit, state, kEpoch + c.t));
}

INSTANTIATE_TEST_SUITE_P(Cases, TokenBucketSettleTest,
                         ::testing::Values(PartialCase{0, 300'000, 4}, PartialCase{0, 700'000, 3},
                                           PartialCase{1, 700'000, 3}, PartialCase{2, 700'000, 2},
                                           PartialCase{0, 750'000, 2}, PartialCase{3, 950'000, 0},
                                           PartialCase{0, 1'000'000, 0}));

TEST(SettleTest, GcraGivesBackTheLastUnitsOfTheCharge) {
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s});
  AnyState state = GcraState{};
  const Charge charge = ChargeAt(limit, state, kEpoch, 4);  // TAT = t + 0.4 s.
  // At +0.25 s, 1.5 units are still ahead: of the last 3, one whole unit and a half.
  const Settled settled =
      Settle(limit, state, At(kEpoch + 250'000), {.charge = charge, .units = 1});
  EXPECT_EQ(settled.given_back, 1);
  EXPECT_TRUE(std::get<GcraState>(state).tat == Int128{kEpoch} + 250'000);
}

TEST(SettleTest, NothingChargedIsChargedPast) {
  const Limit limit = MustLimit({.algorithm = Algorithm::kSlidingLog, .limit = 2, .period = 1s});
  AnyState state = SlidingLogState{};
  const Settled settled = Settle(limit, state, At(kEpoch), {.units = 3, .max_debt = 0});
  EXPECT_EQ(settled.charged, 2);
  EXPECT_EQ(settled.given_back, 0);
}

TEST(GiveBackHorizonTest, EachAlgorithmsEnd) {
  const Charge charge{.at = At(kEpoch + 1'300'000), .units = 2, .ahead = 700'000};
  auto horizon = [&](LimitSpec spec) {
    return GiveBackHorizon(MustLimit(spec), charge).time_since_epoch().count() - kEpoch;
  };
  EXPECT_EQ(horizon({.limit = 5, .period = 1s}), 2'000'000);
  EXPECT_EQ(horizon({.algorithm = Algorithm::kSlidingWindow, .limit = 5, .period = 1s}), 3'000'000);
  EXPECT_EQ(horizon({.algorithm = Algorithm::kSlidingLog, .limit = 5, .period = 1s}), 2'300'000);
  EXPECT_EQ(
      horizon({.algorithm = Algorithm::kSlidingBuckets, .limit = 5, .period = 1s, .buckets = 4}),
      2'250'000);  // Bucket 5 (of 250 ms) leaves at (5 + 4) * 250 ms.
  // 7 per 2 s: N' = 7, P' = 2,000,000; ceil(700,000 / 7) = 100,000 us.
  EXPECT_EQ(horizon({.algorithm = Algorithm::kGcra, .limit = 7, .period = 2s}), 1'400'000);
  EXPECT_EQ(horizon({.algorithm = Algorithm::kTokenBucket, .limit = 7, .period = 2s}), 1'400'000);
  const Charge odd{.at = At(kEpoch), .units = 1, .ahead = 701};
  EXPECT_EQ(GiveBackHorizon(
                MustLimit({.algorithm = Algorithm::kLeakyBucket, .limit = 7, .period = 2s}), odd),
            At(kEpoch + 101));  // Rounded up.
}

TEST(GiveBackHorizonTest, SaturatesAtTheLastTime) {
  const Charge charge{
      .at = At(std::numeric_limits<int64_t>::max() - 5), .units = 1, .ahead = Int128{1} << 100};
  const Timestamp end = At(std::numeric_limits<int64_t>::max());
  for (Algorithm a : testing::AllAlgorithms()) {
    EXPECT_EQ(GiveBackHorizon(MustLimit({.algorithm = a, .limit = 5, .period = 1s, .buckets = 10}),
                              charge),
              end)
        << AlgorithmName(a);
  }
}

// The key's usage as the debt bound counts it, minus the ceiling N + D (B + D): <= 0 after any
// ChargePast. Times x P for the sliding window and the buckets.
Int128 OverCeiling(const Limit& limit, const AnyState& state, int64_t t, int64_t debt) {
  const Int128 n = limit.limit() + Int128{debt};
  const Int128 b = limit.burst() + Int128{debt};
  const Int128 p = limit.period().count();
  return std::visit(
      [&](const auto& s) -> Int128 {
        using State = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<State, FixedWindowState>) {
          return s.count - n;
        } else if constexpr (std::is_same_v<State, SlidingWindowState>) {
          const Int128 r = s.last - s.last / p * p;
          return s.prev * (p - r) + Int128{s.cur} * p - n * p;
        } else if constexpr (std::is_same_v<State, SlidingLogState>) {
          return s.log.total() - n;  // Right after a charge, every entry counts.
        } else if constexpr (std::is_same_v<State, SlidingBucketsState>) {
          return s.buckets.total() - n;
        } else if constexpr (std::is_same_v<State, TokenBucketState>) {
          return -s.level - Int128{debt} * limit.rate_period_us();
        } else {
          return s.tat - Int128{t} * limit.rate_units() - b * limit.rate_period_us();
        }
      },
      state);
}

// A trace of admissions and charges past the limit; after each step the figures of a random
// request hold, and each ChargePast keeps the bound and stops only at it.
void CheckDebtTrace(Algorithm algorithm, uint64_t seed) {
  Random random(seed);
  for (int c = 0; c < kCases / 2; ++c) {
    const Limit limit = random.ValidLimit(algorithm);
    AnyState state = InitialState(algorithm);
    int64_t t = kEpoch + random.Between(0, 1'000'000);
    for (int row = 0; row < kRows; ++row) {
      t += random.Gap(limit);
      SCOPED_TRACE(limit.ToString() + " case " + std::to_string(c) + " row " + std::to_string(row) +
                   " t=" + std::to_string(t));
      if (random.OneIn(3)) {
        const int64_t debt = random.OneIn(4) ? 0 : random.Between(0, 2 * limit.limit());
        const int64_t x = random.Between(0, 3 * limit.burst());
        const AnyState before = state;
        const int64_t charged = ChargePast(limit, state, At(t), x, debt);
        ASSERT_GE(charged, 0);
        ASSERT_LE(charged, x);
        if (charged == 0) {
          ASSERT_TRUE(state == before) << "charging nothing changed the state";
        } else {
          ASSERT_TRUE(OverCeiling(limit, state, t, debt) <= 0) << "past N + D after " << charged;
        }
        if (charged < x) {
          AnyState again = state;
          ASSERT_EQ(ChargePast(limit, again, At(t), 1, debt), 0) << "stopped short of N + D";
        }
      }
      const int64_t cost = random.Cost(limit);
      const AnyState before = state;
      const WideDecision d = DecideWide(limit, state, At(t), cost);
      ExpectFiguresHold(limit, before, state, t, cost, d);
      if (::testing::Test::HasFailure()) {
        return;
      }
    }
  }
}

class DebtTest : public ::testing::TestWithParam<Algorithm> {};

TEST_P(DebtTest, EveryFigureOfAKeyInDebtIsExact) {
  CheckDebtTrace(GetParam(), testing::Seed(40 + static_cast<uint64_t>(GetParam())));
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, DebtTest, ::testing::ValuesIn(testing::AllAlgorithms()),
                         testing::AlgorithmTestName);

TEST(DebtTest, GcraAndTokenBucketAgreeWithSettlesInTheTrace) {
  Random random(testing::Seed(50));
  for (int c = 0; c < kCases; ++c) {
    const Limit gcra = random.ValidLimit(Algorithm::kGcra);
    const Limit token_bucket = MustLimit({.algorithm = Algorithm::kTokenBucket,
                                          .limit = gcra.limit(),
                                          .period = gcra.period(),
                                          .burst = gcra.burst()});
    AnyState g = GcraState{};
    AnyState tb = TokenBucketState{};
    int64_t t = kEpoch + random.Between(0, 1'000'000);
    for (int row = 0; row < kRows; ++row) {
      t += random.Gap(gcra);
      if (random.OneIn(3)) {
        const int64_t debt = random.Between(0, gcra.limit());
        const int64_t x = random.Between(0, 2 * gcra.burst());
        ASSERT_EQ(ChargePast(gcra, g, At(t), x, debt), ChargePast(token_bucket, tb, At(t), x, debt))
            << gcra.ToString() << " case " << c << " row " << row;
      }
      const int64_t cost = random.Cost(gcra);
      ASSERT_TRUE(DecideWide(gcra, g, At(t), cost) == DecideWide(token_bucket, tb, At(t), cost))
          << gcra.ToString() << " case " << c << " row " << row << " t=" << t;
    }
  }
}

// A charge left alone: a give-back 1 us before its horizon still changes the state; one at or
// after it changes no decision, whatever else was charged.
void CheckHorizon(Algorithm algorithm, uint64_t seed) {
  Random random(seed);
  for (int c = 0; c < kCases; ++c) {
    const Limit limit = random.ValidLimit(algorithm);
    AnyState state = InitialState(algorithm);
    int64_t t = kEpoch + random.Between(0, 1'000'000);
    for (int row = random.Between(0, 5); row > 0; --row) {
      t += random.Gap(limit);
      Decide(limit, state, At(t), random.Cost(limit));
    }
    t += random.Gap(limit);
    const Charge charge = ChargeAt(limit, state, t, random.Between(1, limit.burst()));
    if (charge.units == 0) {
      continue;
    }
    const int64_t horizon = GiveBackHorizon(limit, charge).time_since_epoch().count();
    SCOPED_TRACE(limit.ToString() + " case " + std::to_string(c) + " t=" + std::to_string(t) +
                 " horizon=" + std::to_string(horizon));
    ASSERT_GT(horizon, t);
    if (horizon == std::numeric_limits<int64_t>::max()) {
      continue;
    }
    AnyState early = state;
    GiveBack(limit, early, At(horizon - 1), charge);
    ASSERT_FALSE(early == state) << "nothing given back 1 us before the horizon";

    AnyState others = state;
    int64_t u = horizon + (random.OneIn(2) ? 0 : random.Between(0, 3 * limit.period().count()));
    if (random.OneIn(2)) {
      Decide(limit, others, At(u), random.Cost(limit));
      u += random.OneIn(2) ? 0 : random.Gap(limit);
    }
    AnyState given = others;
    GiveBack(limit, given, At(u), charge);
    for (int row = 0; row < 4; ++row) {
      const int64_t cost = random.Cost(limit);
      AnyState a = given;
      AnyState b = others;
      ASSERT_EQ(Decide(limit, a, At(u), cost), Decide(limit, b, At(u), cost))
          << "a give-back at " << u << " changed a decision";
      u += random.Gap(limit);
    }
  }
}

class HorizonTest : public ::testing::TestWithParam<Algorithm> {};

TEST_P(HorizonTest, AGiveBackAfterTheHorizonChangesNoDecision) {
  CheckHorizon(GetParam(), testing::Seed(60 + static_cast<uint64_t>(GetParam())));
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, HorizonTest, ::testing::ValuesIn(testing::AllAlgorithms()),
                         testing::AlgorithmTestName);

// Settle's report is what the state shows: given_back and charged within what was asked, and
// the sum of both is the change in a windowed key's count.
TEST(SettleTest, RandomSettlesReportWhatTheyDid) {
  Random random(testing::Seed(70));
  for (Algorithm algorithm : testing::AllAlgorithms()) {
    for (int c = 0; c < kCases / 2; ++c) {
      const Limit limit = random.ValidLimit(algorithm);
      AnyState state = InitialState(algorithm);
      int64_t t = kEpoch + random.Between(0, 1'000'000);
      for (int row = random.Between(0, 5); row > 0; --row) {
        t += random.Gap(limit);
        Decide(limit, state, At(t), random.Cost(limit));
      }
      const Charge charge = ChargeAt(limit, state, t, random.Between(1, limit.burst()));
      t += random.OneIn(2) ? 0 : random.Gap(limit);
      const Settlement settlement{.charge = charge,
                                  .units = random.Between(0, 2 * limit.burst()),
                                  .max_debt = random.Between(0, limit.limit())};
      const Settled s = Settle(limit, state, At(t), settlement);
      SCOPED_TRACE(limit.ToString() + " case " + std::to_string(c));
      ASSERT_GE(s.given_back, 0);
      ASSERT_LE(s.given_back, std::max<int64_t>(0, charge.units - settlement.units));
      ASSERT_GE(s.charged, 0);
      ASSERT_LE(s.charged, std::max<int64_t>(0, settlement.units - charge.units));
      ASSERT_EQ(s.after, Query(limit, state, t));
      if (t < GiveBackHorizon(limit, charge).time_since_epoch().count() && !UsesBurst(algorithm)) {
        ASSERT_EQ(s.given_back, std::max<int64_t>(0, charge.units - settlement.units))
            << "a window's give-back is exact within the horizon";
      }
    }
  }
}

}  // namespace
}  // namespace sluice
