// HealthLog (src/core/health_log.h) on an injected time: lost and back once per change, a server
// that comes and goes held back, and its state said once the quiet time has passed.

#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "src/core/health_log.h"

namespace sluice::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

class HealthLogTest : public ::testing::Test {
 protected:
  HealthLog log_{"Redis", [this](StoreLogLevel level, std::string_view line) {
                   lines_.push_back(std::string(level == StoreLogLevel::kWarning ? "W " : "I ") +
                                    std::string(line));
                 }};
  std::vector<std::string> lines_;
  HealthLog::Time t0_ = HealthLog::Time() + 1h;
};

TEST_F(HealthLogTest, LostAndBackOncePerChange) {
  log_.Answered("r:1", t0_);  // Never lost: nothing to say.
  for (int i = 0; i < 5; ++i) {
    log_.Lost("r:1", "refused", false, t0_ + i * 10ms);
  }
  log_.Connected("r:1", t0_ + 2500ms);
  log_.Answered("r:1", t0_ + 2600ms);
  EXPECT_THAT(lines_, ElementsAre("W Redis at r:1 lost: refused",
                                  "I Redis at r:1 is back after 2.5 s (refused)"));
  EXPECT_FALSE(log_.lost("r:1"));
  EXPECT_EQ(log_.due(), std::nullopt);
}

TEST_F(HealthLogTest, ARefusalIsBackOnlyWhenACallIsDecided) {
  log_.Lost("r:1", "OOM command not allowed", true, t0_);
  log_.Connected("r:1", t0_ + 1s);  // A connection does not show that it decides again.
  EXPECT_TRUE(log_.lost("r:1"));
  log_.Lost("r:1", "READONLY replica", true, t0_ + 2s);  // Another cause: said.
  log_.Answered("r:1", t0_ + 3s);
  EXPECT_THAT(lines_, ElementsAre("W Redis at r:1 cannot decide: OOM command not allowed",
                                  "W Redis at r:1 is still lost: READONLY replica",
                                  "I Redis at r:1 is back after 3.0 s (READONLY replica)"));
}

TEST_F(HealthLogTest, AServerComingAndGoingIsHeldBackThenItsStateSaid) {
  for (int i = 0; i < 100; ++i) {  // Lost and back every 100 ms for 10 s.
    log_.Lost("r:1", "closed", false, t0_ + i * 100ms);
    log_.Connected("r:1", t0_ + i * 100ms + 50ms);
  }
  log_.Lost("r:1", "closed", false, t0_ + 10s);  // And it ends lost.
  ASSERT_EQ(lines_.size(), 2u);
  ASSERT_TRUE(log_.due());
  EXPECT_EQ(*log_.due(), t0_ + HealthLog::kQuiet);
  log_.Flush(t0_ + 20s);  // Too early.
  EXPECT_EQ(lines_.size(), 2u);
  log_.Flush(*log_.due());
  ASSERT_EQ(lines_.size(), 3u);
  EXPECT_THAT(lines_.back(), HasSubstr("W Redis at r:1 lost: closed ("));
  EXPECT_THAT(lines_.back(), HasSubstr("held back"));
  EXPECT_EQ(log_.due(), std::nullopt);
}

TEST_F(HealthLogTest, AFlapThatEndsAsItWasSaidSaysNothingMore) {
  log_.Lost("r:1", "closed", false, t0_);
  log_.Connected("r:1", t0_ + 1s);
  log_.Lost("r:1", "closed", false, t0_ + 2s);  // Held back.
  log_.Connected("r:1", t0_ + 3s);              // Back, as said last.
  EXPECT_EQ(lines_.size(), 2u);
  EXPECT_EQ(log_.due(), std::nullopt);
}

// What a health probe reads (sluiced's /healthz): the servers lost now, by kind, at once
// (a change held back from the log is counted all the same).
TEST(HealthLogCountsTest, CountsTheServersLostNowByKind) {
  HealthLog log("Redis", StoreLogSink{});
  const HealthLog::Time t0 = HealthLog::Time() + 1h;
  EXPECT_EQ(log.counts().lost + log.counts().refusing, 0);
  log.Lost("a:1", "refused", false, t0);
  log.Lost("b:1", "OOM command not allowed", true, t0);
  log.Lost("c:1", "refused", false, t0);
  EXPECT_EQ(log.counts().lost, 2);
  EXPECT_EQ(log.counts().refusing, 1);
  log.Connected("a:1", t0 + 1s);
  log.Connected("b:1", t0 + 1s);  // Still refusing until it decides.
  EXPECT_EQ(log.counts().lost, 1);
  EXPECT_EQ(log.counts().refusing, 1);
  log.Answered("b:1", t0 + 2s);
  log.Lost("a:1", "closed", false, t0 + 2s);  // Within kQuiet: held back, counted.
  EXPECT_EQ(log.counts().lost, 2);
  EXPECT_EQ(log.counts().refusing, 0);
  log.Moved("c:1", "moved");  // Sentinel: the old master is no longer used.
  EXPECT_EQ(log.counts().lost, 1);
}

}  // namespace
}  // namespace sluice::internal
