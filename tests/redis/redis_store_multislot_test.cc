// RedisStore on a 3-master cluster with requests whose limits (or leases) lie in several
// slots (src/redis/multislot.h): charged slot by slot, given back when a later slot denies.
// Sequential traces decide as the memory store does, figure for figure; threads racing on
// such requests never admit more than a limit; a slot that cannot be reached meets the
// failure policy. Settles and resets over several slots (src/redis/settle_calls.cc): the
// `once` claimed with the first limit's slot, replays refused from any store, a later slot
// that fails keeping its units.

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "sluice/redis_store.h"
#include "src/redis/call.h"
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

  // Two keys whose slots are on different nodes, `low`'s slot before `high`'s.
  struct TwoNodes {
    std::string low, high;
    int low_node = -1, high_node = -1;
  };
  static TwoNodes KeysOnTwoNodes(const RedisStore& redis, const Limit& limit) {
    const std::vector<std::string> keys = KeysApart(redis, limit, "node", 40);
    for (const std::string& a : keys) {
      for (const std::string& b : keys) {
        const int sa = internal::HashSlot(redis.RedisKey(limit, a));
        const int sb = internal::HashSlot(redis.RedisKey(limit, b));
        if (sa < sb && Owner(sa) != Owner(sb)) {
          return {a, b, Owner(sa), Owner(sb)};
        }
      }
    }
    return {};
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
// earlier slot charged is given back; under `allow` and `local` it is admitted, the earlier
// slot charged in Redis.
TEST_F(MultiSlotTest, ASlotThatCannotBeReachedMeetsTheFailurePolicy) {
  const Limit limit = MustLimit({.limit = 10, .period = 1h});
  std::unique_ptr<RedisStore> probe = MustStore(ClusterOptions());
  const auto [low, high, low_node, high_node] = KeysOnTwoNodes(*probe, limit);
  ASSERT_GE(high_node, 0);
  int64_t hour = 0;  // Each policy in a window of its own, later each time (time never runs
                     // backwards on a key: an earlier time is taken as the last one seen).
  for (FailurePolicy policy :
       {FailurePolicy::kDeny, FailurePolicy::kAllow, FailurePolicy::kLocal}) {
    RedisStoreOptions options = ClusterOptions();
    options.timeout = 2s;  // Met by a loaded machine; missed only by the frozen node.
    options.on_failure = policy;
    std::unique_ptr<RedisStore> redis = MustStore(options);
    const Timestamp now = At(kEpoch + ++hour * 3'600'000'000);
    const LimitedKey requests[] = {{&limit, low}, {&limit, high}};
    Decision each[2];
    // Connected, slots known: queries (cost 0, nothing charged) until Redis answers them.
    for (int tries = 0; tries < 30; ++tries) {
      const uint64_t failures = redis->Stats().failures;
      if (redis->DecideAll(requests, 0, now, each).ok() && redis->Stats().failures == failures) {
        break;
      }
    }
    nodes_[high_node]->Pause();
    absl::StatusOr<Decision> d = redis->DecideAll(requests, 1, now, each);
    nodes_[high_node]->Resume();
    if (policy == FailurePolicy::kDeny) {
      EXPECT_TRUE(absl::IsDeadlineExceeded(d.status()) || absl::IsUnavailable(d.status()))
          << d.status();
    } else {  // kAllow: the frozen slot counts as allowed; kLocal: decided in this process.
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_TRUE(d->allowed);
    }
    // The earlier slot kept the charge only when the request was admitted.
    absl::StatusOr<Decision> query = redis->Decide(limit, low, 0, now);
    for (int tries = 0; !query.ok() && tries < 20; ++tries) {
      query = redis->Decide(limit, low, 0, now);  // Reconnecting after the freeze.
    }
    ASSERT_TRUE(query.ok()) << query.status();
    // Under deny a give-back that missed its deadline (a loaded machine) keeps its unit.
    const int64_t kept = static_cast<int64_t>(redis->Stats().give_backs_failed);
    EXPECT_EQ(query->remaining, policy == FailurePolicy::kDeny ? 10 - kept : 9)
        << FailurePolicyName(policy);
  }
}

// A give-back whose node does not answer in time: the request is still answered (denied) within
// its timeouts, give_backs_failed counts it, and the earlier slot holds its units at most. Staged
// with frozen nodes: the later slot's node is frozen while the earlier slot is charged, then the
// earlier slot's node is frozen and the later one thawed, to deny.
TEST_F(MultiSlotTest, AGiveBackThatTimesOutIsCountedAndNeverAdmitsMore) {
  const Limit limit = MustLimit({.limit = 10, .period = 1h});
  RedisStoreOptions options = ClusterOptions();
  options.timeout = 10s;  // The earlier slot is charged well within it, even on a loaded machine.
  std::unique_ptr<RedisStore> redis = MustStore(options);
  const auto [low, high, low_node, high_node] = KeysOnTwoNodes(*redis, limit);
  ASSERT_GE(high_node, 0);
  const Timestamp now = At(kEpoch + 9 * 3'600'000'000);
  ASSERT_TRUE(redis->Decide(limit, high, 10, now)->allowed);  // The later slot is full.
  ASSERT_TRUE(redis->Decide(limit, low, 0, now).ok());        // Connected to both.
  const LimitedKey requests[] = {{&limit, low}, {&limit, high}};
  Decision each[2];
  std::promise<absl::StatusOr<Decision>> answered;
  nodes_[high_node]->Pause();
  redis->DecideAllAsync(requests, 1, now, each,
                        [&](absl::StatusOr<Decision> d) { answered.set_value(std::move(d)); });
  // Wait until the earlier slot's charge is in Redis (its count is 1).
  testing::Client client(nodes_[low_node]->port());
  const std::string low_key = redis->RedisKey(limit, low);
  bool charged = false;
  for (int tries = 0; tries < 4000 && !charged; ++tries) {  // Up to 8 s.
    testing::Reply value = client.Run({"GET", low_key});
    charged = value && value->type == REDIS_REPLY_STRING && std::string(value->str).ends_with(" 1");
    std::this_thread::sleep_for(2ms);
  }
  nodes_[low_node]->Pause();
  nodes_[high_node]->Resume();
  ASSERT_TRUE(charged) << "the earlier slot was never charged";
  absl::StatusOr<Decision> d = answered.get_future().get();
  nodes_[low_node]->Resume();
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE(d->allowed);
  EXPECT_EQ(redis->Stats().give_backs_failed, 1u);
  absl::StatusOr<Decision> query = redis->Decide(limit, low, 0, now);
  for (int tries = 0; !query.ok() && tries < 20; ++tries) {
    query = redis->Decide(limit, low, 0, now);  // Reconnecting after the freeze.
  }
  ASSERT_TRUE(query.ok()) << query.status();
  // Still charged (fewer admitted, never more), or given back after all: the command had been
  // sent, and the node ran it when it woke.
  EXPECT_TRUE(query->remaining == 9 || query->remaining == 10) << query->remaining;
}

// A charge over three slots, settled: each slot gives back or charges past its limit, the
// claim in the first limit's slot; a replay from this store or another fails and changes no
// slot; a reset clears every slot.
TEST_F(MultiSlotTest, ChargesSettlesAndResetsAcrossSlots) {
  AwaitClusterOk();  // A test before may have frozen a node past the node timeout.
  std::unique_ptr<RedisStore> a = MustStore(ClusterOptions());
  std::unique_ptr<RedisStore> b = MustStore(ClusterOptions());
  const Limit limit = MustLimit({.limit = 10, .period = 1h});
  const std::vector<std::string> keys = KeysApart(*a, limit, "settle", 3);
  const Timestamp now = At(kEpoch + 20 * 3'600'000'000);
  const LimitedKey requests[] = {{&limit, keys[0]}, {&limit, keys[1]}, {&limit, keys[2]}};
  Decision each[3];
  Charge charges[3];
  absl::StatusOr<Decision> d = a->ChargeAll(requests, 4, now, each, charges);
  ASSERT_TRUE(d.ok() && d->allowed) << d.status();
  for (const Charge& c : charges) {
    EXPECT_EQ(c.units, 4);
  }
  const Settlement settlements[] = {{.charge = charges[0], .units = 1},
                                    {.charge = charges[1], .units = 0},
                                    {.charge = charges[2], .units = 20, .max_debt = 5}};
  Settled settled[3];
  const Timestamp until = now + 60s;
  ASSERT_TRUE(a->SettleAll(requests, settlements, "multi", until, now, settled).ok());
  const int64_t remaining[] = {9, 10, 0};
  EXPECT_EQ(settled[0].given_back, 3);
  EXPECT_EQ(settled[1].given_back, 4);
  EXPECT_EQ(settled[2].charged, 11);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(settled[i].after.remaining, remaining[i]) << i;
  }
  const std::string first = a->RedisKey(limit, keys[0]);
  EXPECT_EQ(internal::HashSlot(internal::OnceKey("sluice:", first, "multi")),
            internal::HashSlot(first));
  for (RedisStore* store : {a.get(), b.get()}) {
    const absl::Status replay =
        store->SettleAll(requests, settlements, "multi", until, now, settled);
    EXPECT_TRUE(absl::IsAlreadyExists(replay)) << replay;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(store->Decide(limit, keys[i], 0, now)->remaining, remaining[i]) << i;
    }
  }
  ASSERT_TRUE(a->ResetAll(requests, now).ok());
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(b->Decide(limit, keys[i], 0, now)->remaining, 10) << i;
  }
}

// The first limit's slot settled, a later slot's node frozen: the settle answers the timeout,
// the first slot's refund is made, the later slot keeps its units (fewer admitted, never more)
// and its extra charge is counted lost.
TEST_F(MultiSlotTest, ALaterSlotThatFailsKeepsItsUnitsAndLosesItsExtra) {
  AwaitClusterOk();  // A test before may have frozen a node past the node timeout.
  const Limit limit = MustLimit({.limit = 10, .period = 1h});
  RedisStoreOptions options = ClusterOptions();
  options.timeout = 2s;  // Met by a loaded machine; missed only by the frozen node.
  std::unique_ptr<RedisStore> redis = MustStore(options);
  const auto [low, high, low_node, high_node] = KeysOnTwoNodes(*redis, limit);
  ASSERT_GE(high_node, 0);
  const Timestamp now = At(kEpoch + 21 * 3'600'000'000);
  const LimitedKey requests[] = {{&limit, low}, {&limit, high}};
  Decision each[2];
  Charge charges[2];
  for (int tries = 0; tries < 30 && charges[1].units == 0; ++tries) {  // Until Redis charges.
    absl::StatusOr<Decision> charged = redis->ChargeAll(requests, 4, now, each, charges);
    ASSERT_TRUE(charged.ok()) << charged.status();
  }
  ASSERT_EQ(charges[0].units, 4);
  ASSERT_EQ(charges[1].units, 4);
  const int64_t low_before = redis->Decide(limit, low, 0, now)->remaining;
  const Settlement settlements[] = {{.charge = charges[0], .units = 0},
                                    {.charge = charges[1], .units = 8, .max_debt = 0}};
  Settled settled[2];
  nodes_[high_node]->Pause();
  const absl::Status s = redis->SettleAll(requests, settlements, "later", now + 60s, now, settled);
  nodes_[high_node]->Resume();
  EXPECT_TRUE(absl::IsDeadlineExceeded(s) || absl::IsUnavailable(s)) << s;
  EXPECT_EQ(settled[0].given_back, 4);
  EXPECT_EQ(settled[1], Settled{});
  EXPECT_EQ(redis->Stats().settle_units_lost, 4u);
  EXPECT_EQ(redis->Decide(limit, low, 0, now)->remaining, low_before + 4);
  absl::StatusOr<Decision> query = redis->Decide(limit, high, 0, now);
  for (int tries = 0; !query.ok() && tries < 20; ++tries) {
    query = redis->Decide(limit, high, 0, now);  // Reconnecting after the freeze.
  }
  ASSERT_TRUE(query.ok()) << query.status();
  // Still 4 charged; or, had the node run the call when it woke, 8: never fewer than 4.
  EXPECT_TRUE(query->remaining == 6 || query->remaining == 2) << query->remaining;
}

}  // namespace
}  // namespace sluice
