// RedisStore on a 3-master cluster with requests whose limits (or leases) lie in several
// slots (src/redis/multislot.h): charged slot by slot, given back when a later slot denies.
// Sequential traces decide as the memory store does, figure for figure; threads racing on
// such requests never admit more than a limit; a slot that cannot be reached meets the
// failure policy.

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "sluice/redis_store.h"
#include "src/redis/keys.h"
#include "tests/redis/cluster_fixture.h"
#include "tests/redis/fixtures.h"
#include "tests/testing/random.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using testing::MustStore;
using testing::RedisClusterTest;
using namespace std::chrono_literals;

class MultiSlotTest : public RedisClusterTest {
 protected:
  // `count` keys named `stem`N whose Redis keys under `limit` are each in a slot of its own,
  // between `first` and `last`.
  static std::vector<std::string> KeysApart(const RedisStore& redis, const Limit& limit,
                                            const std::string& stem, int count, int first = 0,
                                            int last = internal::kSlotCount - 1) {
    std::vector<std::string> keys;
    std::set<int> slots;
    for (int i = 0; static_cast<int>(keys.size()) < count; ++i) {
      std::string key = stem + std::to_string(i);
      const int slot = internal::HashSlot(redis.RedisKey(limit, key));
      if (slot >= first && slot <= last && slots.insert(slot).second) {
        keys.push_back(std::move(key));
      }
    }
    return keys;
  }
};

