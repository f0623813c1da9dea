// RedisStore through Redis Sentinel (redis+sentinel://), against real processes on loopback
// ports: a master, its replica and three sentinels (quorum 2, the master down after 1 s). The
// store finds the master; follows it when it is killed (SIGKILL) and when a sentinel is told to
// fail over (SENTINEL FAILOVER), during a stream of decisions: every call returns, answered by
// the failure policy meanwhile, and decisions then come from the new master. Replication is
// asynchronous: what the old master had not yet sent is lost, and the tests print how much
// ("[ measured ]"), with the gap from the kill to the first decision of the new master. And a
// server the sentinels name that is not a master is refused; without a sentinel, every call
// is ended by its deadline (DeadlineExceeded).
//
// Why these cannot flake on a busy machine: nothing here asserts how long anything took. Each
// wait is for an event (the sentinels seeing one another, a decision from Redis, the
// sentinels naming the new master, the store deciding there), polled, with a bound (kPatience)
// that a failover on a quiet machine meets a hundred times over and that only an event that
// never comes reaches; a failover the sentinels give up on is ordered again. The calls'
// timeout is generous too, so that a call fails only where a master is gone.

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sluice/redis_store.h"
#include "tests/redis/fixtures.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::Client;
using testing::kEpoch;
using testing::MustLimit;
using testing::MustStore;
using testing::OptionsFor;
using testing::RedisServer;
using testing::Reply;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

constexpr char kMaster[] = "mymaster";

// How long a wait for an event may last before the test fails for want of it. A failover takes
// a few seconds on a quiet machine (a second to find the master down, an election, a
// promotion); an election that fails is retried after twice the failover timeout (20 s here).
// Five minutes in all is reached only when the event never comes. (ctest's timeout for these
// tests is 600 s.)
constexpr auto kPatience = std::chrono::seconds(300);

// A sentinel watching `kMaster` at `master_port`, from a config file of its own (a sentinel
// rewrites it, so each has one, in a directory removed with it).
class SentinelProcess {
 public:
  SentinelProcess(int master_port, int quorum, int down_after_ms) {
    config_dir_ = std::filesystem::temp_directory_path() /
                  ("sluice-sentinel-" + std::to_string(getpid()) + "-" + std::to_string(count_++));
    std::filesystem::create_directories(config_dir_);
    std::ofstream(config_dir_ / "sentinel.conf")
        << "sentinel monitor " << kMaster << " 127.0.0.1 " << master_port << " " << quorum
        << "\nsentinel down-after-milliseconds " << kMaster << " " << down_after_ms
        << "\nsentinel failover-timeout " << kMaster << " 10000"
        << "\nsentinel parallel-syncs " << kMaster << " 1\n";
    server_ = std::make_unique<RedisServer>(std::vector<std::string>{"--sentinel"},
                                            config_dir_ / "sentinel.conf");
  }
  ~SentinelProcess() {
    server_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(config_dir_, ignored);
  }
  int port() const { return server_->port(); }

 private:
  static inline int count_ = 0;
  std::filesystem::path config_dir_;
  std::unique_ptr<RedisServer> server_;
};

// The value of `field` in a reply that is a flat list of names and values (SENTINEL replicas).
std::string Field(const redisReply& r, std::string_view field) {
  for (size_t i = 0; i + 1 < r.elements; i += 2) {
    if (r.element[i]->str != nullptr && r.element[i]->str == field &&
        r.element[i + 1]->str != nullptr) {
      return r.element[i + 1]->str;
    }
  }
  return "";
}

// The master's port as the sentinel at `port` names it (SENTINEL get-master-addr-by-name), or
// 0 if it does not answer.
int MasterPortOf(int port) {
  Client client(port);
  Reply r = client.Run({"SENTINEL", "get-master-addr-by-name", kMaster});
  return r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->str != nullptr
             ? std::atoi(r->element[1]->str)
             : 0;
}

// Whether the sentinel at `port` has a failover of the master in progress.
bool FailingOver(int port) {
  Client client(port);
  Reply r = client.Run({"SENTINEL", "master", kMaster});
  return r && r->type == REDIS_REPLY_ARRAY &&
         Field(*r, "flags").find("failover_in_progress") != std::string::npos;
}

// What ROLE says of the server at `port` ("master", "slave"), or "" if it does not answer.
std::string Role(int port) {
  Client client(port);
  Reply r = client.Run({"ROLE"});
  return r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->str != nullptr
             ? r->element[0]->str
             : "";
}

