// MemoryStore::DecideBatch: its answers are those of single Decide calls made one after the
// other in the batch's order (include/sluice/memory_store.h), checked on random traces with
// keys repeated within and across batches, on a manual clock, for every algorithm, with keys
// kept and with compact keys, with and without a bound on the keys.

#include <random>
#include <string>
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

// The same answer: the same error code, or the same decision.
void ExpectSame(const absl::StatusOr<Decision>& batch, const absl::StatusOr<Decision>& single,
                const std::string& where) {
  ASSERT_EQ(batch.status().code(), single.status().code()) << where << ": " << batch.status();
  if (single.ok()) {
    ASSERT_EQ(*batch, *single) << where;
  }
}

struct Case {
  Algorithm algorithm;
  bool compact_keys;
  size_t max_keys;
};

class DecideBatchTest : public ::testing::TestWithParam<Case> {};

TEST_P(DecideBatchTest, AnswersAsSingleCallsInOrder) {
  const Case c = GetParam();
  const Limit limit =
      MustLimit({.algorithm = c.algorithm, .limit = 5, .period = 1s, .buckets = 10});
  // One secret for both stores: keys fall in the same shards, so a bound refuses the same.
  const MemoryStoreOptions options{.max_keys = c.max_keys,
                                   .compact_keys = c.compact_keys,
                                   .compact_keys_secret_for_testing = 0x5eed};
  MemoryStore batched(options);
  MemoryStore single(options);
  std::mt19937_64 random(testing::Seed(23));
  int64_t t = kEpoch;
  int admitted = 0;
  for (int round = 0; round < 400; ++round) {
    // Mostly forward by up to 100 ms, sometimes back a little (a late clock).
    t += static_cast<int64_t>(random() % 100'000) - (random() % 10 == 0 ? 150'000 : 0);
    const size_t size = 1 + random() % 40;
    std::vector<std::string> keys(size);
    std::vector<KeyCost> requests(size);
    for (size_t i = 0; i < size; ++i) {
      // 300 keys: a batch of 40 often names one twice, and keys come back across batches.
      keys[i] = fmt::format("key-{}", random() % 300);
      const int64_t cost = random() % 50 == 0 ? -1 : static_cast<int64_t>(random() % 4);
      requests[i] = {keys[i], cost};
    }
    // One batch in 100 at a time the store refuses, which every request gets as its error.
    const int64_t at = random() % 100 == 0 ? -5 : t;
    std::vector<absl::StatusOr<Decision>> out(size);
    batched.DecideBatch(limit, requests, At(at), out);
    for (size_t i = 0; i < size; ++i) {
      const absl::StatusOr<Decision> expected =
          single.Decide(limit, requests[i].key, requests[i].cost, At(at));
      ExpectSame(out[i], expected, fmt::format("round {} request {} ({})", round, i, keys[i]));
      admitted += expected.ok() && expected->allowed ? 1 : 0;
    }
  }
  EXPECT_GT(admitted, 100) << "a trace that admits little shows little";
  EXPECT_EQ(batched.KeyCount(), single.KeyCount());
  EXPECT_EQ(batched.Stats().refused, single.Stats().refused);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (Algorithm a : testing::AllAlgorithms()) {
    for (bool compact : {false, true}) {
      for (size_t max_keys : {size_t{0}, size_t{100}}) {
        cases.push_back({a, compact, max_keys});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, DecideBatchTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return fmt::format("{}{}{}", AlgorithmName(info.param.algorithm),
                                              info.param.compact_keys ? "_compact_keys" : "",
                                              info.param.max_keys > 0 ? "_bounded" : "");
                         });

// A key named twice in one batch sees its first request's charge.
TEST(DecideBatchTest, AKeyTwiceSeesItsFirstCharge) {
  MemoryStore store;
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = 1, .period = 1h});
  const std::vector<KeyCost> requests = {{"alice", 1}, {"bob", 1}, {"alice", 1}, {"alice", 0}};
  std::vector<absl::StatusOr<Decision>> out(requests.size());
  store.DecideBatch(limit, requests, At(kEpoch), out);
  EXPECT_TRUE(out[0]->allowed);
  EXPECT_TRUE(out[1]->allowed);
  EXPECT_FALSE(out[2]->allowed);
  EXPECT_EQ(out[2]->retry_after, Micros{std::chrono::hours(1)});
  EXPECT_TRUE(out[3]->allowed);  // A query.
  EXPECT_EQ(out[3]->remaining, 0);
}

// A batch longer than the window of hashes kept ahead (64) and a limit the store refuses.
// Review findings: a batch with fewer places for answers than requests decides nothing (it
// wrote past `out` in a release build); a batch of invalid costs only makes no table, as
// Decide does not.
TEST(DecideBatchTest, MismatchedAnswersAndInvalidCostsDecideNothing) {
  MemoryStore store;
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = 1, .period = 1h});
  const std::vector<KeyCost> requests = {{"a", 1}, {"b", 1}, {"c", 1}};
  std::vector<absl::StatusOr<Decision>> out(2);
  store.DecideBatch(limit, requests, At(kEpoch), out);
  for (const absl::StatusOr<Decision>& o : out) {
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(store.KeyCount(), 0u);
  const std::vector<KeyCost> invalid = {{"a", -1}, {"b", -2}};
  std::vector<absl::StatusOr<Decision>> refused(2);
  store.DecideBatch(limit, invalid, At(kEpoch), refused);
  EXPECT_EQ(refused[0].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused[1].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Stats().limits, 0u);
}

TEST(DecideBatchTest, LongBatchesAndRefusedLimits) {
  MemoryStore store;
  const Limit limit = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 2, .period = 1h});
  std::vector<std::string> keys;
  std::vector<KeyCost> requests;
  for (int i = 0; i < 1000; ++i) {
    keys.push_back(fmt::format("k{}", i % 400));
  }
  for (const std::string& key : keys) {
    requests.push_back({key, 1});
  }
  std::vector<absl::StatusOr<Decision>> out(requests.size());
  store.DecideBatch(limit, requests, At(kEpoch), out);
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(out[i].ok()) << out[i].status();
    EXPECT_EQ(out[i]->allowed, i < 800) << i;  // Each key's third request is denied.
  }
  const Limit too_big =
      MustLimit({.algorithm = Algorithm::kSlidingLog, .limit = 1'000'000, .period = 1h});
  store.DecideBatch(too_big, std::span(requests).first(3), At(kEpoch), std::span(out).first(3));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace sluice
