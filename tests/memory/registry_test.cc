// The memory store's limit tables: freed once every key of theirs has reset, never while one
// holds state (src/memory/registry.h).

#include <string>

#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

Timestamp Since(Micros d) { return At(kEpoch) + d; }

Limit PerSecond(size_t n) {
  return testing::MustLimit({.limit = static_cast<int64_t>(n), .period = 1s});
}

TEST(MemoryStoreLimitsTest, ALimitIsAcceptedOnceTheTablesOfIdleLimitsHaveReset) {
  MemoryStore store;
  for (size_t i = 1; i <= MemoryStore::kMaxLimits; ++i) {
    ASSERT_TRUE(store.Decide(PerSecond(i), "k", 1, Since(0s)).ok()) << i;
  }
  const Limit one_more = PerSecond(MemoryStore::kMaxLimits + 1);
  // Every table holds a key inside its window: none may go.
  EXPECT_EQ(store.Decide(one_more, "k", 1, Since(500ms)).status().code(),
            absl::StatusCode::kResourceExhausted);
  // Their windows over, their keys have reset: a table is freed for the new limit.
  const absl::StatusOr<Decision> accepted = store.Decide(one_more, "k", 1, Since(2s));
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_TRUE(accepted->allowed);
  EXPECT_GE(store.Stats().limits_retired, 1u);
  EXPECT_LE(store.Stats().limits, MemoryStore::kMaxLimits);
  // A freed limit that comes back decides as a new one: its key had reset.
  const absl::StatusOr<Decision> back = store.Decide(PerSecond(1), "k", 1, Since(2s));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->allowed);
  EXPECT_FALSE(store.Decide(PerSecond(1), "k", 1, Since(2s))->allowed);
}

// Store::HoldsState, which a server asks before giving a caller's limit's place to another:
// true only while a key of the limit has not reset; a query stores nothing.
TEST(MemoryStoreLimitsTest, HoldsStateWhileAKeyOfTheLimitHasNotReset) {
  MemoryStore store;
  const Limit limit = PerSecond(3);
  EXPECT_FALSE(store.HoldsState(limit, Since(0s)));  // Never seen.
  ASSERT_TRUE(store.Decide(limit, "k", 0, Since(0s)).ok());
  EXPECT_FALSE(store.HoldsState(limit, Since(0s)));  // A query made a table, and no key.
  ASSERT_TRUE(store.Decide(limit, "k", 1, Since(0s))->allowed);
  ASSERT_TRUE(store.Decide(limit, "j", 1, Since(0s))->allowed);
  EXPECT_TRUE(store.HoldsState(limit, Since(999ms)));
  EXPECT_FALSE(store.HoldsState(PerSecond(4), Since(999ms)));  // Another limit's.
  EXPECT_FALSE(store.HoldsState(limit, Since(1s)));            // Both keys' windows are over.
  // Asking dropped them: the key decides as a new one, with its whole limit.
  EXPECT_EQ(store.Decide(limit, "k", 1, Since(1s))->remaining, 2);
  EXPECT_TRUE(store.HoldsState(limit, Since(1s)));
}

TEST(MemoryStoreLimitsTest, ALimitInUseIsNeverFreed) {
  MemoryStore store;
  const Limit hourly = testing::MustLimit({.limit = 3, .period = 1h});
  const Limit gcra = testing::MustLimit({.algorithm = Algorithm::kGcra, .limit = 2, .period = 2h});
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(store.Decide(hourly, "victim", 1, Since(0s))->allowed);
  }
  ASSERT_TRUE(store.Decide(gcra, "victim", 2, Since(0s))->allowed);
  // A caller mints distinct limits, each used once, for twenty minutes: thousands of tables
  // are made and freed around the two in use.
  for (size_t i = 1; i <= 3 * MemoryStore::kMaxLimits; ++i) {
    const Timestamp now = Since(std::chrono::milliseconds(100 * i));
    ASSERT_TRUE(store.Decide(PerSecond(1000 + i), "k", 1, now).ok()) << i;
  }
  EXPECT_GT(store.Stats().limits_retired, MemoryStore::kMaxLimits);
  EXPECT_LT(store.Stats().limits, 1000u) << "idle tables go as new ones come";
  const Timestamp later = Since(30min);
  EXPECT_FALSE(store.Decide(hourly, "victim", 1, later)->allowed);
  EXPECT_FALSE(store.Decide(gcra, "victim", 1, later)->allowed);
  // All or nothing, too.
  const LimitedKey both[] = {{&hourly, "victim"}, {&gcra, "victim"}};
  std::vector<Decision> each(2);
  EXPECT_FALSE(store.DecideAll(both, 1, later, each)->allowed);
  EXPECT_FALSE(each[0].allowed) << each[0].remaining;
  EXPECT_FALSE(each[1].allowed) << each[1].remaining;
}

TEST(MemoryStoreLimitsTest, ATableIsNotFreedBeforeAPeriodHasPassed) {
  MemoryStore store;
  // A limit of one a day, queried at cost 0 (no key): its table holds nothing, yet stays a day.
  const Limit daily = testing::MustLimit({.limit = 1, .period = 24h});
  ASSERT_TRUE(store.Decide(daily, "k", 0, Since(0s)).ok());
  for (size_t i = 1; i <= 8; ++i) {
    ASSERT_TRUE(store.Decide(PerSecond(i), "k", 1, Since(1h)).ok());
  }
  EXPECT_EQ(store.Stats().limits, 9u);
  for (size_t i = 9; i <= 16; ++i) {
    ASSERT_TRUE(store.Decide(PerSecond(i), "k", 1, Since(25h)).ok());
  }
  EXPECT_LT(store.Stats().limits, 16u);  // The idle ones go, a few per new table.
}

}  // namespace
}  // namespace sluice
