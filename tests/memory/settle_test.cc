// MemoryStore's settling (sluice/store.h): ChargeAll, SettleAll and ResetAll by hand-worked
// examples (refunds, debts, `once` claims, replays and their bound, resets, the debts a
// compact state cannot hold, snapshots of keys in debt), and on seeded random traces (the seed
// is printed; replay with SLUICE_SEED=...): the store, whatever encoding its tables keep,
// settles exactly as the core's ChargeOf and Settle on a plain state.

#include "sluice/settle.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "sluice/memory_store.h"
#include "tests/testing/random.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using testing::Random;

struct Charged {
  Decision decision;
  Charge charge;
};

Charged ChargeOne(MemoryStore& store, const Limit& limit, std::string_view key, int64_t cost,
                  int64_t t) {
  const LimitedKey request{.limit = &limit, .key = key};
  Decision each;
  Charge charge;
  absl::StatusOr<Decision> d =
      store.ChargeAll({&request, 1}, cost, At(t), {&each, 1}, {&charge, 1});
  EXPECT_TRUE(d.ok()) << d.status();
  return {d.ok() ? *d : Decision{}, charge};
}

absl::StatusOr<Settled> SettleOne(MemoryStore& store, const Limit& limit, std::string_view key,
                                  const Settlement& settlement, int64_t t,
                                  std::string_view once = "", int64_t once_until = 0) {
  const LimitedKey request{.limit = &limit, .key = key};
  Settled settled;
  if (absl::Status s = store.SettleAll({&request, 1}, {&settlement, 1}, once, At(once_until), At(t),
                                       {&settled, 1});
      !s.ok()) {
    return s;
  }
  return settled;
}

Decision Query(MemoryStore& store, const Limit& limit, std::string_view key, int64_t t) {
  absl::StatusOr<Decision> d = store.Decide(limit, key, 0, At(t));
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : Decision{};
}

TEST(MemorySettleTest, ARefundGivesTheUnitsBack) {
  MemoryStore store;
  const Limit limit = MustLimit({.limit = 10, .period = 1s});
  const Charged c = ChargeOne(store, limit, "k", 4, kEpoch);
  ASSERT_TRUE(c.decision.allowed);
  EXPECT_EQ(c.charge, (Charge{.at = At(kEpoch), .units = 4}));
  absl::StatusOr<Settled> s =
      SettleOne(store, limit, "k", {.charge = c.charge, .units = 0}, kEpoch + 1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->given_back, 4);
  EXPECT_EQ(s->after.remaining, 10);
  EXPECT_EQ(Query(store, limit, "k", kEpoch + 2).remaining, 10);
}

