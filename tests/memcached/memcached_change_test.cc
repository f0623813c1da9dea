// A change of limit on Memcached (LimitedKey::before): a key whose item under the new figures
// is not there adopts the newest earlier item, converted (ConvertState), and the earlier items
// go once the new one is written; a reset forgets them too. Checked by hand, and against a
// model of the items on random traces of changes of every algorithm.

#include <future>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/convert.h"
#include "sluice/memcached_store.h"
#include "sluice/settle.h"
#include "src/memory/compact_state.h"
#include "tests/memcached/fixtures.h"
#include "tests/testing/limit_changes.h"
#include "tests/testing/random.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::At;
using testing::MemcachedOptionsFor;
using testing::MemcachedServer;
using testing::MustLimit;
using testing::MustMemcached;

constexpr int64_t kStart = testing::kHourStart;

using testing::Admit;

TEST(MemcachedChangeTest, ALoweredOrRaisedLimitKeepsTheUnitsUsedAndAResetForgetsThem) {
  MemcachedServer server;
  auto store = MustMemcached(MemcachedOptionsFor({&server}));
  const Limit ten = MustLimit({.limit = 10, .period = 1h});
  const Limit four = MustLimit({.limit = 4, .period = 1h});
  const Limit twenty = MustLimit({.limit = 20, .period = 1h});
  EXPECT_EQ(Admit(*store, ten, {}, "a", kStart, 7), 7);
  EXPECT_EQ(Admit(*store, ten, {}, "b", kStart, 7), 7);
  const std::vector<Limit> from_ten = {ten};
  // Asked once, denied: moved all the same, so that the usage is not converted again later.
  const LimitedKey lowered{.limit = &four, .key = "a", .before = from_ten};
  Decision each[1];
  std::promise<absl::StatusOr<Decision>> done;
  store->DecideAllAsync({&lowered, 1}, 1, At(kStart + 1), each,  // The copy of `before` too.
                        [&done](absl::StatusOr<Decision> d) { done.set_value(std::move(d)); });
  const absl::StatusOr<Decision> denied = done.get_future().get();
  ASSERT_TRUE(denied.ok()) << denied.status();
  EXPECT_FALSE(denied->allowed);                              // 7 used of 4.
  EXPECT_EQ(Admit(*store, four, {}, "a", kStart + 1, 5), 0);  // Found without `before`: moved.
  EXPECT_EQ(Admit(*store, twenty, from_ten, "b", kStart + 1, 20), 13);
  EXPECT_EQ(Admit(*store, twenty, {}, "fresh", kStart + 1, 30), 20);
  // The earlier item went with the move: a change back finds the moved state, not a copy.
  const std::vector<Limit> from_twenty = {twenty, ten};
  EXPECT_EQ(Admit(*store, ten, from_twenty, "b", kStart + 2, 5), 0);  // 20 used of 10.
  // A reset forgets the key under its earlier figures too.
  EXPECT_EQ(Admit(*store, ten, {}, "c", kStart, 9), 9);
  const LimitedKey reset{.limit = &twenty, .key = "c", .before = from_ten};
  ASSERT_TRUE(store->ResetAll({&reset, 1}, At(kStart + 1)).ok());
  EXPECT_EQ(Admit(*store, twenty, from_ten, "c", kStart + 2, 30), 20);
}

// Random limits of every algorithm, changed eight times a run, on four keys: the store decides
// as a model of its items does (at a key's first decision under new figures, the newest
// earlier item is converted and written as the new one, whatever the decision, and every
// earlier item deleted).
TEST(MemcachedChangeTest, DecidesAsAModelOfItsItemsThroughRandomChanges) {
  MemcachedServer server;
  auto store = MustMemcached(MemcachedOptionsFor({&server}));
  testing::Random random(testing::Seed(3401));
  int adopted = 0;
  for (int run = 0; run < 12; ++run) {
    std::map<std::pair<std::string, std::string>, AnyState> items;  // (figures, key): state.
    std::vector<Limit> history;
    int64_t t = kStart + run * 1'000'000'000LL;
    const std::string prefix = "r" + std::to_string(run) + ".";
    for (int change = 0; change < 8; ++change) {
      const Limit limit = testing::RandomSmallLimit(random);
      const std::vector<Limit> before = testing::EarlierFigures(history, limit);
      history.insert(history.begin(), limit);
      for (int request = 0; request < 40; ++request) {
        t += random.Between(0, 400);
        const std::string key = prefix + std::to_string(random.Between(0, 3));
        const int64_t cost = random.Between(0, 3);
        const auto here = std::make_pair(limit.ToString(), key);
        if (!items.contains(here)) {
          for (const Limit& earlier : before) {
            const auto there = items.find({earlier.ToString(), key});
            if (there == items.end()) {
              continue;
            }
            const AnyState moved =
                ConvertState(earlier, there->second, limit, At(t), internal::MaxDebt(limit));
            for (const Limit& other : before) {
              items.erase({other.ToString(), key});
            }
            if (moved != InitialState(limit.algorithm())) {
              items[here] = moved;
              ++adopted;
            }
            break;
          }
        }
        const auto found = items.find(here);
        AnyState state = found != items.end() ? found->second : InitialState(limit.algorithm());
        const Decision want = Decide(limit, state, At(t), cost);
        if (want.allowed && cost > 0) {
          items[here] = state;
        }
        const LimitedKey r{.limit = &limit, .key = key, .before = before};
        Decision each[1];
        const absl::StatusOr<Decision> got = store->DecideAll({&r, 1}, cost, At(t), each);
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_EQ(*got, want) << "run " << run << ", change " << change << ", " << limit.ToString()
                              << ", key " << key;
      }
    }
  }
  EXPECT_GT(adopted, 20);  // The traces moved states, not only started afresh.
}

}  // namespace
}  // namespace sluice
