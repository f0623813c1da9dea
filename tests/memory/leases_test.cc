// Concurrency limits in the memory store (Store::LeaseAll): capacity, expiry, release,
// renewal, all or nothing over several keys, bounded memory, and the errors.

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
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

class LeaseTest : public ::testing::Test {
 protected:
  // One key's decision for `op` on lease `id` at kEpoch + `at`.
  Decision On(std::string_view key, int64_t capacity, LeaseOp op, std::string_view id, Micros at,
              Micros ttl = 10s) {
    const LeasedKey leased{key, capacity};
    Decision each;
    absl::StatusOr<Decision> d =
        store_.LeaseAll(op, {&leased, 1}, id, ttl, At(kEpoch) + at, {&each, 1});
    EXPECT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d.value_or(Decision{}), each);
    return d.value_or(Decision{});
  }
  Decision Take(std::string_view id, Micros at, Micros ttl = 10s) {
    return On("jobs", 2, LeaseOp::kTake, id, at, ttl);
  }

  MemoryStore store_;
};

TEST_F(LeaseTest, HoldsUpToTheCapacityAndRefusesUntilTheEarliestLeaseExpires) {
  EXPECT_EQ(Take("a", 0s), (Decision{.allowed = true, .remaining = 1, .reset_after = Micros{10s}}));
  EXPECT_EQ(Take("b", 1s), (Decision{.allowed = true, .remaining = 0, .reset_after = Micros{10s}}));
  // Full: the next slot frees when a's lease ends, at 10 s.
  EXPECT_EQ(
      Take("c", 2s),
      (Decision{
          .allowed = false, .remaining = 0, .reset_after = Micros{9s}, .retry_after = Micros{8s}}));
  EXPECT_EQ(Take("c", 10s - 1us).retry_after, 1us);
  // A lease is held while now < its expiry: at 10 s a's slot is free.
  EXPECT_EQ(Take("c", 10s),
            (Decision{.allowed = true, .remaining = 0, .reset_after = Micros{10s}}));
}

TEST_F(LeaseTest, AReleaseFreesTheSlotAtOnceAndOnlyOnce) {
  Take("a", 0s);
  Take("b", 0s);
  EXPECT_FALSE(Take("c", 1s).allowed);
  EXPECT_EQ(On("jobs", 2, LeaseOp::kRelease, "a", 1s),
            (Decision{.allowed = true, .reset_after = Micros{9s}}));
  EXPECT_FALSE(On("jobs", 2, LeaseOp::kRelease, "a", 1s).allowed);  // Not held any more.
  EXPECT_FALSE(On("jobs", 2, LeaseOp::kRelease, "zed", 1s).allowed);
  EXPECT_TRUE(Take("c", 1s).allowed);
  // An expired lease is not held either: releasing it says so.
  EXPECT_FALSE(On("jobs", 2, LeaseOp::kRelease, "b", 10s).allowed);
}

TEST_F(LeaseTest, TakingAHeldLeaseAgainRenewsItEvenWhenFull) {
  Take("a", 0s);
  Take("b", 5s);
  const Decision renewed = Take("a", 8s);
  EXPECT_EQ(renewed, (Decision{.allowed = true, .remaining = 0, .reset_after = Micros{10s}}));
  // a now ends at 18 s and b at 15 s: at 12 s both are still held.
  EXPECT_EQ(Take("c", 12s).retry_after, 3s);
  EXPECT_TRUE(Take("c", 15s).allowed);
}

TEST_F(LeaseTest, AQueryTakesNothing) {
  Take("a", 0s);
  EXPECT_EQ(On("jobs", 2, LeaseOp::kQuery, "", 1s),
            (Decision{.allowed = true, .remaining = 1, .reset_after = Micros{9s}}));
  EXPECT_EQ(On("jobs", 2, LeaseOp::kQuery, "b", 1s).remaining, 1);
  Take("b", 1s);
  EXPECT_EQ(On("jobs", 2, LeaseOp::kQuery, "c", 2s).retry_after, 8s);
  EXPECT_TRUE(On("jobs", 2, LeaseOp::kQuery, "a", 2s).allowed);  // a holds one.
}

TEST_F(LeaseTest, SeveralKeysAreTakenAllOrNothingAndReleasedWhereHeld) {
  const std::vector<LeasedKey> both = {{"user:alice", 1}, {"global", 3}};
  std::vector<Decision> each(2);
  ASSERT_TRUE(
      store_.LeaseAll(LeaseOp::kTake, both, "first", 10s, At(kEpoch), each).value().allowed);
  // alice is full: the second lease takes nothing, global included.
  absl::StatusOr<Decision> second =
      store_.LeaseAll(LeaseOp::kTake, both, "second", 10s, At(kEpoch) + 1s, each);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->allowed);
  EXPECT_EQ(second->retry_after, 9s);
  EXPECT_FALSE(each[0].allowed);
  EXPECT_EQ(each[1], (Decision{.allowed = true, .remaining = 2, .reset_after = Micros{9s}}));
  EXPECT_EQ(On("global", 3, LeaseOp::kQuery, "", 1s).remaining, 2);

  // A release gives back what is held, even where another key no longer holds it.
  On("user:alice", 1, LeaseOp::kRelease, "first", 2s);
  absl::StatusOr<Decision> release =
      store_.LeaseAll(LeaseOp::kRelease, both, "first", 0s, At(kEpoch) + 2s, each);
  ASSERT_TRUE(release.ok());
  EXPECT_FALSE(release->allowed);  // Not held on every key.
  EXPECT_FALSE(each[0].allowed);
  EXPECT_TRUE(each[1].allowed);
  EXPECT_EQ(On("global", 3, LeaseOp::kQuery, "", 2s).remaining, 3);
  EXPECT_EQ(store_.LeasedKeyCount(), 0u);  // Nothing held, nothing kept.
}

