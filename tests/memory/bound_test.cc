// The memory store's bound (MemoryStoreOptions::max_keys) against an attacker: what a flood of
// new keys can and cannot do. The policy is in MemoryStore's comment ("Bounded memory"): only
// a key whose state has reset (it decides as a new key does) is ever dropped; a new key that
// finds the store full and no reset key within its search is refused, ResourceExhausted.

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

constexpr int64_t kHour = 3'600'000'000;

// Finding 2 of issue 19: every flood key is driven over its own limit, so each "has been
// denied" as the victim has; the victim must still be denied until its window ends, then
// get exactly its limit again.
TEST(MemoryStoreBoundTest, AFloodOfDeniedKeysNeverFreesALimitedVictim) {
  MemoryStore store({.max_keys = 1000});
  const Limit limit = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 5, .period = 1h});
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(store.Decide(limit, "victim", 1, At(kEpoch))->allowed);
  }
  const Decision denied = *store.Decide(limit, "victim", 1, At(kEpoch));
  ASSERT_FALSE(denied.allowed);
  const int64_t reset = kEpoch + denied.reset_after.count();  // The end of its window.
  int victim_admitted = 0;
  int64_t t = kEpoch;
  for (int k = 0; k < 5'000; ++k) {
    t += 1'000;  // 5 s in all, well inside the victim's hour.
    const std::string key = fmt::format("flood-{}", k);
    for (int i = 0; i < 6; ++i) {
      const absl::StatusOr<Decision> d = store.Decide(limit, key, 1, At(t));
      // Full, a new key is refused; never a crash, never another error.
      ASSERT_TRUE(d.ok() || d.status().code() == absl::StatusCode::kResourceExhausted)
          << d.status();
    }
    if (k % 30 == 0) {
      const absl::StatusOr<Decision> d = store.Decide(limit, "victim", 1, At(t));
      ASSERT_TRUE(d.ok()) << d.status();  // A stored key is always decided.
      victim_admitted += d->allowed ? 1 : 0;
    }
  }
  EXPECT_EQ(victim_admitted, 0) << "during the flood";
  for (int64_t at = t; at < reset; at += kHour / 100) {
    EXPECT_FALSE(store.Decide(limit, "victim", 1, At(at))->allowed) << "after, at " << at;
  }
  EXPECT_GT(store.Stats().refused, 0u);
  EXPECT_LE(store.KeyCount(), 1000u + 64u);
  // Its window over, the victim gets its limit again, and no more.
  int admitted = 0;
  for (int i = 0; i < 10; ++i) {
    admitted += store.Decide(limit, "victim", 1, At(reset))->allowed ? 1 : 0;
  }
  EXPECT_EQ(admitted, 5);
}

// The same through DecideAll: a request over two limits is refused whole when one of its new
// keys finds no room, so nothing is charged on the other.
TEST(MemoryStoreBoundTest, ARequestWhoseNewKeyFindsNoRoomIsRefusedWhole) {
  MemoryStore store({.max_keys = 64});  // One key per shard index.
  const Limit hourly = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 5, .period = 1h});
  const Limit daily = MustLimit({.algorithm = Algorithm::kGcra, .limit = 50, .period = 24h});
  ASSERT_TRUE(store.Decide(daily, "old", 1, At(kEpoch))->allowed);
  for (int k = 0; k < 2'000; ++k) {
    (void)store.Decide(hourly, fmt::format("fill-{}", k), 1, At(kEpoch));
  }
  int refused = 0;
  for (int k = 0; k < 200; ++k) {
    const std::string key = fmt::format("new-{}", k);  // LimitedKey holds a view of it.
    const LimitedKey both[] = {{&hourly, key}, {&daily, "old"}};
    std::vector<Decision> each(2);
    const absl::StatusOr<Decision> d = store.DecideAll(both, 1, At(kEpoch + 1), each);
    if (!d.ok()) {
      ASSERT_EQ(d.status().code(), absl::StatusCode::kResourceExhausted) << d.status();
      ++refused;
    } else {
      ASSERT_TRUE(d->allowed);
    }
  }
  ASSERT_GT(refused, 0);
  // "old" was charged once per admitted request, never for a refused one.
  const Decision old = *store.Decide(daily, "old", 0, At(kEpoch + 1));
  EXPECT_EQ(old.remaining, 50 - 1 - (200 - refused));
}

