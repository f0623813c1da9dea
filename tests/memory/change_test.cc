// A change of limit in the memory store (LimitedKey::before, docs/algorithms.md "A change of
// limit"): a key decided under new figures takes its state from the earlier figures' table,
// converted, and the state moves (it is found in one table only); a reset forgets it under the
// earlier figures too; a change back carries the units again; and on random changes under
// random traffic, the store decides as a model of those rules.

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/convert.h"
#include "sluice/memory_store.h"
#include "sluice/settle.h"
#include "src/memory/compact_state.h"
#include "tests/testing/limit_changes.h"
#include "tests/testing/random.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::At;
using testing::MustLimit;

constexpr int64_t kHour = testing::kHourUs;
constexpr int64_t kStart = testing::kHourStart;

// Units of cost 1 admitted under `limit` (with `before`) on `key` at `t`, up to `most`.
using testing::Admit;

class ChangeTest : public ::testing::Test {
 protected:
  MemoryStore store_;
  const Limit thousand_ = MustLimit({.limit = 1000, .period = 1h});
  const Limit hundred_ = MustLimit({.limit = 100, .period = 1h});
};

TEST_F(ChangeTest, ALoweredLimitKeepsTheUnitsUsed) {
  ASSERT_EQ(Admit(store_, thousand_, {}, "alice", kStart, 500), 500);
  const Limit before[] = {thousand_};
  EXPECT_EQ(Admit(store_, hundred_, before, "alice", kStart + 1000, 1000), 0);
  EXPECT_EQ(store_.KeyCount(), 1U) << "the state moved: one table holds it";
  EXPECT_EQ(Admit(store_, hundred_, before, "alice", kStart + kHour, 1000), 100);
}

TEST_F(ChangeTest, WithoutTheEarlierFiguresAKeyStartsAfresh) {
  // What every change of limit did before: the test above would fail this way.
  ASSERT_EQ(Admit(store_, thousand_, {}, "alice", kStart, 500), 500);
  EXPECT_EQ(Admit(store_, hundred_, {}, "alice", kStart + 1000, 1000), 100);
}

TEST_F(ChangeTest, ARaisedLimitGivesOnlyTheDifferenceAndOtherKeysTheirOwn) {
  ASSERT_EQ(Admit(store_, hundred_, {}, "alice", kStart, 100), 100);
  ASSERT_EQ(Admit(store_, hundred_, {}, "bob", kStart, 30), 30);
  const Limit before[] = {hundred_};
  EXPECT_EQ(Admit(store_, thousand_, before, "alice", kStart + 1, 5000), 900);
  EXPECT_EQ(Admit(store_, thousand_, before, "bob", kStart + 1, 5000), 970);
  EXPECT_EQ(Admit(store_, thousand_, before, "carol", kStart + 1, 5000), 1000);
}

TEST_F(ChangeTest, AChangeBackCarriesTheUnitsAgain) {
  ASSERT_EQ(Admit(store_, hundred_, {}, "alice", kStart, 40), 40);
  const Limit to_thousand[] = {hundred_};
  ASSERT_EQ(Admit(store_, thousand_, to_thousand, "alice", kStart + 1, 20), 20);
  const Limit back[] = {thousand_, hundred_};
  EXPECT_EQ(Admit(store_, hundred_, back, "alice", kStart + 2, 1000), 40) << "60 of 100 used";
  EXPECT_EQ(store_.KeyCount(), 1U);
}

TEST_F(ChangeTest, AResetForgetsTheKeyUnderTheEarlierFiguresToo) {
  ASSERT_EQ(Admit(store_, thousand_, {}, "alice", kStart, 1000), 1000);
  const Limit before[] = {thousand_};
  const LimitedKey request{.limit = &hundred_, .key = "alice", .before = before};
  ASSERT_TRUE(store_.ResetAll({&request, 1}, At(kStart + 1)).ok());
  EXPECT_EQ(store_.KeyCount(), 0U);
  EXPECT_EQ(Admit(store_, hundred_, before, "alice", kStart + 2, 1000), 100);
}

TEST(ChangeCompactKeysTest, AStateMovesBetweenTablesThatHashKeysDifferently) {
  // With compact keys a gcra table keeps fingerprints and a fixed_window table the keys: the
  // key is found in each by that table's own hash.
  MemoryStore store({.compact_keys = true});
  const Limit window = MustLimit({.limit = 100, .period = 1h});
  const Limit gcra = MustLimit({.algorithm = Algorithm::kGcra, .limit = 100, .period = 1h});
  ASSERT_EQ(Admit(store, window, {}, "ann", kStart, 100), 100);
  const Limit before[] = {window};
  EXPECT_EQ(Admit(store, gcra, before, "ann", kStart + 1, 100), 0) << "100 used, carried";
  EXPECT_EQ(store.KeyCount(), 1U);
  const Limit back[] = {gcra, window};
  EXPECT_EQ(Admit(store, window, back, "ann", kStart + 2, 100), 0) << "and carried back";
  EXPECT_EQ(store.KeyCount(), 1U);
}