// A master, its replica, and three sentinels that fail it over after a second down.
class Fleet {
 public:
  Fleet() : replica_({"--replicaof", "127.0.0.1", std::to_string(master_.port())}) {
    for (int i = 0; i < 3; ++i) {
      sentinels_.push_back(std::make_unique<SentinelProcess>(master_.port(), 2, 1000));
    }
  }

  RedisServer& master() { return master_; }
  RedisServer& replica() { return replica_; }
  int sentinel_port(int i) const { return sentinels_[static_cast<size_t>(i)]->port(); }
  int sentinels() const { return static_cast<int>(sentinels_.size()); }

  // Whether every sentinel names the server at `port` as the master: the failover is theirs,
  // done (each announces +switch-master as it learns of it).
  bool AllName(int port) const {
    for (int i = 0; i < sentinels(); ++i) {
      if (MasterPortOf(sentinel_port(i)) != port) {
        return false;
      }
    }
    return true;
  }

  // What each sentinel names as the master, for a failure's message.
  std::string Named() const {
    std::string named;
    for (int i = 0; i < sentinels(); ++i) {
      named += (i == 0 ? "" : ", ") + std::to_string(MasterPortOf(sentinel_port(i)));
    }
    return "the sentinels name the master at port " + named;
  }

  std::string url() const {
    std::ostringstream url;
    url << "redis+sentinel://";
    for (size_t i = 0; i < sentinels_.size(); ++i) {
      url << (i == 0 ? "" : ",") << "127.0.0.1:" << sentinels_[i]->port();
    }
    url << "/" << kMaster;
    return url.str();
  }

  // Whether every sentinel knows the two others and the replica (in sync), before kPatience
  // runs out: a failover needs a majority of them to agree, and a replica to promote.
  bool WaitReady() {
    const auto until = SteadyClock::now() + kPatience;
    while (SteadyClock::now() < until) {
      if (Ready()) {
        return true;
      }
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }

 private:
  bool Ready() {
    for (const auto& s : sentinels_) {
      Client client(s->port());
      Reply others = client.Run({"SENTINEL", "sentinels", kMaster});
      Reply replicas = client.Run({"SENTINEL", "replicas", kMaster});
      if (!others || others->type != REDIS_REPLY_ARRAY || others->elements != 2 || !replicas ||
          replicas->type != REDIS_REPLY_ARRAY || replicas->elements != 1 ||
          Field(*replicas->element[0], "flags") != "slave" ||
          Field(*replicas->element[0], "master-link-status") != "ok") {
        return false;
      }
    }
    return true;
  }

  RedisServer master_;
  RedisServer replica_;
  std::vector<std::unique_ptr<SentinelProcess>> sentinels_;
};

// What a stream of decisions saw: decided by Redis, by the policy, or failed.
struct Stream {
  int64_t decided = 0;   // By Redis (reset_after > 0: the policy's answers have every figure 0).
  int64_t fallback = 0;  // Allowed by the `allow` policy.
  int64_t failed = 0;    // Unavailable or DeadlineExceeded (the `deny` policy).
  std::optional<Decision> last;  // The last decided by Redis.
};

class RedisSentinelTest : public ::testing::Test {
 protected:
  static constexpr int64_t kLimit = 1'000'000;
  // Every decision at one caller time, in one window of an hour: the count only grows, so
  // `remaining` says how many decisions the server that answers has kept.
  const Limit limit_ = MustLimit({.limit = kLimit, .period = 3600s});
  // Met by a loaded machine many times over; missed only by a master that is gone.
  static constexpr auto kTimeout = std::chrono::milliseconds(10'000);

  std::unique_ptr<RedisStore> Store(const std::string& url, FailurePolicy policy,
                                    std::chrono::milliseconds timeout = kTimeout) {
    RedisStoreOptions options = OptionsFor(url);
    options.timeout = timeout;
    options.on_failure = policy;
    return MustStore(options);
  }

  // One decision, which must return (a call that never did would hang the test until ctest's
  // timeout) and be a decision, the policy's answer, or a transport failure.
  void DecideOnce(RedisStore& store, Stream& stream) {
    absl::StatusOr<Decision> d = store.Decide(limit_, "k", 1, At(kEpoch));
    if (!d.ok()) {
      EXPECT_TRUE(absl::IsUnavailable(d.status()) || absl::IsDeadlineExceeded(d.status()))
          << d.status();
      ++stream.failed;
    } else if (d->reset_after > Micros{0}) {
      EXPECT_TRUE(d->allowed);
      ++stream.decided;
      stream.last = *d;
    } else {
      EXPECT_TRUE(d->allowed);
      ++stream.fallback;
    }
  }

  // Decides until one comes from Redis (the store connects in the background).
  void WarmUp(RedisStore& store) {
    Stream stream;
    const auto until = SteadyClock::now() + kPatience;
    while (stream.decided == 0 && SteadyClock::now() < until) {
      DecideOnce(store, stream);
    }
    ASSERT_EQ(stream.decided, 1) << "no decision from the master";
    decided_ += 1;
  }

  // Decides for `duration`, and on until Redis has decided one, adding the decisions to
  // decided_. The duration only sets how many decisions are made; nothing asserts on it.
  Stream DecideFor(RedisStore& store, std::chrono::milliseconds duration) {
    Stream stream;
    const auto start = SteadyClock::now();
    while (SteadyClock::now() < start + duration ||
           (stream.decided == 0 && SteadyClock::now() < start + kPatience)) {
      DecideOnce(store, stream);
    }
    decided_ += stream.decided;
    return stream;
  }

  // Decides until one comes from Redis after the store has switched masters, and after every
  // sentinel names the server at `new_port` as the master (the failover is the sentinels',
  // done). `reorder`, when set, is called (every 100 ms) while they do not all name it yet:
  // it orders the failover again if the sentinel that ran it gave it up. Returns the stream
  // and how long it took, printed only.
  std::pair<Stream, std::chrono::milliseconds> DecideUntilSwitched(
      RedisStore& store, const Fleet& fleet, int new_port,
      const std::function<void()>& reorder = nullptr) {
    Stream stream;
    const auto start = SteadyClock::now();
    auto asked = start;
    bool named = false;
    while (SteadyClock::now() < start + kPatience) {
      const bool switched = store.Stats().master_switches > 0;  // Before the call: it is then
      const int64_t before = stream.decided;                    // the new master's.
      DecideOnce(store, stream);
      if (named && switched && stream.decided > before) {
        break;
      }
      if (!named && SteadyClock::now() >= asked + 100ms) {  // Not a flood of questions.
        asked = SteadyClock::now();
        named = fleet.AllName(new_port);
        if (!named && reorder) {
          reorder();
        }
      }
    }
    EXPECT_TRUE(named) << fleet.Named() << ", not " << new_port;
    decided_ += stream.decided;
    return {stream,
            std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start)};
  }

