// Threads race on shared keys with the clock frozen: the number admitted must be exact, for
// every algorithm and for several limits decided all or nothing. Run under ThreadSanitizer
// by `make test`.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/limiter.h"
#include "sluice/memory_store.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

constexpr int kThreads = 4;

// Each thread makes `attempts` cost-1 checks on `key`; returns how many were admitted.
int64_t Race(Limiter& limiter, std::string_view key, int attempts) {
  std::atomic<int64_t> admitted{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      while (!go.load(std::memory_order_acquire)) {
      }
      for (int a = 0; a < attempts; ++a) {
        absl::StatusOr<Decision> d = limiter.Check(key);
        if (d.ok() && d->allowed) {
          admitted.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  go.store(true, std::memory_order_release);
  for (std::thread& t : threads) {
    t.join();
  }
  return admitted.load();
}

class ConcurrencyTest : public ::testing::TestWithParam<Algorithm> {};

TEST_P(ConcurrencyTest, FrozenClockAdmitsExactlyTheLimitThenExactlyTheRefill) {
  ManualClock clock(At(kEpoch));
  MemoryStore store;
  Limiter limiter(MustLimit({.algorithm = GetParam(), .limit = 1000, .period = 1s, .buckets = 10}),
                  store, clock);
  EXPECT_EQ(Race(limiter, "hot", 500), 1000);
  // A quarter of a period later: the token buckets earn back exactly 250; the windows,
  // which hold everything until the period has passed, nothing.
  clock.Advance(250ms);
  const bool refills = UsesBurst(GetParam());
  EXPECT_EQ(Race(limiter, "hot", 500), refills ? 250 : 0);
  // Two periods after the start every algorithm has forgotten the first second.
  clock.Set(At(kEpoch) + 2s);
  EXPECT_EQ(Race(limiter, "hot", 500), 1000);
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, ConcurrencyTest,
                         ::testing::ValuesIn(testing::AllAlgorithms()), testing::AlgorithmTestName);

TEST(ConcurrencyAllOrNothingTest, SeveralLimitsCountTogetherUnderRaces) {
  ManualClock clock(At(kEpoch));
  MemoryStore store;
  // 50 per second and 120 per hour, on the same key, from several threads.
  Limiter limiter({MustLimit({.algorithm = Algorithm::kGcra, .limit = 50, .period = 1s}),
                   MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 120, .period = 1h})},
                  store, clock);
  Limiter hourly_only(MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 120, .period = 1h}),
                      store, clock);
  EXPECT_EQ(Race(limiter, "u", 100), 50);
  clock.Advance(1s);
  EXPECT_EQ(Race(limiter, "u", 100), 50);
  clock.Advance(1s);
  EXPECT_EQ(Race(limiter, "u", 100), 20);  // The hour's remainder, not 50.
  // The hourly limit counted exactly what was admitted: 120, so nothing is left.
  EXPECT_EQ(hourly_only.Check("u", 0)->remaining, 0);
}