TEST_F(ChangeTest, ACopyLeftUnderTheEarlierFiguresIsDroppedNotFoundOnAChangeBack) {
  ASSERT_EQ(Admit(store_, hundred_, {}, "ann", kStart, 10), 10);
  const Limit to_thousand[] = {hundred_};
  ASSERT_EQ(Admit(store_, thousand_, to_thousand, "ann", kStart + 1, 50), 50);  // 60 used.
  // A call still on the old figures (a request in flight at the reload) writes there again.
  ASSERT_EQ(Admit(store_, hundred_, {}, "ann", kStart + 2, 1), 1);
  ASSERT_EQ(Admit(store_, thousand_, to_thousand, "ann", kStart + 3, 1), 1);  // Drops it: 61.
  const Limit back[] = {thousand_, hundred_};
  EXPECT_EQ(Admit(store_, hundred_, back, "ann", kStart + 4, 100), 39) << "61 of 100 used";
}

TEST_F(ChangeTest, AChargeAndASettleAdoptFirst) {
  ASSERT_EQ(Admit(store_, thousand_, {}, "alice", kStart, 95), 95);
  const Limit before[] = {thousand_};
  const LimitedKey request{.limit = &hundred_, .key = "alice", .before = before};
  Decision each[1];
  Charge charges[1];
  absl::StatusOr<Decision> d = store_.ChargeAll({&request, 1}, 5, At(kStart + 1), each, charges);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->remaining, 0) << "95 carried, 5 charged";
  // Another key with earlier state, settled before it is ever decided under the new figures:
  // the extra charge lands on the adopted state.
  ASSERT_EQ(Admit(store_, thousand_, {}, "bob", kStart, 90), 90);
  const LimitedKey bob{.limit = &hundred_, .key = "bob", .before = before};
  const Settlement extra[] = {{.charge = Charge{}, .units = 5, .max_debt = 100}};
  Settled settled[1];
  ASSERT_TRUE(store_.SettleAll({&bob, 1}, extra, "", At(kStart), At(kStart + 2), settled).ok());
  EXPECT_EQ(Admit(store_, hundred_, before, "bob", kStart + 3, 100), 5);
}

// Random limits changing under random traffic on a few keys: the store decides every request
// as a model of its tables does (a state per figures and key; a key missing under the figures
// of a request moved from the first of its earlier figures that holds it, converted by
// ConvertState). The seed is printed; replay with SLUICE_SEED=...
TEST(ChangePropertyTest, TheStoreDecidesAsAModelOfItsTablesThroughRandomChanges) {
  testing::Random random(testing::Seed(3400));
  for (int run = 0; run < 40; ++run) {
    MemoryStore store;
    std::map<std::pair<std::string, std::string>, AnyState> tables;  // (figures, key): state.
    std::vector<Limit> history;  // Newest first: the figures in force, then those before.
    int64_t t = kStart;
    for (int change = 0; change < 8; ++change) {
      const Limit limit = testing::RandomSmallLimit(random);
      const std::vector<Limit> before = testing::EarlierFigures(history, limit);
      history.insert(history.begin(), limit);
      for (int request = 0; request < 60; ++request) {
        t += random.Between(0, 400);
        const std::string key = "k" + std::to_string(random.Between(0, 3));
        const int64_t cost = random.Between(0, 3);
        const auto here = std::make_pair(limit.ToString(), key);
        if (!tables.contains(here)) {
          for (const Limit& earlier : before) {
            const auto there = tables.find({earlier.ToString(), key});
            if (there == tables.end()) {
              continue;
            }
            const AnyState moved =
                ConvertState(earlier, there->second, limit, At(t), internal::MaxDebt(limit));
            tables.erase(there);
            if (moved != InitialState(limit.algorithm())) {
              tables[here] = moved;
            }
            break;
          }
        }
        const auto found = tables.find(here);
        AnyState state = found != tables.end() ? found->second : InitialState(limit.algorithm());
        const Decision want = Decide(limit, state, At(t), cost);
        if (found != tables.end() || (want.allowed && cost > 0)) {
          tables[here] = state;
        }
        const LimitedKey r{.limit = &limit, .key = key, .before = before};
        Decision each[1];
        const absl::StatusOr<Decision> got = store.DecideAll({&r, 1}, cost, At(t), each);
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_EQ(*got, want) << "run " << run << ", change " << change << ", " << limit.ToString()
                              << ", key " << key << " at " << t - kStart;
      }
    }
  }
}

}  // namespace
}  // namespace sluice
