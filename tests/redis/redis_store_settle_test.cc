// Settles through RedisStore (ChargeAll, then SettleAll; src/redis/settle.lua) against the
// reference in src/core/settle.cc: on random traces for every algorithm, decisions, charges and
// settles below, at and above the charge (debt bounds of every size) interleaved on a few keys,
// Redis's Settled (units given back and charged, the figures after) and every later decision
// equal the C++ ones, figure for figure; and, by hand on each algorithm, a settle below, equal
// to and above a charge, and a key in debt answering exactly.

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "sluice/redis_store.h"
#include "sluice/settle.h"
#include "tests/redis/fixtures.h"
#include "tests/testing/random.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using testing::MustStore;
using testing::OptionsFor;
using testing::RedisServer;
using namespace std::chrono_literals;

// The largest max_debt RedisStore accepts on `limit` (its doubles: (B + D) x P' <= 2^52).
int64_t MostDebt(const Limit& limit) {
  if (!UsesBurst(limit.algorithm())) {
    return kMaxDebt;
  }
  return std::min<int64_t>(kMaxDebt, (int64_t{1} << 52) / limit.rate_period_us() - limit.burst());
}

// A settlement of `charge`: below it (half the time), at it, or above it, with a debt bound of
// any size (0 included).
Settlement Draw(testing::Random& rnd, const Limit& limit, const Charge& charge) {
  Settlement settlement{.charge = charge};
  const int64_t draw = rnd.Between(0, 5);
  if (draw <= 2) {
    settlement.units = rnd.Between(0, charge.units);
  } else if (draw == 3) {
    settlement.units = charge.units;
  } else {
    settlement.units = std::min(Limit::kMaxCount, charge.units + rnd.Between(1, 3 * limit.burst()));
  }
  settlement.max_debt = std::min(
      MostDebt(limit), rnd.OneIn(4) ? rnd.Between(0, 2) : rnd.Between(0, 2 * limit.burst()));
  return settlement;
}

struct Out {
  std::string key;
  Charge charge;
};

class RedisSettleTest : public ::testing::TestWithParam<Algorithm> {};

TEST_P(RedisSettleTest, SettlesAsTheReferenceDoesFigureForFigure) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = MustStore(OptionsFor(server));
  testing::Random rnd(testing::Seed(331) + static_cast<uint64_t>(GetParam()));
  testing::Client client(server.port());
  const std::vector<std::string> keys = {"alice", "bob", "carol"};
  int given = 0;
  int charged = 0;
  int in_debt = 0;
  for (int round = 0; round < 15; ++round) {
    client.Run({"FLUSHALL"});
    const Limit limit = rnd.LimitFor(*redis, GetParam());
    std::map<std::string, AnyState> states;
    for (const std::string& k : keys) {
      states.emplace(k, InitialState(GetParam()));
    }
    std::vector<Out> out;
    int64_t t = kEpoch + rnd.Between(0, 1'000'000'000);
    for (int step = 0; step < 80; ++step) {
      t += rnd.OneIn(2) ? rnd.Between(0, 2) : rnd.Gap(limit);
      SCOPED_TRACE(limit.ToString() + " round " + std::to_string(round) + " step " +
                   std::to_string(step) + " t=" + std::to_string(t));
      if (!out.empty() && rnd.OneIn(2)) {  // Settle one charge that is out, often the latest.
        const size_t i =
            rnd.OneIn(3) ? static_cast<size_t>(rnd.Between(0, static_cast<int64_t>(out.size()) - 1))
                         : out.size() - 1;
        const Out o = out[i];
        out.erase(out.begin() + static_cast<std::ptrdiff_t>(i));
        const int64_t units = o.charge.units;
        const Settlement settlement = Draw(rnd, limit, o.charge);
        AnyState& state = states.at(o.key);
        const Settled want = Settle(limit, state, At(t), settlement);
        const LimitedKey request{&limit, o.key};
        Settled got;
        const absl::Status s =
            redis->SettleAll({&request, 1}, {&settlement, 1}, "", At(t), At(t), {&got, 1});
        ASSERT_TRUE(s.ok()) << s;
        ASSERT_EQ(got.given_back, want.given_back)
            << "settle " << settlement.units << " of " << units << " on " << o.key;
        ASSERT_EQ(got.charged, want.charged) << "settle " << settlement.units << " of " << units;
        ASSERT_EQ(got.after, want.after) << "settle " << settlement.units << " of " << units;
        given += want.given_back > 0 ? 1 : 0;
        charged += want.charged > 0 ? 1 : 0;
        in_debt += !want.after.allowed ? 1 : 0;
        continue;
      }
      const std::string& key = keys[static_cast<size_t>(rnd.Between(0, 2))];
      const LimitedKey request{&limit, key};
      AnyState& state = states.at(key);
      const int64_t cost = rnd.OneIn(5) ? 0 : rnd.Cost(limit);
      Decision got;
      Charge receipt;
      ASSERT_TRUE(redis->ChargeAll({&request, 1}, cost, At(t), {&got, 1}, {&receipt, 1}).ok());
      const Decision want = Decide(limit, state, At(t), cost);
      ASSERT_EQ(got, want) << "charge of " << cost << " on " << key;
      if (want.allowed && cost > 0) {
        out.push_back({key, receipt});
      }
    }
  }
  std::printf("settles that gave back: %d, charged past: %d, left a key in debt: %d\n", given,
              charged, in_debt);
  EXPECT_GT(given, 20);
  EXPECT_GT(charged, 20);
  EXPECT_GT(in_debt, 5);
}

