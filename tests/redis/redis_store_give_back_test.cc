// Charges and give-backs through RedisStore (ChargeAll, GiveBackAll) against the reference in
// src/core/give_back.cc: on random traces for every algorithm, decisions, charges and
// give-backs interleaved on a few keys, Redis's figures and receipts equal the C++ ones.

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "sluice/give_back.h"
#include "sluice/redis_store.h"
#include "tests/redis/fixtures.h"
#include "tests/testing/random.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustStore;
using testing::OptionsFor;
using testing::RedisServer;

class RedisGiveBackTest : public ::testing::TestWithParam<Algorithm> {};

// A charge made earlier on a key, to be given back later.
struct Out {
  std::string key;
  Charge charge;
};

TEST_P(RedisGiveBackTest, GivesBackAsTheReferenceDoesFigureForFigure) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = MustStore(OptionsFor(server));
  testing::Random rnd(testing::Seed(181) + static_cast<uint64_t>(GetParam()));
  testing::Client client(server.port());
  const std::vector<std::string> keys = {"alice", "bob"};
  int given_back = 0;
  int changed = 0;
  for (int round = 0; round < 20; ++round) {
    client.Run({"FLUSHALL"});
    const Limit limit = rnd.LimitFor(*redis, GetParam());
    std::map<std::string, AnyState> states;
    for (const std::string& k : keys) {
      states.emplace(k, InitialState(GetParam()));
    }
    std::vector<Out> out;
    int64_t t = kEpoch + rnd.Between(0, 1'000'000'000);
    for (int step = 0; step < 60; ++step) {
      t += rnd.Gap(limit);
      const std::string& key = keys[static_cast<size_t>(rnd.Between(0, 1))];
      const LimitedKey request{&limit, key};
      AnyState& state = states.at(key);
      Decision got;
      SCOPED_TRACE(limit.ToString() + " round " + std::to_string(round) + " step " +
                   std::to_string(step) + " t=" + std::to_string(t));
      if (!out.empty() && rnd.OneIn(3)) {  // Give back one charge that is out.
        const size_t i = static_cast<size_t>(rnd.Between(0, static_cast<int64_t>(out.size()) - 1));
        const Out o = out[i];
        out.erase(out.begin() + static_cast<std::ptrdiff_t>(i));
        AnyState& s = states.at(o.key);
        const AnyState before = s;
        GiveBack(limit, s, At(t), o.charge);
        changed += before == s ? 0 : 1;
        const Decision want = Decide(limit, s, At(t), 0);
        const LimitedKey back{&limit, o.key};
        ASSERT_TRUE(redis->GiveBackAll({&back, 1}, {&o.charge, 1}, At(t), {&got, 1}).ok());
        ASSERT_EQ(got, want) << "give-back of " << o.charge.units << " on " << o.key;
        ++given_back;
        continue;
      }
      const int64_t cost = rnd.Cost(limit);
      Charge receipt;
      ASSERT_TRUE(redis->ChargeAll({&request, 1}, cost, At(t), {&got, 1}, {&receipt, 1}).ok());
      const Decision want = Decide(limit, state, At(t), cost);
      ASSERT_EQ(got, want) << "charge of " << cost << " on " << key;
      if (want.allowed && cost > 0) {
        ASSERT_EQ(receipt, ChargeOf(limit, state, At(t), cost));
        out.push_back({key, receipt});
      } else {
        ASSERT_EQ(receipt.units, 0);
      }
    }
  }
  EXPECT_GT(given_back, 100);
  std::printf("give-backs: %d, of which changed a key: %d\n", given_back, changed);
  EXPECT_GT(changed, 20);  // Give-backs that gave something back, not only nothing.
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, RedisGiveBackTest,
                         ::testing::ValuesIn(testing::AllAlgorithms()), testing::AlgorithmTestName);

}  // namespace
}  // namespace sluice