// One request's new keys count against the bound together: 200 new keys in one request on a
// store of 64 keys (one per shard index) are refused whole, not all inserted; requests of a few
// new keys each never take the store past its bound.
TEST(MemoryStoreBoundTest, ARequestsOwnNewKeysCountTogetherAgainstTheBound) {
  MemoryStore store({.max_keys = 64});
  const Limit hourly = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 5, .period = 1h});
  std::vector<std::string> names;
  for (int k = 0; k < 200; ++k) {
    names.push_back(fmt::format("new-{}", k));
  }
  const auto ask = [&](size_t from, size_t n) {
    std::vector<LimitedKey> keys;
    for (size_t k = from; k < from + n; ++k) {
      keys.push_back({&hourly, names[k]});
    }
    std::vector<Decision> each(n);
    return store.DecideAll(keys, 1, At(kEpoch), each);
  };
  const absl::StatusOr<Decision> all = ask(0, 200);
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.status().code(), absl::StatusCode::kResourceExhausted) << all.status();
  EXPECT_EQ(store.KeyCount(), 0u);
  for (size_t from = 0; from + 4 <= names.size(); from += 4) {
    const absl::StatusOr<Decision> d = ask(from, 4);
    ASSERT_TRUE(d.ok() || d.status().code() == absl::StatusCode::kResourceExhausted) << d.status();
    ASSERT_LE(store.KeyCount(), 64u) << "after keys " << from << " to " << from + 3;
  }
  EXPECT_GT(store.KeyCount(), 0u);
}

// Reset keys make room: once the flood's windows are over, new keys are admitted again and
// the store stays within its bound. (Half the bound's keys: the bound is kept per shard index,
// 100 keys each here, and keys do not spread over them exactly evenly.)
TEST(MemoryStoreBoundTest, KeysThatHaveResetMakeRoomForNewOnes) {
  MemoryStore store({.max_keys = 6400});
  const Limit limit = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 5, .period = 1s});
  for (int k = 0; k < 20'000; ++k) {
    (void)store.Decide(limit, fmt::format("first-{}", k), 1, At(kEpoch));
  }
  EXPECT_GT(store.Stats().refused, 0u);
  const uint64_t refused = store.Stats().refused;
  for (int k = 0; k < 3'200; ++k) {
    // A second later every first key has reset: each new key finds room.
    const absl::StatusOr<Decision> d =
        store.Decide(limit, fmt::format("second-{}", k), 1, At(kEpoch + 1'000'000 + k * 200));
    ASSERT_TRUE(d.ok() && d->allowed) << k << ": " << d.status();
  }
  EXPECT_EQ(store.Stats().refused, refused);
  EXPECT_LE(store.KeyCount(), 6400u + 64u);
}

TEST(MemoryStoreBoundTest, HoldsAtMostMaxKeysPlusAKeyPerShard) {
  MemoryStore store({.max_keys = 500});
  const Limit limit = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 5, .period = 1h});
  size_t refused = 0;
  for (int k = 0; k < 20'000; ++k) {
    const absl::StatusOr<Decision> d = store.Decide(limit, fmt::format("k{}", k), 1, At(kEpoch));
    refused += d.ok() ? 0 : 1;
  }
  EXPECT_LE(store.KeyCount(), 500u + 64u);
  EXPECT_GE(store.KeyCount(), 500u);
  EXPECT_EQ(store.Stats().refused, refused);
  EXPECT_EQ(refused, 20'000 - store.KeyCount());
}