// 10 per second (burst 10): a charge of 4, then a settle of 4 (nothing changes), of 1 (3 come
// back), or of 20 with max_debt 5 (11 charged: 15 = N + D in use), each on a key of its own.
TEST_P(RedisSettleTest, BelowEqualAndAboveTheCharge) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = MustStore(OptionsFor(server));
  LimitSpec spec{.algorithm = GetParam(), .limit = 10, .period = 1s};
  if (GetParam() == Algorithm::kSlidingBuckets) {
    spec.buckets = 10;
  }
  const Limit limit = MustLimit(spec);
  const int64_t t = kEpoch + 250'000;
  struct Case {
    std::string key;
    int64_t units;
    int64_t given_back, charged, remaining;
  };
  for (const Case& c : {Case{"equal", 4, 0, 0, 6}, Case{"below", 1, 3, 0, 9},
                        Case{"above", 20, 0, 11, 0}, Case{"refund", 0, 4, 0, 10}}) {
    SCOPED_TRACE(c.key);
    const LimitedKey request{&limit, c.key};
    Decision each;
    Charge charge;
    ASSERT_TRUE(redis->ChargeAll({&request, 1}, 4, At(t), {&each, 1}, {&charge, 1})->allowed);
    ASSERT_EQ(charge.units, 4);
    const Settlement settlement{.charge = charge, .units = c.units, .max_debt = 5};
    Settled got;
    ASSERT_TRUE(
        redis->SettleAll({&request, 1}, {&settlement, 1}, "", At(t), At(t), {&got, 1}).ok());
    EXPECT_EQ(got.given_back, c.given_back);
    EXPECT_EQ(got.charged, c.charged);
    EXPECT_EQ(got.after.remaining, c.remaining);
    EXPECT_EQ(got.after.allowed, c.remaining > 0);
    // The reference agrees on every figure.
    AnyState state = InitialState(GetParam());
    Decide(limit, state, At(t), 4);
    EXPECT_EQ(got, Settle(limit, state, At(t), settlement));
    absl::StatusOr<Decision> query = redis->Decide(limit, c.key, 0, At(t));
    ASSERT_TRUE(query.ok()) << query.status();
    EXPECT_EQ(*query, got.after);
  }
}

// A key in debt: remaining 0, and retry_after exact for costs 0, 1 and N: denied 1 us before it
// and allowed at it (a key per cost: an allowed request changes its state).
TEST_P(RedisSettleTest, AKeyInDebtAnswersExactly) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = MustStore(OptionsFor(server));
  LimitSpec spec{.algorithm = GetParam(), .limit = 10, .period = 1s};
  if (GetParam() == Algorithm::kSlidingBuckets) {
    spec.buckets = 10;
  }
  const Limit limit = MustLimit(spec);
  const int64_t t = kEpoch + 400'000;
  for (int64_t cost : {0, 1, 10}) {
    SCOPED_TRACE(cost);
    const std::string key = "debtor" + std::to_string(cost);
    const LimitedKey request{&limit, key};
    Decision each;
    Charge charge;
    ASSERT_TRUE(redis->ChargeAll({&request, 1}, 10, At(t), {&each, 1}, {&charge, 1})->allowed);
    const Settlement settlement{.charge = charge, .units = 17, .max_debt = 7};
    Settled got;
    ASSERT_TRUE(
        redis->SettleAll({&request, 1}, {&settlement, 1}, "", At(t), At(t), {&got, 1}).ok());
    EXPECT_EQ(got.charged, 7);
    absl::StatusOr<Decision> d = redis->Decide(limit, key, cost, At(t));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_FALSE(d->allowed);
    EXPECT_EQ(d->remaining, 0);
    ASSERT_GT(d->retry_after.count(), 1);
    const int64_t retry = d->retry_after.count();
    EXPECT_FALSE(redis->Decide(limit, key, cost, At(t + retry - 1))->allowed);
    EXPECT_TRUE(redis->Decide(limit, key, cost, At(t + retry))->allowed);
  }
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, RedisSettleTest,
                         ::testing::ValuesIn(testing::AllAlgorithms()), testing::AlgorithmTestName);

}  // namespace
}  // namespace sluice