TEST(MemorySettleTest, AnExtraChargePutsTheKeyInDebt) {
  MemoryStore store;
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s});
  const Charged c = ChargeOne(store, limit, "k", 10, kEpoch);
  absl::StatusOr<Settled> s =
      SettleOne(store, limit, "k", {.charge = c.charge, .units = 30, .max_debt = 5}, kEpoch);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->charged, 5);
  const Decision d = Query(store, limit, "k", kEpoch);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 0);
  EXPECT_EQ(d.retry_after, Micros{500'000});  // 0.5 s of debt: cost 0 fits then.
}

TEST(MemorySettleTest, ADeniedRequestChargesNothing) {
  MemoryStore store;
  const Limit limit = MustLimit({.limit = 2, .period = 1s});
  const Charged c = ChargeOne(store, limit, "k", 3, kEpoch);
  EXPECT_FALSE(c.decision.allowed);
  EXPECT_EQ(c.charge, Charge{});
  EXPECT_EQ(store.KeyCount(), 0u);
}

TEST(MemorySettleTest, AOnceIdSettlesOnceUntilItExpires) {
  MemoryStore store;
  const Limit limit = MustLimit({.limit = 10, .period = 1s});
  const Charged c = ChargeOne(store, limit, "k", 4, kEpoch);
  const Settlement refund{.charge = c.charge, .units = 0};
  ASSERT_TRUE(SettleOne(store, limit, "k", refund, kEpoch + 1, "r1", kEpoch + 100).ok());
  ChargeOne(store, limit, "k", 4, kEpoch + 2);
  absl::StatusOr<Settled> replay =
      SettleOne(store, limit, "k", refund, kEpoch + 99, "r1", kEpoch + 100);
  EXPECT_EQ(replay.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(replay.status().message(), "receipt was settled already");
  EXPECT_EQ(Query(store, limit, "k", kEpoch + 99).remaining, 6) << "a replay changed the state";
  EXPECT_TRUE(SettleOne(store, limit, "k", refund, kEpoch + 100, "r1", kEpoch + 200).ok())
      << "the claim outlived once_until";
}

TEST(MemorySettleTest, LiveClaimsAreBoundedAndExpiredOnesMakeRoom) {
  MemoryStore store({.max_once_claims = 3});
  const Limit limit = MustLimit({.limit = 10, .period = 1s});
  const Settlement nothing{};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        SettleOne(store, limit, "k", nothing, kEpoch, "id" + std::to_string(i), kEpoch + 10 + i)
            .ok());
  }
  const Settlement extra{.units = 1};
  absl::StatusOr<Settled> full =
      SettleOne(store, limit, "k", extra, kEpoch + 5, "id3", kEpoch + 50);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Query(store, limit, "k", kEpoch + 5).remaining, 10) << "a refused settle charged";
  EXPECT_EQ(store.OnceClaimCount(), 3u);
  // At +11 the first two have expired: dropped as the new claim comes.
  EXPECT_TRUE(SettleOne(store, limit, "k", extra, kEpoch + 11, "id3", kEpoch + 50).ok());
  EXPECT_EQ(store.OnceClaimCount(), 2u);
}

