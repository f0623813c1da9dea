// RedisStore shared: a fleet of 4 processes x 4 threads on one key of one redis-server, and a
// Redis Cluster of three masters the tests create, with a slot migrated during traffic.

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "sluice/memory_store.h"
#include "sluice/redis_store.h"
#include "tests/redis/cluster_fixture.h"
#include "tests/redis/fixtures.h"
#include "tests/testing/random.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using testing::MustStore;
using testing::RedisServer;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------------
// Exactness across processes: a fleet of 4 processes x 4 threads on one key.

struct Admission {
  int64_t window;     // Which window admitted it (fixed_window), or 0; kUnsure: see `from`.
  int64_t remaining;  // Its remaining: each admission in a window has its own.
  int64_t from = 0;   // When the window is unsure: it is one of from..to.
  int64_t to = 0;
};

// Runs `work` in `processes` child processes (each builds its own store and threads after the
// fork) and gathers what each admitted.
std::vector<Admission> InChildren(int processes,
                                  const std::function<std::vector<Admission>()>& work) {
  std::vector<std::pair<pid_t, int>> children;
  for (int i = 0; i < processes; ++i) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      const std::vector<Admission> admitted = work();
      const char* data = reinterpret_cast<const char*>(admitted.data());
      size_t left = admitted.size() * sizeof(Admission);
      while (left > 0) {
        const ssize_t n = write(fds[1], data, left);
        if (n <= 0) {
          _exit(1);
        }
        data += n;
        left -= static_cast<size_t>(n);
      }
      _exit(0);
    }
    close(fds[1]);
    children.emplace_back(pid, fds[0]);
  }
  std::vector<Admission> all;
  for (auto [pid, fd] : children) {
    std::string bytes;
    char buffer[65536];
    for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) {
      bytes.append(buffer, static_cast<size_t>(n));
    }
    close(fd);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const size_t count = bytes.size() / sizeof(Admission);
    const size_t at = all.size();
    all.resize(at + count);
    std::memcpy(all.data() + at, bytes.data(), count * sizeof(Admission));
  }
  return all;
}

// What `decide` saw: an admission, a denial (which ends a thread of a run at frozen time,
// since nothing comes back after it), or nothing to count (an error).
struct Seen {
  std::optional<Admission> admitted;
  bool denied = false;
};

// When a thread of Hammer stops: when `done` says so (the whole fleet), or at its first denial.
// The deadline is only a watchdog: a run's length never depends on how fast the machine is.
enum class Stop { kWhenDone, kWhenDenied };

// `threads` threads calling `decide` until they stop; the admissions they saw.
std::vector<Admission> Hammer(int threads, std::chrono::steady_clock::time_point until,
                              const std::function<Seen()>& decide, Stop stop,
                              const std::atomic<bool>* done = nullptr) {
  std::vector<std::vector<Admission>> each(static_cast<size_t>(threads));
  std::vector<std::thread> running;
  for (auto& admitted : each) {
    running.emplace_back([&] {
      while (std::chrono::steady_clock::now() < until &&
             !(done != nullptr && done->load(std::memory_order_relaxed))) {
        const Seen seen = decide();
        if (seen.admitted) {
          admitted.push_back(*seen.admitted);
        }
        if (seen.denied && stop == Stop::kWhenDenied) {
          return;
        }
      }
    });
  }
  std::vector<Admission> all;
  for (size_t i = 0; i < running.size(); ++i) {
    running[i].join();
    all.insert(all.end(), each[i].begin(), each[i].end());
  }
  return all;
}

// Which window a decision's reset_after points to, or kUnsure: Redis decided between `before`
// and `after` (this machine's clock, which Redis's is), so its window ends between
// before + reset_after and after + reset_after; rounded to the nearest window end, the two
// agree unless the call took more than half a window, and then either may be wrong.
constexpr int64_t kUnsure = -1;
constexpr int64_t kDenied = -1;  // An Admission's remaining, for a denial.