// Every algorithm, in requests of two or three limits on keys in different slots (user, ip,
// and sometimes a pool), costs 0 to 3, against the memory store: the same decision and the
// same figures on every limit, denials included (given back, or asked a dry run).
TEST_F(MultiSlotTest, DecidesAsTheMemoryStoreAcrossSlots) {
  std::unique_ptr<RedisStore> redis = MustStore(ClusterOptions());
  MemoryStore memory;
  const std::vector<Limit> limits = {
      MustLimit({.limit = 4, .period = 1s}),
      MustLimit({.algorithm = Algorithm::kSlidingWindow, .limit = 5, .period = 2s}),
      MustLimit({.algorithm = Algorithm::kSlidingLog, .limit = 3, .period = 1s}),
      MustLimit({.algorithm = Algorithm::kSlidingBuckets, .limit = 6, .period = 2s, .buckets = 4}),
      MustLimit({.algorithm = Algorithm::kTokenBucket, .limit = 3, .period = 1s, .burst = 4}),
      MustLimit({.algorithm = Algorithm::kGcra, .limit = 2, .period = 1s, .burst = 3}),
      MustLimit({.algorithm = Algorithm::kLeakyBucket, .limit = 3, .period = 1s, .burst = 3}),
  };
  testing::Random rnd(testing::Seed(29));
  int64_t t = kEpoch;
  int denied = 0;
  int split = 0;
  for (int i = 0; i < 1500; ++i) {
    t += rnd.Between(0, 150'000);
    const std::string user = "user" + std::to_string(rnd.Between(0, 5));
    const std::string ip = "10.0.0." + std::to_string(rnd.Between(0, 5));
    const std::string pool = "pool";
    const size_t a = static_cast<size_t>(rnd.Between(0, 6));
    const size_t b = static_cast<size_t>(rnd.Between(0, 6));
    std::vector<LimitedKey> requests = {{&limits[a], user}, {&limits[b], ip}};
    if (rnd.OneIn(3)) {
      requests.push_back({&limits[(a + b) % limits.size()], pool});
    }
    std::set<int> slots;
    for (const LimitedKey& r : requests) {
      slots.insert(internal::HashSlot(redis->RedisKey(*r.limit, r.key)));
    }
    split += slots.size() > 1 ? 1 : 0;
    const int64_t cost = rnd.OneIn(8) ? 0 : rnd.Between(1, 3);
    std::vector<Decision> got_each(requests.size());
    std::vector<Decision> want_each(requests.size());
    absl::StatusOr<Decision> got = redis->DecideAll(requests, cost, At(t), got_each);
    absl::StatusOr<Decision> want = memory.DecideAll(requests, cost, At(t), want_each);
    ASSERT_TRUE(got.ok() && want.ok()) << got.status() << want.status();
    ASSERT_EQ(*got, *want) << "step " << i << " " << user << " " << ip << " cost " << cost;
    ASSERT_EQ(got_each, want_each) << "step " << i;
    denied += got->allowed ? 0 : 1;
  }
  EXPECT_GT(split, 1000);  // Most requests spanned several slots,
  EXPECT_GT(denied, 100);  // and many were denied, by one slot or another.
  const RedisStoreStats stats = redis->Stats();
  EXPECT_EQ(stats.failures, 0u);
  EXPECT_GT(stats.split_requests, 1000u);
  EXPECT_GT(stats.give_backs, 0u);
  EXPECT_EQ(stats.give_backs_failed, 0u);
}

// Leases on two or three keys in different slots: takes (each with a fresh id, as sluiced
// makes them), releases and queries, against the memory store.
TEST_F(MultiSlotTest, LeasesAcrossSlotsAsTheMemoryStore) {
  std::unique_ptr<RedisStore> redis = MustStore(ClusterOptions());
  MemoryStore memory;
  testing::Random rnd(testing::Seed(31));
  int64_t t = kEpoch;
  std::vector<std::string> taken;
  int refused = 0;
  for (int i = 0; i < 800; ++i) {
    t += rnd.Between(0, 300'000);
    const std::string job = "{job" + std::to_string(rnd.Between(0, 2)) + "}";
    const std::string host = "{host" + std::to_string(rnd.Between(0, 2)) + "}";
    std::vector<LeasedKey> keys = {{job, 2}, {host, 3}};
    if (rnd.OneIn(3)) {
      keys.push_back({"{tenant}", 4});
    }
    LeaseOp op = LeaseOp::kTake;
    std::string id = "id" + std::to_string(i);
    if (!taken.empty() && rnd.OneIn(3)) {
      op = LeaseOp::kRelease;
      id = taken[static_cast<size_t>(rnd.Between(0, static_cast<int64_t>(taken.size()) - 1))];
    } else if (rnd.OneIn(6)) {
      op = LeaseOp::kQuery;
    }
    std::vector<Decision> got_each(keys.size());
    std::vector<Decision> want_each(keys.size());
    absl::StatusOr<Decision> got = redis->LeaseAll(op, keys, id, 1s, At(t), got_each);
    absl::StatusOr<Decision> want = memory.LeaseAll(op, keys, id, 1s, At(t), want_each);
    ASSERT_TRUE(got.ok() && want.ok()) << got.status() << want.status();
    ASSERT_EQ(*got, *want) << "step " << i << " op " << static_cast<int>(op);
    ASSERT_EQ(got_each, want_each) << "step " << i << " op " << static_cast<int>(op);
    if (op == LeaseOp::kTake && got->allowed) {
      taken.push_back(id);
    }
    refused += op == LeaseOp::kTake && !got->allowed ? 1 : 0;
  }
  EXPECT_GT(refused, 20);
  EXPECT_GT(taken.size(), 100u);
}

// Threads race on requests over a user key and an ip key at one frozen instant, the users'
// slots before the ips' (so a user is charged, then given back when its ip denies): no key
// admits more than its limit, and every key's count in Redis is exactly the admissions that
// named it (each give-back took back all its charge).
TEST_F(MultiSlotTest, RacingThreadsNeverAdmitMoreThanALimit) {
  std::unique_ptr<RedisStore> redis = MustStore(ClusterOptions());
  constexpr int64_t kUserLimit = 40;
  constexpr int64_t kIpLimit = 25;
  const Limit per_user = MustLimit({.limit = kUserLimit, .period = 1h});
  const Limit per_ip = MustLimit({.limit = kIpLimit, .period = 1h});
  const std::vector<std::string> users = KeysApart(*redis, per_user, "racer", 3, 0, 8191);
  const std::vector<std::string> ips = KeysApart(*redis, per_ip, "192.168.1.", 3, 8192);
  const Timestamp now = At(kEpoch + 7'000'000);
  std::map<std::string, std::atomic<int64_t>> admitted;
  for (const auto& k : users) admitted[k] = 0;
  for (const auto& k : ips) admitted[k] = 0;
  std::atomic<int64_t> errors{0};
  std::vector<std::thread> threads;
  for (int n = 0; n < 6; ++n) {
    threads.emplace_back([&, n] {
      testing::Random rnd(1000 + static_cast<uint64_t>(n));
      for (int i = 0; i < 120; ++i) {
        const std::string& user = users[static_cast<size_t>(rnd.Between(0, 2))];
        const std::string& ip = ips[static_cast<size_t>(rnd.Between(0, 2))];
        const LimitedKey requests[] = {{&per_user, user}, {&per_ip, ip}};
        Decision each[2];
        absl::StatusOr<Decision> d = redis->DecideAll(requests, 1, now, each);
        if (!d.ok()) {
          ++errors;
        } else if (d->allowed) {
          ++admitted[user];
          ++admitted[ip];
        }
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  EXPECT_EQ(errors.load(), 0);
  int64_t total = 0;
  for (const auto& [key, count] : admitted) {
    const bool is_user = std::find(users.begin(), users.end(), key) != users.end();
    const Limit& limit = is_user ? per_user : per_ip;
    EXPECT_LE(count.load(), limit.limit()) << key;
    absl::StatusOr<Decision> query = redis->Decide(limit, key, 0, now);
    ASSERT_TRUE(query.ok()) << query.status();
    EXPECT_EQ(query->remaining, limit.limit() - count.load()) << key;
    total += is_user ? count.load() : 0;
  }
  // The ips' 75 run out before the users' 120 (every ip is asked far more than 25 times, and
  // nothing after an ip's slot can give its charge back): the users' charges of the requests
  // the ips denied were given back.
  EXPECT_EQ(total, 3 * kIpLimit);
  EXPECT_GT(redis->Stats().give_backs, 0u);
  EXPECT_EQ(redis->Stats().give_backs_failed, 0u);
}

// A slot whose node is frozen: under `deny` the request fails with the timeout and what an
// earlier slot charged is given back; under `allow` it is admitted.
TEST_F(MultiSlotTest, ASlotThatCannotBeReachedMeetsTheFailurePolicy) {
  const Limit limit = MustLimit({.limit = 10, .period = 1h});
  std::unique_ptr<RedisStore> probe = MustStore(ClusterOptions());
  // Two keys on different nodes, the frozen one's slot after the other's.
  std::vector<std::string> keys = KeysApart(*probe, limit, "frozen", 40);
  std::string low, high;
  int high_node = -1;
  for (size_t i = 0; i < keys.size() && high_node < 0; ++i) {
    for (size_t j = 0; j < keys.size() && high_node < 0; ++j) {
      const int si = internal::HashSlot(probe->RedisKey(limit, keys[i]));
      const int sj = internal::HashSlot(probe->RedisKey(limit, keys[j]));
      if (si < sj && Owner(si) != Owner(sj)) {
        low = keys[i];
        high = keys[j];
        high_node = Owner(sj);
      }
    }
  }
  ASSERT_GE(high_node, 0);
  for (FailurePolicy policy : {FailurePolicy::kDeny, FailurePolicy::kAllow}) {
    RedisStoreOptions options = ClusterOptions();
    options.timeout = 300ms;
    options.on_failure = policy;
    std::unique_ptr<RedisStore> redis = MustStore(options);
    const Timestamp now = At(kEpoch + (policy == FailurePolicy::kDeny ? 1 : 2) * 3'600'000'000);
    const LimitedKey requests[] = {{&limit, low}, {&limit, high}};
    Decision each[2];
    ASSERT_TRUE(redis->DecideAll(requests, 1, now, each).ok());  // Connected, slots known.
    nodes_[high_node]->Pause();
    absl::StatusOr<Decision> d = redis->DecideAll(requests, 1, now, each);
    nodes_[high_node]->Resume();
    if (policy == FailurePolicy::kDeny) {
      EXPECT_TRUE(absl::IsDeadlineExceeded(d.status()) || absl::IsUnavailable(d.status()))
          << d.status();
    } else {
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_TRUE(d->allowed);
    }
    // The earlier slot kept the charge only when the request was admitted.
    absl::StatusOr<Decision> query = redis->Decide(limit, low, 0, now);
    for (int tries = 0; !query.ok() && tries < 20; ++tries) {
      query = redis->Decide(limit, low, 0, now);  // Reconnecting after the freeze.
    }
    ASSERT_TRUE(query.ok()) << query.status();
    EXPECT_EQ(query->remaining, policy == FailurePolicy::kDeny ? 9 : 8)
        << FailurePolicyName(policy);
  }
}

}  // namespace
}  // namespace sluice