TEST(ConcurrencyManyKeysTest, KeysInDifferentShardsStayExact) {
  ManualClock clock(At(kEpoch));
  MemoryStore store;
  Limiter limiter(MustLimit({.algorithm = Algorithm::kGcra, .limit = 3, .period = 1min}), store,
                  clock);
  constexpr int kKeys = 2000;
  std::atomic<int64_t> admitted{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int round = 0; round < 2; ++round) {
        for (int k = 0; k < kKeys; ++k) {
          const std::string key = "user-" + std::to_string((k * 7 + i) % kKeys);
          if (limiter.Check(key)->allowed) {
            admitted.fetch_add(1, std::memory_order_relaxed);
          }
        }
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  EXPECT_EQ(admitted.load(), 3 * kKeys);
  EXPECT_EQ(store.KeyCount(), static_cast<size_t>(kKeys));
}

TEST(ConcurrencySnapshotTest, SavingWhileTrafficFlowsLosesNoAdmission) {
  ManualClock clock(At(kEpoch));
  MemoryStore store;
  const Limit limit = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 100, .period = 1h});
  Limiter limiter(limit, store, clock);
  char dir[] = "/tmp/sluice-snapshot-race-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/store.snap";
  std::atomic<bool> done{false};
  std::thread saver([&] {
    while (!done.load(std::memory_order_acquire)) {
      EXPECT_TRUE(store.SaveSnapshot(path).ok());
    }
  });
  std::vector<std::thread> workers;
  for (int i = 0; i < kThreads; ++i) {
    workers.emplace_back([&, i] {
      for (int k = 0; k < 300; ++k) {
        (void)limiter.Check("key-" + std::to_string((k + i) % 50));
      }
    });
  }
  for (std::thread& t : workers) {
    t.join();
  }
  done.store(true, std::memory_order_release);
  saver.join();
  // After the traffic, a last snapshot holds every admission: 50 keys, 24 each.
  ASSERT_TRUE(store.SaveSnapshot(path).ok());
  MemoryStore restarted;
  EXPECT_EQ(*restarted.LoadSnapshot(path, clock.Now()), 50u);
  EXPECT_EQ(restarted.Decide(limit, "key-0", 0, clock.Now())->remaining, 100 - 24);
  std::remove(path.c_str());
  rmdir(dir);
}

// One caller mints a limit after another while threads decide on a limit in use and on the
// minted ones as their tables are freed (src/memory/registry.h): the limit in use stays exact,
// and a decision on a table being freed looks again and is answered.
TEST(ConcurrencyLimitTablesTest, FreeingIdleTablesLosesNoCountOfALimitInUse) {
  const Timestamp start = At(kEpoch);
  MemoryStore store;
  const Limit hot = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 1000, .period = 1h});
  const Limit hot_gcra = MustLimit({.algorithm = Algorithm::kGcra, .limit = 500, .period = 1h});
  auto minted = [](int64_t i) { return MustLimit({.limit = 10'000 + i, .period = 1s}); };
  constexpr int64_t kMinted = 3000;  // One every 100 ms: 5 minutes, within the hot window.
  std::atomic<int64_t> last{0};      // The last limit minted.
  std::thread minter([&] {
    for (int64_t i = 1; i <= kMinted; ++i) {
      EXPECT_TRUE(store.Decide(minted(i), "m", 1, start + i * 100ms).ok()) << i;
      last.store(i, std::memory_order_release);
    }
  });
  std::atomic<int64_t> admitted{0};
  std::atomic<int64_t> admitted_gcra{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kThreads - 1; ++w) {
    workers.emplace_back([&, w] {
      for (int k = 0; k < 600 || last.load(std::memory_order_acquire) < kMinted; ++k) {
        if (store.Decide(hot, "hot", 1, start)->allowed) {
          admitted.fetch_add(1, std::memory_order_relaxed);
        }
        // A limit minted some time ago: its table may be freed under this very decision.
        const int64_t i = std::max<int64_t>(1, last.load(std::memory_order_acquire) - 5 - w);
        const Timestamp now = start + i * 100ms + 150ms;
        EXPECT_TRUE(store.Decide(minted(i), "w", 1, now).ok());
        const Limit transient = minted(i);
        const LimitedKey both[] = {{&hot_gcra, "hot"}, {&transient, "x"}};
        std::vector<Decision> each(2);
        absl::StatusOr<Decision> d = store.DecideAll(both, 1, start, each);
        ASSERT_TRUE(d.ok()) << d.status();
        if (each[0].allowed && d->allowed) {
          admitted_gcra.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  for (std::thread& t : workers) {
    t.join();
  }
  minter.join();
  EXPECT_EQ(admitted.load(), 1000);
  EXPECT_FALSE(store.Decide(hot, "hot", 1, start + 30min)->allowed);
  // The gcra key was charged only with the whole request: never more than its burst.
  EXPECT_LE(admitted_gcra.load(), 500);
  EXPECT_EQ(store.Decide(hot_gcra, "hot", 0, start)->remaining, 500 - admitted_gcra.load());
  EXPECT_GT(store.Stats().limits_retired, 0u);
}

}  // namespace
}  // namespace sluice
