// A change of limit in the memory store (LimitedKey::before, docs/algorithms.md "A change of
// limit"): a key decided under new figures takes its state from the earlier figures' table,
// converted, and the state moves (it is found in one table only); a reset forgets it under the
// earlier figures too; a change back carries the units again.

#include <string>

#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "sluice/settle.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::At;
using testing::MustLimit;

constexpr int64_t kHour = testing::kHourUs;
constexpr int64_t kStart = testing::kHourStart;

// Units of cost 1 admitted under `limit` (with `before`) on `key` at `t`, up to `most`.
int64_t Admit(MemoryStore& store, const Limit& limit, std::span<const Limit> before,
              std::string_view key, int64_t t, int64_t most) {
  const LimitedKey request{.limit = &limit, .key = key, .before = before};
  int64_t admitted = 0;
  Decision each[1];
  while (admitted < most) {
    absl::StatusOr<Decision> d = store.DecideAll({&request, 1}, 1, At(t), each);
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok() || !d->allowed) {
      break;
    }
    ++admitted;
  }
  return admitted;
}

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

}  // namespace
}  // namespace sluice