  // Of the decisions made so far, how many the server that made the last one does not count.
  int64_t Lost(const Stream& last) const { return decided_ - (kLimit - last.last->remaining); }

  int64_t decided_ = 0;  // Decisions Redis made, on any master.
};

TEST_F(RedisSentinelTest, FollowsAKilledMasterToItsReplica) {
  Fleet fleet;
  ASSERT_TRUE(fleet.WaitReady()) << "the sentinels did not see one another within 30 s";
  std::unique_ptr<RedisStore> store = Store(fleet.url(), FailurePolicy::kDeny);
  WarmUp(*store);
  EXPECT_EQ(Client(fleet.master().port()).Run({"EXISTS", store->RedisKey(limit_, "k")})->integer,
            1);  // Decided on the master.
  DecideFor(*store, 500ms);

  fleet.master().Kill();  // No goodbye: what it had not replicated yet is gone.
  const auto [gap, took] = DecideUntilSwitched(*store, fleet, fleet.replica().port());
  ASSERT_GT(store->Stats().master_switches, 0u) << "no decision from a new master";
  EXPECT_EQ(Role(fleet.replica().port()), "master");
  EXPECT_GT(gap.failed, 0);  // The gap was answered by the deny policy: errors, in time.
  EXPECT_EQ(gap.fallback, 0);
  const int64_t lost = Lost(gap);
  EXPECT_GE(lost, 0);
  std::cout << "[ measured ] kill to first decision of the new master: " << took.count() << " ms; "
            << gap.failed << " calls failed meanwhile; " << lost << " of " << decided_ - gap.decided
            << " decisions lost (not yet replicated)\n";

  // The old master, back, is made a replica by the sentinels; the store stays on the new one.
  fleet.master().Start();
  const Stream after = DecideFor(*store, 1500ms);
  EXPECT_GT(after.decided, 0);
  EXPECT_EQ(after.failed, 0);
  EXPECT_EQ(Lost(after), lost);  // Nothing more lost: every decision on the one new master.
}

TEST_F(RedisSentinelTest, FollowsAFailoverOrderedOfASentinel) {
  Fleet fleet;
  ASSERT_TRUE(fleet.WaitReady()) << "the sentinels did not see one another within 30 s";
  std::unique_ptr<RedisStore> store = Store(fleet.url(), FailurePolicy::kAllow);
  WarmUp(*store);
  DecideFor(*store, 300ms);

  const int old_port = fleet.master().port();
  const int ordering = fleet.sentinel_port(1);
  int orders = 0;
  // The sentinel's answer to an order: OK, or why not (NOGOODSLAVE while a replica it gave up
  // promoting is made a replica again).
  auto order = [&]() -> std::string {
    Reply ordered = Client(ordering).Run({"SENTINEL", "FAILOVER", kMaster});
    if (ordered && ordered->type == REDIS_REPLY_STATUS) {
      ++orders;
      return "OK";
    }
    return ordered && ordered->str ? ordered->str : "no answer";
  };
  ASSERT_EQ(order(), "OK");
  // A busy machine can make the sentinel give the failover up (the replica not seen promoted
  // within the failover timeout): then it is ordered again, until the sentinel takes the
  // order. Asked in this order (first whether one is in progress, then where the master is),
  // an old address after no failover in progress can only mean one given up, never one just
  // done.
  const auto [gap, took] = DecideUntilSwitched(*store, fleet, fleet.replica().port(), [&] {
    if (!FailingOver(ordering) && MasterPortOf(ordering) == old_port) {
      order();
    }
  });
  ASSERT_GT(store->Stats().master_switches, 0u) << "no decision from a new master";
  EXPECT_EQ(gap.failed, 0);  // The allow policy answered the gap, if there was one.
  EXPECT_EQ(Role(fleet.replica().port()), "master");
  const int64_t lost = Lost(gap);
  EXPECT_GE(lost, 0);
  std::cout << "[ measured ] SENTINEL FAILOVER to first decision of the new master: "
            << took.count() << " ms (" << orders << " ordered); " << gap.fallback
            << " calls allowed by the policy; " << lost << " decisions lost\n";

  // The old master is demoted; decisions stay on the new one.
  const Stream after = DecideFor(*store, 1000ms);
  EXPECT_GT(after.decided, 0);
  EXPECT_EQ(Lost(after), lost);
}

// A sentinel that names a replica (here, by watching it as if it were the master, as a
// sentinel that has not yet seen a failover might name a demoted master): the store refuses
// it after ROLE, and never decides there.
TEST_F(RedisSentinelTest, RefusesAServerThatIsNotAMaster) {
  RedisServer master;
  RedisServer replica({"--replicaof", "127.0.0.1", std::to_string(master.port())});
  SentinelProcess sentinel(replica.port(), 1, 60000);
  std::unique_ptr<RedisStore> store =
      Store("redis+sentinel://127.0.0.1:" + std::to_string(sentinel.port()) + "/" + kMaster,
            FailurePolicy::kDeny);
  bool refused = false;
  const auto until = SteadyClock::now() + kPatience;
  while (!refused && SteadyClock::now() < until) {
    absl::StatusOr<Decision> d = store->Decide(limit_, "k", 1, At(kEpoch));
    ASSERT_FALSE(d.ok()) << "decided on a replica";
    refused = d.status().message().find("not a master") != std::string_view::npos;
  }
  EXPECT_TRUE(refused) << "no call said why";
  EXPECT_EQ(Client(replica.port()).Run({"EXISTS", store->RedisKey(limit_, "k")})->integer, 0);
  EXPECT_EQ(store->Stats().connections_ready, 0);
}

// No sentinel answers: calls wait for a master until their deadline, which ends them (its
// error says so, DeadlineExceeded); a call that waited for nothing would say Unavailable, one
// that waited for ever would hang the test.
TEST_F(RedisSentinelTest, WithoutASentinelEveryCallEndsAtItsDeadline) {
  const int port = testing::FreePort();
  std::unique_ptr<RedisStore> store =
      Store("redis+sentinel://127.0.0.1:" + std::to_string(port) + "/" + kMaster,
            FailurePolicy::kDeny, std::chrono::milliseconds(500));
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<Decision> d = store->Decide(limit_, "k", 1, At(kEpoch));
    EXPECT_TRUE(absl::IsDeadlineExceeded(d.status())) << d.status();
  }
  EXPECT_EQ(store->Stats().failures, 3u);
}

}  // namespace
}  // namespace sluice
