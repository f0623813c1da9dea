// RedisStore when this host's wall clock is stepped (an operator, NTP stepping): a call's
// `expires` is on Redis's clock, read at the handshake and followed on the steady clock since,
// so a step back fails no call and a step forward keeps the guard that Redis decides nothing
// past a call's deadline. Before, `expires` was this host's wall clock plus the offset read at
// the handshake: a step back failed every call until the connection was made again, a step
// forward switched the guard off.
//
// The wall clock of this process alone is stepped, by libfaketime (LD_PRELOAD, set by CTest:
// tests/redis/CMakeLists.txt), whose offset the test writes to FAKETIME_TIMESTAMP_FILE; the
// steady clock is left alone (FAKETIME_DONT_FAKE_MONOTONIC), and redis-server is started
// without the library, on the real time.

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "gtest/gtest.h"

#include "sluice/redis_store.h"
#include "tests/redis/fixtures.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::At, testing::kEpoch, testing::MustLimit, testing::MustStore, testing::OptionsFor;
using testing::RedisServer;

class WallClockStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* file = std::getenv("FAKETIME_TIMESTAMP_FILE");
    ASSERT_NE(file, nullptr) << "run under libfaketime, as CTest does (tests/redis/CMakeLists.txt)";
    file_ = file;
    Step(0);
    unsetenv("LD_PRELOAD");  // redis-server runs on the real time.
    server_ = std::make_unique<RedisServer>();
  }
  void TearDown() override {
    if (!file_.empty()) {
      Step(0);
    }
  }

  // Moves this process's wall clock `seconds` away from the real time, and checks it moved
  // (against the steady clock, which libfaketime leaves alone).
  void Step(int seconds) {
    std::ofstream(file_, std::ios::trunc) << (seconds < 0 ? "" : "+") << seconds << "\n";
    const auto wall = std::chrono::system_clock::now();
    const auto steady = std::chrono::steady_clock::now();
    if (seconds == 0 && !started_) {
      started_ = true;
      wall0_ = wall;
      steady0_ = steady;
      return;
    }
    const auto moved = wall - (wall0_ + (steady - steady0_));
    // The offset between two clocks read together, not elapsed time: load cannot change it, so
    // the lint's escape applies. sluice-timing: watchdog
    ASSERT_LT(std::chrono::abs(moved - std::chrono::seconds(seconds)), 5s)
        << "libfaketime did not step the wall clock";
  }

  bool started_ = false;
  std::chrono::system_clock::time_point wall0_;  // The real time, at steady0_.
  std::chrono::steady_clock::time_point steady0_;
  std::string file_;
  std::unique_ptr<RedisServer> server_;
};

TEST_F(WallClockStepTest, AStepBackFailsNoCall) {
  RedisStoreOptions options = OptionsFor(*server_);
  options.use_caller_time = false;  // Redis's clock.
  options.timeout = 2s;
  std::unique_ptr<RedisStore> redis = MustStore(options);
  const Limit limit = MustLimit({.limit = 1000, .period = 1h});
  ASSERT_TRUE(redis->Decide(limit, "k", 1, At(kEpoch)).ok());
  Step(-3600);
  // Before: each `expires` an hour early, Redis refused the call ("TIMEOUT sluice: ...").
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<Decision> d = redis->Decide(limit, "k", 1, At(kEpoch));
    ASSERT_TRUE(d.ok()) << i << ": " << d.status();
  }
  absl::StatusOr<Decision> query = redis->Decide(limit, "k", 0, At(kEpoch));
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->remaining, 994);
}

// As RedisFrozenTest (redis_store_incident_test.cc), after a step forward: calls answered at
// their deadline while Redis was frozen are not charged when it wakes.
TEST_F(WallClockStepTest, AStepForwardKeepsTheGuard) {
  RedisStoreOptions options = OptionsFor(*server_);
  options.use_caller_time = false;
  options.timeout = 300ms;
  options.batch = 1;
  std::unique_ptr<RedisStore> redis = MustStore(options);
  const Limit limit = MustLimit({.limit = 1000, .period = 1h});
  ASSERT_TRUE(redis->Decide(limit, "k", 1, At(kEpoch)).ok());
  Step(3600);
  ASSERT_TRUE(redis->Decide(limit, "k", 1, At(kEpoch)).ok());

  const absl::StatusOr<Decision> query =
      testing::QueryAfterCallsWhileFrozen(*server_, *redis, limit, "k", 10, At(kEpoch));
  ASSERT_TRUE(query.ok()) << query.status();
  // Before: `expires` an hour late, Redis charged the 10 when it woke (988).
  EXPECT_EQ(query->remaining, 998);
}

}  // namespace
}  // namespace sluice
