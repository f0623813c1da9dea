// Give-backs (sluice/give_back.h): by hand-worked examples, and on seeded random traces (the
// seed is printed; replay with SLUICE_SEED=...) for every algorithm:
//   - a charge given back with nothing charged in between leaves the key deciding exactly as
//     if it had never been made;
//   - with others' charges in between, the key never admits more than it would have had the
//     charge never been made (and for the windows, exactly as much).

#include "sluice/give_back.h"

#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "tests/testing/random.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using testing::Random;

constexpr int kCases = 400;

// Charges `cost` on `state` at `t`, returning what a give-back needs (units 0 when denied).
Charge ChargeAt(const Limit& limit, AnyState& state, int64_t t, int64_t cost) {
  const Decision d = Decide(limit, state, At(t), cost);
  return d.allowed && cost > 0 ? ChargeOf(limit, state, At(t), cost) : Charge{};
}

TEST(GiveBackTest, FixedWindowGivesBackInTheWindowOfTheCharge) {
  const Limit limit = MustLimit({.limit = 5, .period = 1s});
  AnyState state = FixedWindowState{};
  const Charge charge = ChargeAt(limit, state, kEpoch, 3);
  ASSERT_EQ(charge.units, 3);
  GiveBack(limit, state, At(kEpoch + 10), charge);
  EXPECT_EQ(Decide(limit, state, At(kEpoch + 20), 0).remaining, 5);

  const Charge again = ChargeAt(limit, state, kEpoch + 30, 4);
  ASSERT_EQ(Decide(limit, state, At(kEpoch + 1'000'000), 5).remaining, 0);  // The next window.
  GiveBack(limit, state, At(kEpoch + 1'000'001), again);  // Its window has gone: nothing back.
  EXPECT_EQ(Decide(limit, state, At(kEpoch + 1'000'002), 0).remaining, 0);
}