TEST(MemoryStoreBoundTest, ResetKeysAreReclaimedSoMemoryStaysFlatWithoutABound) {
  MemoryStore store;  // No bound: reclaiming still keeps the tables from growing.
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = 1, .period = 1s});
  // 100 rounds of 1,000 new keys, 2 s apart: only the latest round holds state.
  for (int round = 0; round < 100; ++round) {
    for (int k = 0; k < 1000; ++k) {
      ASSERT_TRUE(
          store.Decide(limit, fmt::format("r{}-k{}", round, k), 1, At(kEpoch + round * 2'000'000))
              ->allowed);
    }
  }
  const MemoryStoreStats stats = store.Stats();
  EXPECT_EQ(stats.refused, 0u);
  EXPECT_LT(store.KeyCount(), 10'000u) << "100,000 keys seen, 1,000 holding state";
  EXPECT_EQ(store.KeyCount() + stats.reclaimed, 100'000u);
  EXPECT_EQ(stats.keys, store.KeyCount());
  // The latest round still holds state: none of it was reclaimed.
  for (int k = 0; k < 1000; ++k) {
    ASSERT_FALSE(
        store.Decide(limit, fmt::format("r99-k{}", k), 1, At(kEpoch + 198'000'000))->allowed);
  }
}

// One limit fills the store with keys that reset within a second; a login limit then sees an
// attacker retrying among a stream of new users. The new users' keys find the first limit's
// reset keys (in other tables) to drop, and the attacker's key is never dropped.
TEST(MemoryStoreBoundTest, TheSearchLooksAcrossLimitsAndALimitedKeyKeepsItsState) {
  MemoryStore store({.max_keys = 6400});
  const Limit api = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 100, .period = 1s});
  const Limit login = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 3, .period = 1h});
  for (int k = 0; k < 10'000; ++k) {
    (void)store.Decide(api, fmt::format("client-{}", k), 1, At(kEpoch));  // Full: some refused.
  }
  const uint64_t refused_filling = store.Stats().refused;
  ASSERT_GT(refused_filling, 0u);
  int attacker_admitted = 0;
  for (int round = 0; round < 10; ++round) {
    const int64_t t = kEpoch + 1'000'000 + round;  // The api keys have reset.
    for (int attempt = 0; attempt < 5; ++attempt) {
      attacker_admitted += store.Decide(login, "attacker", 1, At(t))->allowed ? 1 : 0;
    }
    for (int u = 0; u < 200; ++u) {
      const absl::StatusOr<Decision> d =
          store.Decide(login, fmt::format("user-{}-{}", round, u), 1, At(t));
      ASSERT_TRUE(d.ok() && d->allowed) << d.status();
    }
  }
  EXPECT_EQ(attacker_admitted, 3);
  EXPECT_EQ(store.Stats().refused, refused_filling);
  EXPECT_LE(store.KeyCount(), 6400u + 64u);
}

TEST(MemoryStoreBoundTest, AKeyBeingLimitedOutlivesAFloodOfNewKeys) {
  MemoryStore store({.max_keys = 1000});
  const Limit limit = MustLimit({.algorithm = Algorithm::kFixedWindow, .limit = 1, .period = 1h});
  const Limit per_user = MustLimit({.algorithm = Algorithm::kGcra, .limit = 2, .period = 1h});
  ASSERT_TRUE(store.Decide(limit, "victim", 1, At(kEpoch))->allowed);
  ASSERT_FALSE(store.Decide(limit, "victim", 1, At(kEpoch))->allowed);
  const LimitedKey both[] = {{&limit, "pair"}, {&per_user, "pair"}};
  std::vector<Decision> each(2);
  ASSERT_TRUE(store.DecideAll(both, 1, At(kEpoch), each)->allowed);
  ASSERT_FALSE(store.DecideAll(both, 1, At(kEpoch), each)->allowed);  // Denied all or nothing.
  for (int k = 0; k < 50'000; ++k) {
    (void)store.Decide(limit, fmt::format("spray-{}", k), 1, At(kEpoch + 1));
    if (k % 5'000 == 0) {
      ASSERT_FALSE(store.Decide(limit, "victim", 1, At(kEpoch + 1))->allowed) << "during, " << k;
    }
  }
  EXPECT_GT(store.Stats().refused, 40'000u);
  EXPECT_FALSE(store.Decide(limit, "victim", 1, At(kEpoch + 2))->allowed);
  EXPECT_FALSE(store.Decide(limit, "pair", 1, At(kEpoch + 2))->allowed);
  EXPECT_FALSE(store.DecideAll(both, 1, At(kEpoch + 2), each)->allowed);
}

}  // namespace
}  // namespace sluice
