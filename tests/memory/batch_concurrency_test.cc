// DecideBatch and compact keys under threads: batches and single calls race on shared keys with
// the clock frozen, and each key's admissions must be exactly its limit. Run under
// ThreadSanitizer (label "concurrent"): the prefetch reads a shard's map under TryLock only.

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

constexpr int kThreads = 4;
constexpr int kKeys = 3'000;  // Enough that the tables grow while the threads race.
constexpr int64_t kLimit = 5;

class BatchRaceTest : public ::testing::TestWithParam<bool> {};

// Half the threads decide batches of 32, half single requests, each over every key kLimit * 2
// times in its own order: every key admits exactly kLimit.
TEST_P(BatchRaceTest, EveryKeyAdmitsExactlyItsLimit) {
  MemoryStore store({.compact_keys = GetParam()});
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = kLimit, .period = 1h});
  std::vector<std::string> keys;
  for (int k = 0; k < kKeys; ++k) {
    keys.push_back(fmt::format("key-{}", k));
  }
  std::vector<std::atomic<int64_t>> admitted(kKeys);
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) {
    threads.emplace_back([&, id] {
      while (!go.load(std::memory_order_acquire)) {
      }
      std::vector<int> order;
      for (int round = 0; round < 2 * kLimit; ++round) {
        for (int k = 0; k < kKeys; ++k) {
          order.push_back((k * (2 * id + 1) + round) % kKeys);  // Each thread its own order.
        }
      }
      constexpr size_t kBatch = 32;
      for (size_t at = 0; at < order.size(); at += kBatch) {
        const size_t n = std::min(kBatch, order.size() - at);
        std::vector<KeyCost> requests;
        for (size_t i = 0; i < n; ++i) {
          requests.push_back({keys[order[at + i]], 1});
        }
        std::vector<absl::StatusOr<Decision>> out(n);
        if (id % 2 == 0) {
          store.DecideBatch(limit, requests, At(kEpoch), out);
        } else {
          for (size_t i = 0; i < n; ++i) {
            out[i] = store.Decide(limit, requests[i].key, 1, At(kEpoch));
          }
        }
        for (size_t i = 0; i < n; ++i) {
          ASSERT_TRUE(out[i].ok()) << out[i].status();
          if (out[i]->allowed) {
            admitted[order[at + i]].fetch_add(1, std::memory_order_relaxed);
          }
        }
      }
    });
  }
  go.store(true, std::memory_order_release);
  for (std::thread& t : threads) {
    t.join();
  }
  for (int k = 0; k < kKeys; ++k) {
    ASSERT_EQ(admitted[k].load(), kLimit) << keys[k];
  }
  EXPECT_EQ(store.KeyCount(), static_cast<size_t>(kKeys));
}

INSTANTIATE_TEST_SUITE_P(KeysAndCompactKeys, BatchRaceTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "compact_keys" : "keys";
                         });

}  // namespace
}  // namespace sluice