TEST(GiveBackTest, SlidingWindowGivesBackToThePreviousWindowOnceShifted) {
  const Limit limit =
      MustLimit({.algorithm = Algorithm::kSlidingWindow, .limit = 10, .period = 1s});
  AnyState state = SlidingWindowState{};
  const Charge charge = ChargeAt(limit, state, kEpoch + 900'000, 4);
  ASSERT_TRUE(Decide(limit, state, At(kEpoch + 1'000'000), 1).allowed);  // Shifts the window.
  GiveBack(limit, state, At(kEpoch + 1'000'001), charge);
  EXPECT_EQ(std::get<SlidingWindowState>(state).prev, 0);
  EXPECT_EQ(Decide(limit, state, At(kEpoch + 1'000'002), 0).remaining, 9);
}

TEST(GiveBackTest, SlidingLogRemovesTheChargedEntryOnly) {
  const Limit limit = MustLimit({.algorithm = Algorithm::kSlidingLog, .limit = 10, .period = 1s});
  AnyState state = SlidingLogState{};
  ASSERT_TRUE(Decide(limit, state, At(kEpoch), 2).allowed);
  const Charge charge = ChargeAt(limit, state, kEpoch + 5, 3);
  ASSERT_TRUE(Decide(limit, state, At(kEpoch + 7), 1).allowed);
  GiveBack(limit, state, At(kEpoch + 8), charge);
  const Decision d = Decide(limit, state, At(kEpoch + 9), 0);
  EXPECT_EQ(d.remaining, 7);
  EXPECT_EQ(d.reset_after, Micros{1'000'000 - 2});  // The entry at +7 is the newest.
  EXPECT_EQ(std::get<SlidingLogState>(state).log.entries().size(), 2u);
}

// The case that makes a bucket's give-back partial: the bucket refilled to full after the
// charge, so the charge no longer weighs on it, and another server spent that room. Giving
// the 5 units back then would let 13 through in 0.7 s against a burst of 10 at 10/s.
TEST(GiveBackTest, GcraGivesNothingBackOnceTheBucketForgotTheCharge) {
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s});
  AnyState state = GcraState{};
  const Charge charge = ChargeAt(limit, state, kEpoch, 5);
  ASSERT_EQ(charge.units, 5);
  ASSERT_TRUE(Decide(limit, state, At(kEpoch + 600'000), 8).allowed);  // Full again at +0.5 s.
  GiveBack(limit, state, At(kEpoch + 700'000), charge);
  EXPECT_EQ(Decide(limit, state, At(kEpoch + 700'000), 0).remaining, 3);
}

TEST(GiveBackTest, TokenBucketGivesBackWhatIsStillAhead) {
  const Limit limit =
      MustLimit({.algorithm = Algorithm::kTokenBucket, .limit = 10, .period = 1s, .burst = 10});
  AnyState state = TokenBucketState{};
  ASSERT_TRUE(Decide(limit, state, At(kEpoch), 6).allowed);
  const Charge charge = ChargeAt(limit, state, kEpoch, 4);  // Empty; full again at +1 s.
  GiveBack(limit, state, At(kEpoch + 300'000), charge);     // 3 refilled; 4 still ahead.
  EXPECT_EQ(Decide(limit, state, At(kEpoch + 300'000), 0).remaining, 7);
}

// Runs a random trace on two copies of one state, one of which takes a charge; after the
// give-back, probes both with the same requests.
void CheckGiveBacks(Algorithm algorithm, uint64_t seed) {
  Random random(seed);
  for (int c = 0; c < kCases; ++c) {
    const Limit limit = random.ValidLimit(algorithm);
    AnyState without = InitialState(algorithm);
    int64_t t = kEpoch + random.Between(0, 1'000'000);
    for (int row = random.Between(0, 8); row > 0; --row) {
      t += random.Gap(limit);
      Decide(limit, without, At(t), random.Cost(limit));
    }
    AnyState with = without;
    t += random.Gap(limit);
    const Charge charge = ChargeAt(limit, with, t, random.Between(1, limit.burst()));
    // Others' requests while the charge is out: what they take, they take on both.
    bool others = false;
    for (int row = random.OneIn(2) ? 0 : random.Between(1, 6); row > 0; --row) {
      t += random.Gap(limit);
      const int64_t cost = random.Cost(limit);
      if (Decide(limit, with, At(t), cost).allowed && cost > 0) {
        others = true;
        ASSERT_TRUE(Decide(limit, without, At(t), cost).allowed)
            << limit.ToString() << " case " << c << ": the charge made room";
      }
    }
    t += random.OneIn(3) ? 0 : random.Gap(limit);
    GiveBack(limit, with, At(t), charge);
    const bool exact = !others || !UsesBurst(algorithm);
    for (int row = 0; row < 6; ++row) {
      const int64_t cost = random.Cost(limit);
      AnyState w = with;
      AnyState wo = without;
      const Decision a = Decide(limit, w, At(t), cost);
      const Decision b = Decide(limit, wo, At(t), cost);
      if (exact) {
        ASSERT_EQ(a, b) << limit.ToString() << " case " << c << " row " << row << " t=" << t
                        << " cost=" << cost << " others=" << others;
      } else {
        // What is left before this request (a cost-0 query), and whether it fits.
        ASSERT_LE(Decide(limit, with, At(t), 0).remaining,
                  Decide(limit, without, At(t), 0).remaining)
            << limit.ToString() << " case " << c << " row " << row;
        ASSERT_TRUE(!a.allowed || b.allowed) << limit.ToString() << " case " << c;
      }
      if (a.allowed && b.allowed) {
        with = std::move(w);
        without = std::move(wo);
      }
      t += random.Gap(limit);
    }
  }
}

TEST(GiveBackTest, RandomTracesNeverAdmitMoreThanWithoutTheCharge) {
  const uint64_t seed = testing::Seed(18);
  for (int a = 0; a <= static_cast<int>(Algorithm::kLeakyBucket); ++a) {
    SCOPED_TRACE(AlgorithmName(static_cast<Algorithm>(a)));
    CheckGiveBacks(static_cast<Algorithm>(a), seed + static_cast<uint64_t>(a));
  }
}

}  // namespace
}  // namespace sluice