TEST(MemorySettleTest, AFailedSettleLeavesItsOnceUnclaimed) {
  MemoryStore store;
  const Limit limit = MustLimit({.limit = 10, .period = 1s});
  const Limit other = MustLimit({.limit = 5, .period = 1s});
  const LimitedKey twice[] = {{.limit = &limit, .key = "k"}, {.limit = &limit, .key = "k"}};
  const Settlement settlements[2] = {};
  Settled settled[2];
  EXPECT_EQ(store.SettleAll(twice, settlements, "x", At(kEpoch + 100), At(kEpoch), settled).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(SettleOne(store, other, "k", {}, kEpoch, "x", kEpoch + 100).ok());
}

TEST(MemorySettleTest, ADebtTheStoreCannotHoldIsRefused) {
  MemoryStore store;
  const Limit log = MustLimit({.algorithm = Algorithm::kSlidingLog, .limit = 9'000, .period = 1s});
  EXPECT_TRUE(SettleOne(store, log, "k", {.units = 1, .max_debt = 1'000}, kEpoch).ok());
  absl::StatusOr<Settled> s = SettleOne(store, log, "k", {.units = 1, .max_debt = 1'001}, kEpoch);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Query(store, log, "k", kEpoch).remaining, 8'999) << "a refused settle charged";
  // A compact TAT holds kLatest*N' + (B + D)*P' in 63 bits: 1,001 per second (N' = 1,001,
  // P' = 10^6) leaves room for B + D up to about 1.9 * 10^12.
  const Limit fast = MustLimit({.algorithm = Algorithm::kGcra, .limit = 1'001, .period = 1s});
  EXPECT_EQ(SettleOne(store, fast, "k", {.units = 1, .max_debt = kMaxDebt}, kEpoch).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MemorySettleTest, ResetForgetsTheKeys) {
  MemoryStore store;
  const Limit a = MustLimit({.limit = 3, .period = 1s});
  const Limit b = MustLimit({.algorithm = Algorithm::kTokenBucket, .limit = 3, .period = 1s});
  ChargeOne(store, a, "k", 3, kEpoch);
  ChargeOne(store, b, "k", 3, kEpoch);
  const LimitedKey both[] = {
      {.limit = &a, .key = "k"}, {.limit = &b, .key = "k"}, {.limit = &a, .key = "never"}};
  ASSERT_TRUE(store.ResetAll(both, At(kEpoch + 1)).ok());
  EXPECT_EQ(Query(store, a, "k", kEpoch + 1).remaining, 3);
  EXPECT_EQ(Query(store, b, "k", kEpoch + 1).remaining, 3);
  EXPECT_EQ(store.KeyCount(), 0u);
  EXPECT_EQ(store.ResetAll({}, At(kEpoch)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(MemorySettleTest, SnapshotsKeepKeysInDebt) {
  char dir[] = "/tmp/sluice-settle-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/store.snap";
  MemoryStore store;
  std::vector<Limit> limits;
  for (Algorithm a : testing::AllAlgorithms()) {
    limits.push_back(MustLimit({.algorithm = a, .limit = 5, .period = 1s, .buckets = 10}));
    ASSERT_TRUE(SettleOne(store, limits.back(), "k", {.units = 9, .max_debt = 4}, kEpoch).ok());
  }
  ASSERT_TRUE(store.SaveSnapshot(path).ok());
  MemoryStore loaded;
  absl::StatusOr<size_t> n = loaded.LoadSnapshot(path, At(kEpoch + 1));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, limits.size());
  for (const Limit& limit : limits) {
    EXPECT_EQ(Query(loaded, limit, "k", kEpoch + 1), Query(store, limit, "k", kEpoch + 1))
        << limit.ToString();
    EXPECT_FALSE(Query(loaded, limit, "k", kEpoch + 1).allowed) << limit.ToString();
  }
  std::remove(path.c_str());
  rmdir(dir);
}

// The store against the core on a plain state: charges, settles and resets in random order.
TEST(MemorySettleTest, RandomTracesSettleAsTheCoreDoes) {
  Random random(testing::Seed(33));
  for (Algorithm algorithm : testing::AllAlgorithms()) {
    for (int c = 0; c < 60; ++c) {
      MemoryStore store;
      const Limit limit = random.LimitFor(store, algorithm);
      AnyState state = InitialState(algorithm);
      Charge last;
      int64_t t = kEpoch + random.Between(0, 1'000'000);
      for (int row = 0; row < 40; ++row) {
        t += random.Gap(limit);
        if (t >= MemoryStore::kLatest.time_since_epoch().count()) {
          break;
        }
        SCOPED_TRACE(limit.ToString() + " case " + std::to_string(c) + " row " +
                     std::to_string(row) + " t=" + std::to_string(t));
        const int op = static_cast<int>(random.Between(0, 9));
        if (op < 6) {
          const int64_t cost = random.Cost(limit);
          const Charged got = ChargeOne(store, limit, "k", cost, t);
          const Decision want = Decide(limit, state, At(t), cost);
          ASSERT_EQ(got.decision, want);
          last = want.allowed && cost > 0 ? ChargeOf(limit, state, At(t), cost) : Charge{};
          ASSERT_EQ(got.charge, last);
        } else if (op < 9) {
          const Settlement settlement{
              .charge = last,
              .units = random.Between(0, 2 * limit.burst()),
              .max_debt = std::min(random.Between(0, limit.limit()),
                                   MemoryStore::kMaxSlidingLogLimit - limit.limit())};
          absl::StatusOr<Settled> got = SettleOne(store, limit, "k", settlement, t);
          if (!got.ok() && got.status().code() == absl::StatusCode::kInvalidArgument) {
            continue;  // A debt this limit's compact state cannot hold.
          }
          ASSERT_TRUE(got.ok()) << got.status();
          ASSERT_EQ(*got, Settle(limit, state, At(t), settlement));
          last = Charge{};
        } else {
          const LimitedKey request{.limit = &limit, .key = "k"};
          ASSERT_TRUE(store.ResetAll({&request, 1}, At(t)).ok());
          state = InitialState(algorithm);
          last = Charge{};
        }
      }
    }
  }
}

}  // namespace
}  // namespace sluice