TEST_F(LeaseTest, KeysWhoseLeasesExpiredUnseenAreSweptAway) {
  for (int i = 0; i < 1000; ++i) {
    On(fmt::format("early{}", i), 1, LeaseOp::kTake, "x", 0s, 1s);
  }
  EXPECT_EQ(store_.LeasedKeyCount(), 1000u);
  // Nobody asks about those keys again; new ones come once they have expired. Three times as
  // many: every shard (keys spread by a hash seeded per process) then more than doubles, and
  // is swept.
  for (int i = 0; i < 3000; ++i) {
    On(fmt::format("late{}", i), 1, LeaseOp::kTake, "x", 2s, 1s);
  }
  EXPECT_EQ(store_.LeasedKeyCount(), 3000u);  // The late ones, all held; no early one.
}

TEST_F(LeaseTest, RefusesWhatIsMalformedNamingTheProblem) {
  auto error = [&](LeaseOp op, std::vector<LeasedKey> keys, std::string_view id, Micros ttl) {
    std::vector<Decision> each(keys.size());
    absl::StatusOr<Decision> d = store_.LeaseAll(op, keys, id, ttl, At(kEpoch), each);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(d.status().message());
  };
  EXPECT_EQ(error(LeaseOp::kTake, {}, "a", 1s), "a lease needs at least one key");
  EXPECT_EQ(error(LeaseOp::kTake, {{"k", 0}}, "a", 1s), "concurrency must be 1 to 10000, not 0");
  EXPECT_EQ(error(LeaseOp::kTake, {{"k", 10'001}}, "a", 1s),
            "concurrency must be 1 to 10000, not 10001");
  EXPECT_EQ(error(LeaseOp::kTake, {{"k", 1}}, "a", 0s),
            "a lease's time to live must be 1 us to 86400000000 us, not 0");
  EXPECT_EQ(error(LeaseOp::kTake, {{"k", 1}}, "a", 25h),
            "a lease's time to live must be 1 us to 86400000000 us, not 90000000000");
  EXPECT_EQ(error(LeaseOp::kTake, {{"k", 1}}, "", 1s), "a lease id must be 1 to 64 bytes, not 0");
  EXPECT_EQ(error(LeaseOp::kRelease, {{"k", 1}}, std::string(65, 'x'), 1s),
            "a lease id must be 1 to 64 bytes, not 65");
  EXPECT_EQ(error(LeaseOp::kTake, {{"k", 1}}, "a b", 1s),
            "a lease id must be printable ASCII without spaces");
  EXPECT_EQ(error(LeaseOp::kTake, {{"k", 1}, {"k", 2}}, "a", 1s),
            "the lease key 'k' appears twice");
  EXPECT_EQ(store_.LeasedKeyCount(), 0u);
}

// Issue 19, finding 4: anyone who can name keys could take a lease on each, without bound.
// With max_leases, a flood of new keys holds at most that many leases; the rest are refused,
// counted; renewing and releasing still work, and expired leases make room again.
TEST(LeaseBoundTest, AFloodOfKeysHoldsAtMostMaxLeases) {
  MemoryStore store({.max_leases = 100});
  auto take = [&](const std::string& key, std::string_view id, Micros at) {
    const LeasedKey leased{key, 5};
    Decision each;
    return store.LeaseAll(LeaseOp::kTake, {&leased, 1}, id, 10s, At(kEpoch) + at, {&each, 1});
  };
  int refused = 0;
  for (int i = 0; i < 1000; ++i) {
    const absl::StatusOr<Decision> d = take(fmt::format("k{}", i), "x", 0s);
    if (d.ok()) {
      ASSERT_TRUE(d->allowed);
    } else {
      ASSERT_EQ(d.status().code(), absl::StatusCode::kResourceExhausted) << d.status();
      EXPECT_EQ(d.status().message(),
                "the memory store holds 100 leases (--max-leases), none expired; refusing a new "
                "one");
      ++refused;
    }
  }
  EXPECT_EQ(refused, 900);
  EXPECT_EQ(store.Stats().leases, 100u);
  EXPECT_EQ(store.Stats().leases_refused, 900u);
  EXPECT_LE(store.LeasedKeyCount(), 100u);
  // Full: a held lease is renewed; a second lease on a held key is refused.
  EXPECT_TRUE(take("k0", "x", 1s).ok());
  EXPECT_FALSE(take("k0", "y", 1s).ok());
  // A release makes room for one.
  const LeasedKey k0{"k0", 5};
  Decision each;
  ASSERT_TRUE(
      store.LeaseAll(LeaseOp::kRelease, {&k0, 1}, "x", 0s, At(kEpoch) + 1s, {&each, 1})->allowed);
  EXPECT_EQ(store.Stats().leases, 99u);
  EXPECT_TRUE(take("new", "x", 1s).ok());
  EXPECT_FALSE(take("newer", "x", 1s).ok());
  // Once the leases have expired (k0's renewal at 11 s), a full sweep makes room for others.
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(take(fmt::format("late{}", i), "x", 12s).ok()) << i;
  }
  EXPECT_EQ(store.Stats().leases, 100u);
}

}  // namespace
}  // namespace sluice
