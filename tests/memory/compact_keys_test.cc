// Compact keys (MemoryStoreOptions::compact_keys): tables of fingerprints decide exactly as
// tables of keys, reclaim and bound their keys as they do, refuse snapshots, and, when two keys
// share a fingerprint, deny more but never admit a key past its own limit.

#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "src/memory/eviction.h"
#include "src/memory/fingerprint.h"
#include "src/memory/table.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

class CompactKeysTest : public ::testing::TestWithParam<Algorithm> {};

// A random trace on 2,000 keys asked often and 20,000 asked so seldom that they reset between
// their requests (so tables reclaim as they near growth), with costs 0 to 3: every answer of
// the compact store is the ordinary store's. The clock runs forward only: each store drops a
// key that has reset when a new key passes it, and which keys a new key passes follows the
// table's layout, by fingerprint in one and by key in the other; after a step back to before a
// dropped key's reset, the store that dropped it decides that key as new and the other does
// not (1 run in 60 had one, under a fingerprint secret drawn per run; library.md, "Bounded
// memory", says what a step back does to a dropped key).
TEST_P(CompactKeysTest, DecidesAsAStoreThatKeepsKeys) {
  const Limit limit = MustLimit({.algorithm = GetParam(), .limit = 4, .period = 1s, .buckets = 4});
  MemoryStore keys;
  MemoryStore compact({.compact_keys = true});
  std::mt19937_64 random(testing::Seed(31));
  int64_t t = kEpoch;
  int admitted = 0;
  for (int step = 0; step < 100'000; ++step) {
    t += static_cast<int64_t>(random() % 200);
    const std::string key = random() % 2 == 0 ? fmt::format("hot-{}", random() % 2'000)
                                              : fmt::format("cold-{}", random() % 20'000);
    const auto cost = static_cast<int64_t>(random() % 4);
    const absl::StatusOr<Decision> expected = keys.Decide(limit, key, cost, At(t));
    const absl::StatusOr<Decision> got = compact.Decide(limit, key, cost, At(t));
    ASSERT_TRUE(expected.ok() && got.ok()) << expected.status() << got.status();
    ASSERT_EQ(*got, *expected) << "step " << step << " " << key;
    admitted += expected->allowed ? 1 : 0;
  }
  EXPECT_GT(admitted, 10'000);
  EXPECT_GT(compact.Stats().reclaimed, 0u) << "keys that reset were never dropped";
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, CompactKeysTest,
                         ::testing::ValuesIn(testing::AllAlgorithms()), testing::AlgorithmTestName);

// The bound holds as without compact keys (bound_test.cc): a flood of new keys that do not
// reset is refused, never frees a limited key, and new keys come back once the flood resets.
// The secret is fixed: the bound is kept per stripe of the key space (16 keys here), and which
// stripe a key falls in follows its fingerprint. With a secret drawn per run, the 500 new keys
// below sometimes put more than the 8 a new key looks at in one stripe, which is then refused
// (as the store promises when it finds no reset key); a fixed one keeps the test's keys where
// bound_test.cc's fixed hash keeps its own. (Found by make test under ASan.)
TEST(CompactKeysBoundTest, AFloodIsRefusedAndNeverFreesALimitedKey) {
  MemoryStore store(
      {.max_keys = 1000, .compact_keys = true, .compact_keys_secret_for_testing = 0x5eed});
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = 2, .period = 1h});
  ASSERT_TRUE(store.Decide(limit, "victim", 2, At(kEpoch))->allowed);
  int refused = 0;
  for (int k = 0; k < 5'000; ++k) {
    const absl::StatusOr<Decision> d =
        store.Decide(limit, fmt::format("flood-{}", k), 2, At(kEpoch + k));
    ASSERT_TRUE(d.ok() || d.status().code() == absl::StatusCode::kResourceExhausted) << d.status();
    refused += d.ok() ? 0 : 1;
    if (k % 100 == 0) {
      ASSERT_FALSE(store.Decide(limit, "victim", 1, At(kEpoch + k))->allowed) << k;
    }
  }
  EXPECT_GT(refused, 3'000);
  EXPECT_EQ(static_cast<uint64_t>(refused), store.Stats().refused);
  EXPECT_LE(store.KeyCount(), 1000u + 64u);
  // An hour on, every key has reset: new keys take their places (half the bound's worth, so
  // that no stripe of 16 keys is full of new ones).
  const int64_t later = kEpoch + 3'600'000'000 + 10'000;
  for (int k = 0; k < 500; ++k) {
    ASSERT_TRUE(store.Decide(limit, fmt::format("new-{}", k), 1, At(later))->allowed) << k;
  }
  EXPECT_LE(store.KeyCount(), 1000u + 64u);
  EXPECT_GE(store.Stats().reclaimed, 500u);
}

TEST(CompactKeysSnapshotTest, SavingAndLoadingAreRefused) {
  MemoryStore store({.compact_keys = true});
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = 2, .period = 1h});
  ASSERT_TRUE(store.Decide(limit, "alice", 1, At(kEpoch))->allowed);
  const std::string path =
      (std::filesystem::temp_directory_path() / fmt::format("compact-{}.snap", getpid())).string();
  const absl::Status saved = store.SaveSnapshot(path);
  EXPECT_EQ(saved.code(), absl::StatusCode::kFailedPrecondition) << saved;
  EXPECT_NE(saved.message().find("compact keys"), std::string::npos) << saved;
  EXPECT_FALSE(std::filesystem::exists(path));
  // A snapshot another store wrote is refused too, and nothing is loaded.
  MemoryStore plain;
  ASSERT_TRUE(plain.Decide(limit, "bob", 1, At(kEpoch))->allowed);
  ASSERT_TRUE(plain.SaveSnapshot(path).ok());
  EXPECT_EQ(store.LoadSnapshot(path, At(kEpoch)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.KeyCount(), 1u);
  std::filesystem::remove(path);
}

// Two keys forced to share a fingerprint (the table takes the fingerprint from the caller:
// HashedKey::hash) share one state.
class CollisionTest : public ::testing::Test {
 protected:
  const Limit limit_ = MustLimit({.algorithm = Algorithm::kGcra, .limit = 3, .period = 1min});
  internal::Budget budget_{0};
  const internal::Fingerprint fingerprint_ = internal::Fingerprint::Random();
  std::unique_ptr<internal::Table> table_ =
      internal::MakeTable(limit_, budget_, At(kEpoch), &fingerprint_);
  static constexpr uint64_t kShared = 0x123456789abcdefULL;

  Decision Decide(std::string_view key, int64_t cost, int64_t t) {
    Decision d;
    EXPECT_EQ(table_->Decide(key, kShared, cost, At(t), d, {}), internal::Table::Outcome::kDecided);
    return d;
  }
};

TEST_F(CollisionTest, DeniesSoonerNeverLater) {
  ASSERT_TRUE(table_->fingerprinted());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(Decide("alice", 1, kEpoch).allowed) << i;
  }
  // bob has made no request, but shares alice's state: denied (over-limited, not freed).
  EXPECT_FALSE(Decide("bob", 1, kEpoch).allowed);
  EXPECT_FALSE(Decide("alice", 1, kEpoch).allowed);
  EXPECT_EQ(table_->KeyCount(), 1u);
}

// On a random trace of two keys that share a state, what each key was admitted, decided again
// for that key alone by an ordinary store, is admitted whole: no key got past its own limit.
TEST_F(CollisionTest, EachKeyStaysWithinItsOwnLimit) {
  std::mt19937_64 random(testing::Seed(37));
  std::vector<std::pair<int64_t, int64_t>> admitted[2];  // (time, cost) per key.
  int64_t t = kEpoch;
  for (int step = 0; step < 20'000; ++step) {
    t += static_cast<int64_t>(random() % 2'000'000);
    const int who = static_cast<int>(random() % 2);
    const auto cost = static_cast<int64_t>(1 + random() % 3);
    if (Decide(who == 0 ? "alice" : "bob", cost, t).allowed) {
      admitted[who].emplace_back(t, cost);
    }
  }
  for (int who = 0; who < 2; ++who) {
    ASSERT_GT(admitted[who].size(), 100u);
    MemoryStore alone;
    for (const auto& [at, cost] : admitted[who]) {
      ASSERT_TRUE(alone.Decide(limit_, "k", cost, At(at))->allowed) << who << " at " << at;
    }
  }
}

}  // namespace
}  // namespace sluice
