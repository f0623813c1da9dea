// Threads decide the same keys under a changed limit at once (run under ThreadSanitizer by
// `make test`): every key held state under the earlier figures, and the threads start
// together and walk the keys in the same order, so that each key's first decisions under the
// new figures come from several threads at once (likely, not observed: the store counts no
// moves). What the threads admit on a key is exactly what the new limit leaves after the units
// used: a key decided fresh by a thread that missed the move would admit a whole limit more,
// one moved twice would admit less.

#include <atomic>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::At;
using testing::MustLimit;

constexpr int kThreads = 8;
constexpr int kKeys = 64;
constexpr int64_t kStart = testing::kHourStart;

TEST(ChangeConcurrencyTest, ThreadsDecidingChangedKeysAtOnceAdmitExactlyWhatTheNewLimitLeaves) {
  MemoryStore store;
  const Limit before =
      MustLimit({.algorithm = Algorithm::kSlidingWindow, .limit = 50, .period = 1h});
  const Limit after =
      MustLimit({.algorithm = Algorithm::kSlidingWindow, .limit = 80, .period = 1h});
  std::vector<std::string> keys;
  for (int k = 0; k < kKeys; ++k) {
    keys.push_back(fmt::format("key{}", k));
    for (int i = 0; i < 30 + k % 20; ++i) {
      ASSERT_TRUE(store.Decide(before, keys.back(), 1, At(kStart)).value().allowed);
    }
  }
  const Limit earlier[] = {before};
  std::vector<std::atomic<int64_t>> admitted(kKeys);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      for (int round = 0; round < 60; ++round) {
        for (int key = 0; key < kKeys; ++key) {
          const LimitedKey request{.limit = &after, .key = keys[key], .before = earlier};
          Decision each[1];
          absl::StatusOr<Decision> d = store.DecideAll({&request, 1}, 1, At(kStart + 1), each);
          if (d.ok() && d->allowed) {
            admitted[key].fetch_add(1);
          }
        }
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_EQ(admitted[k].load(), 80 - (30 + k % 20)) << keys[k];
  }
  EXPECT_EQ(store.KeyCount(), static_cast<size_t>(kKeys)) << "each state in one table";
}

}  // namespace
}  // namespace sluice