int64_t WallMicros() {
  return std::chrono::duration_cast<Micros>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(RedisFleetTest, FourProcessesOfFourThreadsAdmitExactlyTheLimitPerWindow) {
  RedisServer server;
  // Few per window, so that even a loaded machine fills windows (50 decisions a second), and
  // windows long enough that a decision is placed in its own unless its call takes 0.5 s.
  constexpr int64_t kLimit = 50;
  constexpr int64_t kPeriod = 1'000'000;  // 1 s windows on Redis's clock.
  const Limit limit = MustLimit({.limit = kLimit, .period = Micros{kPeriod}});
  // The fleet runs until some thread has seen denials in 4 windows it is sure of (so that
  // windows are filled and checked, however slow the machine); the deadline is only
  // a watchdog. `done` is shared by the children: anonymous shared memory, mapped before fork.
  void* shared = mmap(nullptr, sizeof(std::atomic<bool>), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto* done = new (shared) std::atomic<bool>(false);
  static_assert(std::atomic<bool>::is_always_lock_free);  // So it works across processes.
  const auto until = std::chrono::steady_clock::now() + 120s;
  const std::vector<Admission> seen = InChildren(4, [&] {
    RedisStoreOptions options = *ParseRedisUrl(server.url());
    options.timeout = 30s;  // A call that timed out after Redis admitted it would go uncounted.
    std::unique_ptr<RedisStore> redis = *RedisStore::Create(options);
    return Hammer(
        4, until,
        [&]() -> Seen {
          thread_local std::set<int64_t> denied_windows;
          const int64_t before = WallMicros();
          absl::StatusOr<Decision> d = redis->Decide(limit, "{fleet}", 1, Timestamp{});
          const int64_t after = WallMicros();
          if (!d.ok()) {
            return {};
          }
          const int64_t reset = d->reset_after.count();
          const int64_t window = (after + reset + kPeriod / 2) / kPeriod;
          const bool sure = (before + reset + kPeriod / 2) / kPeriod == window;
          if (!d->allowed && sure && denied_windows.insert(window).second &&
              denied_windows.size() >= 4) {
            done->store(true, std::memory_order_relaxed);
          }
          // Kept whether admitted or denied: a denial is what shows its window was filled.
          return {.admitted = Admission{.window = sure ? window : kUnsure,
                                        .remaining = d->allowed ? d->remaining : kDenied,
                                        .from = (before + reset + kPeriod / 2) / kPeriod,
                                        .to = window}};
        },
        Stop::kWhenDone, done);
  });
  munmap(shared, sizeof(std::atomic<bool>));
  std::map<int64_t, std::vector<int64_t>> by_window;
  std::set<int64_t> denied_in;
  std::set<int64_t> uncertain;  // Windows an unsure decision may belong to: not known exactly.
  for (const Admission& a : seen) {
    if (a.window == kUnsure) {
      for (int64_t w = a.from; w <= a.to; ++w) {
        uncertain.insert(w);
      }
    } else if (a.remaining == kDenied) {
      denied_in.insert(a.window);
    } else {
      by_window[a.window].push_back(a.remaining);
    }
  }
  ASSERT_GE(by_window.size(), 2u);
  int full = 0;
  for (auto& [window, remaining] : by_window) {
    std::sort(remaining.begin(), remaining.end());
    // Never more than the limit, and each admission its own place in the window.
    EXPECT_LE(static_cast<int64_t>(remaining.size()), kLimit) << "window " << window;
    EXPECT_EQ(std::adjacent_find(remaining.begin(), remaining.end()), remaining.end());
    // A window that denied a request had admitted exactly the limit, when every decision
    // that may be in it is known to be (on an idle machine the fleet fills every window it
    // reaches; a loaded one fills fewer).
    if (denied_in.contains(window) && !uncertain.contains(window)) {
      EXPECT_EQ(static_cast<int64_t>(remaining.size()), kLimit) << "window " << window;
      ++full;
    }
  }
  EXPECT_GE(full, 1) << "no window was both filled and certain: nothing exact was checked";
}

TEST(RedisFleetTest, FourProcessesOfFourThreadsShareOneGcraBurstAtAFrozenTime) {
  RedisServer server;
  constexpr int64_t kBurst = 1000;
  const Limit limit =
      MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s, .burst = kBurst});
  // Each thread runs until it is denied: at a frozen time nothing comes back, so the burst is
  // used up however slow the machine is. The deadline is only a watchdog.
  const auto until = std::chrono::steady_clock::now() + 60s;
  const std::vector<Admission> admitted = InChildren(4, [&] {
    RedisStoreOptions options = *ParseRedisUrl(server.url());
    options.use_caller_time = true;  // Frozen: no token comes back during the run.
    options.timeout = 30s;  // A call that timed out after Redis admitted it would go uncounted.
    std::unique_ptr<RedisStore> redis = *RedisStore::Create(options);
    return Hammer(
        4, until,
        [&]() -> Seen {
          absl::StatusOr<Decision> d = redis->Decide(limit, "{fleet}", 1, At(kEpoch));
          if (!d.ok()) {
            return {};
          }
          if (!d->allowed) {
            return {.denied = true};
          }
          return {.admitted = Admission{.window = 0, .remaining = d->remaining}};
        },
        Stop::kWhenDenied);
  });
  std::vector<int64_t> remaining;
  for (const Admission& a : admitted) {
    remaining.push_back(a.remaining);
  }
  std::sort(remaining.begin(), remaining.end());
  ASSERT_EQ(static_cast<int64_t>(remaining.size()), kBurst);
  for (int64_t i = 0; i < kBurst; ++i) {
    EXPECT_EQ(remaining[static_cast<size_t>(i)], i);  // 999, 998, ... 0: each once.
  }
}

// ---------------------------------------------------------------------------------------------
// Redis Cluster: three masters the test creates (cluster_fixture.h), and a slot migrated during
// traffic.

using testing::RedisClusterTest;

TEST_F(RedisClusterTest, DecidesAsTheMemoryStoreWithKeysOnEveryNode) {
  std::unique_ptr<RedisStore> redis = MustStore(ClusterOptions());
  MemoryStore memory;
  const Limit gcra = MustLimit({.algorithm = Algorithm::kGcra, .limit = 3, .period = 1s});
  const Limit daily = MustLimit({.limit = 5, .period = 24h});
  testing::Random rnd(testing::Seed(17));
  int64_t t = kEpoch;
  for (int i = 0; i < 600; ++i) {
    t += rnd.Between(0, 400'000);
    const std::string key = "user" + std::to_string(rnd.Between(0, 59));
    // Both limits on one key: one slot, decided all or nothing.
    const LimitedKey requests[] = {{&gcra, key}, {&daily, key}};
    Decision got_each[2];
    Decision want_each[2];
    absl::StatusOr<Decision> got = redis->DecideAll(requests, 1, At(t), got_each);
    absl::StatusOr<Decision> want = memory.DecideAll(requests, 1, At(t), want_each);
    ASSERT_TRUE(got.ok() && want.ok()) << got.status() << want.status();
    ASSERT_EQ(*got, *want) << "step " << i << " key " << key;
  }
  // The 60 keys landed on all three masters.
  for (RedisServer* node : nodes_) {
    testing::Client client(node->port());
    EXPECT_GT(client.Run({"DBSIZE"})->integer, 0) << node->port();
  }
  EXPECT_EQ(redis->Stats().failures, 0u);
}

// Keys of different tags are decided slot by slot (redis_store_multislot_test.cc has the
// rest); keys tagged alike in one call. A charge (ChargeAll) is split alike; a give-back
// (GiveBackAll) keeps to one slot.
TEST_F(RedisClusterTest, KeysApartAreSplitByTagsAlikeAreNot) {
  std::unique_ptr<RedisStore> redis = MustStore(ClusterOptions());
  const Limit limit = MustLimit({.limit = 5, .period = 1h});
  const Limit other = MustLimit({.limit = 9, .period = 1h});
  Decision each[2];
  const LimitedKey apart[] = {{&limit, "alice"}, {&other, "bob"}};
  absl::StatusOr<Decision> d = redis->DecideAll(apart, 1, At(kEpoch), each);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(each[0].remaining, 4);
  EXPECT_EQ(each[1].remaining, 8);
  EXPECT_EQ(redis->Stats().split_requests, 1u);
  const LimitedKey tagged[] = {{&limit, "{alice}:ip"}, {&other, "{alice}:user"}};
  d = redis->DecideAll(tagged, 1, At(kEpoch), each);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(each[0].remaining, 4);
  EXPECT_EQ(each[1].remaining, 8);
  EXPECT_EQ(redis->Stats().split_requests, 1u);
  Charge charges[2];
  d = redis->ChargeAll(apart, 1, At(kEpoch), each, charges);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(charges[0].units, 1);
  EXPECT_EQ(charges[1].units, 1);
  EXPECT_EQ(redis->Stats().split_requests, 2u);
  d = redis->GiveBackAll(apart, charges, At(kEpoch), each);
  EXPECT_TRUE(absl::IsInvalidArgument(d.status())) << d.status();
  EXPECT_THAT(d.status().message(), ::testing::HasSubstr("same {tag}"));
}

// redis:// at a cluster node: keys on other nodes are refused with a hint, never followed.
TEST_F(RedisClusterTest, APlainUrlToAClusterNodeSaysToUseTheClusterUrl) {
  RedisStoreOptions options = ClusterOptions();
  options.cluster = false;
  std::unique_ptr<RedisStore> redis = MustStore(options);
  const Limit limit = MustLimit({.limit = 5, .period = 1h});
  int refused = 0;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<Decision> d = redis->Decide(limit, "user" + std::to_string(i), 1, At(kEpoch));
    if (!d.ok()) {
      EXPECT_TRUE(absl::IsUnavailable(d.status())) << d.status();
      EXPECT_THAT(d.status().message(), ::testing::HasSubstr("use redis+cluster://"));
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);  // Two thirds of the slots are elsewhere.
  EXPECT_LT(refused, 20);
}

// redis+cluster:// at a server without cluster support: calls fail at once, saying why.
TEST(RedisStoreTest, AClusterUrlToAPlainServerFailsSayingWhy) {
  RedisServer server;
  absl::StatusOr<RedisStoreOptions> options =
      ParseRedisUrl("redis+cluster://127.0.0.1:" + std::to_string(server.port()));
  ASSERT_TRUE(options.ok());
  options->timeout = 60s;
  std::unique_ptr<RedisStore> redis = MustStore(*options);
  const Limit limit = MustLimit({.limit = 5, .period = 1h});
  absl::StatusOr<Decision> d = redis->Decide(limit, "k", 1, At(kEpoch));
  // At once: Unavailable for what the server said, not the 60 s timeout's DeadlineExceeded.
  EXPECT_TRUE(absl::IsUnavailable(d.status())) << d.status();
  EXPECT_THAT(d.status().message(), ::testing::HasSubstr("CLUSTER SLOTS"));
}

// Waits until `reached`, however long a loaded machine takes; 60 s is only a watchdog.
bool WaitFor(const std::function<bool()>& reached) {
  const auto watchdog = std::chrono::steady_clock::now() + 60s;
  while (!reached() && std::chrono::steady_clock::now() < watchdog) {
    std::this_thread::sleep_for(1ms);
  }
  return reached();
}

TEST_F(RedisClusterTest, FollowsASlotMigratedDuringTrafficAndLosesNoCount) {
  std::unique_ptr<RedisStore> redis = MustStore(ClusterOptions());
  constexpr int64_t kLimit = 1'000'000;
  const Limit limit = MustLimit({.limit = kLimit, .period = 24h});
  const std::string key = "{migrating}";
  testing::Client any(nodes_[0]->port());
  const int slot = static_cast<int>(any.Run({"CLUSTER", "KEYSLOT", key})->integer);
  ASSERT_TRUE(redis->Decide(limit, key, 1, At(kEpoch)).ok());  // The key exists before.
  const int from = Owner(slot);
  ASSERT_GE(from, 0);
  const int to = (from + 1) % 3;

  std::atomic<bool> stop{false};
  std::atomic<int64_t> admitted{1};
  std::atomic<int64_t> errors{0};
  std::mutex first_error_mutex;
  std::string first_error;
  std::vector<std::thread> traffic;
  for (int i = 0; i < 4; ++i) {
    traffic.emplace_back([&] {
      while (!stop) {
        absl::StatusOr<Decision> d = redis->Decide(limit, key, 1, At(kEpoch));
        if (!d.ok()) {
          if (errors++ == 0) {
            std::lock_guard lock(first_error_mutex);
            first_error = d.status().ToString();
          }
        } else if (d->allowed) {
          ++admitted;
        }
      }
    });
  }
  // Each step waits for the traffic to have reached it (WaitFor), not for a time.
  // The slot moves as redis-cli --cluster reshard moves it: importing, migrating, the keys,
  // then the new owner announced to every node. Traffic runs throughout.
  testing::Client source(nodes_[from]->port());
  testing::Client target(nodes_[to]->port());
  const std::string slot_text = std::to_string(slot);
  EXPECT_TRUE(WaitFor([&] { return admitted.load() > 100; }));
  ASSERT_EQ(std::string(target.Run({"CLUSTER", "SETSLOT", slot_text, "IMPORTING", Id(from)})->str),
            "OK");
  ASSERT_EQ(std::string(source.Run({"CLUSTER", "SETSLOT", slot_text, "MIGRATING", Id(to)})->str),
            "OK");
  testing::Reply keys = source.Run({"CLUSTER", "GETKEYSINSLOT", slot_text, "100"});
  ASSERT_EQ(keys->elements, 1u);
  testing::Reply moved = source.Run({"MIGRATE", "127.0.0.1", std::to_string(nodes_[to]->port()),
                                     keys->element[0]->str, "0", "5000"});
  ASSERT_EQ(std::string(moved->str), "OK");
  // ASK now sends the calls to the target.
  EXPECT_TRUE(WaitFor([&] { return redis->Stats().asks > 0; }));
  // The new owner is told first, then the old one, then the third node, as redis-cli does:
  // told in the other order, the two would send a call back and forth with MOVED.
  for (const int node : {to, from, 3 - to - from}) {
    testing::Client client(nodes_[static_cast<size_t>(node)]->port());
    client.Run({"CLUSTER", "SETSLOT", slot_text, "NODE", Id(to)});
  }
  // MOVED now, and a new slot map.
  EXPECT_TRUE(WaitFor([&] {
    const RedisStoreStats stats = redis->Stats();
    return stats.redirects > stats.asks;
  }));
  stop = true;
  for (std::thread& t : traffic) {
    t.join();
  }
  EXPECT_EQ(errors.load(), 0) << "the first: " << first_error;
  EXPECT_EQ(Owner(slot), to);
  // Calls followed ASK while the key had moved and the slot had not, then MOVED.
  const RedisStoreStats stats = redis->Stats();
  EXPECT_GT(stats.asks, 0u);
  EXPECT_GT(stats.redirects, stats.asks);
  // Every admission counted once, wherever it was decided.
  absl::StatusOr<Decision> query = redis->Decide(limit, key, 0, At(kEpoch));
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->remaining, kLimit - admitted.load());
  EXPECT_GT(admitted.load(), 100);
}

}  // namespace
}  // namespace sluice
