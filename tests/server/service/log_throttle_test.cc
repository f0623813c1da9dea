// LogThrottle (server/service/log_throttle.h): one line every so often, with the count held
// back since; a clock stepped back writes a line rather than falling silent.

#include "server/service/log_throttle.h"

#include "gtest/gtest.h"

namespace sluice::server {
namespace {

TEST(LogThrottle, OneLineEveryPeriodWithTheCountHeldBack) {
  LogThrottle throttle(10);
  uint64_t held = 0;
  bool first = false;
  ASSERT_TRUE(throttle.Allow(100, &held, &first));
  EXPECT_EQ(held, 1u);
  EXPECT_TRUE(first);
  EXPECT_FALSE(throttle.Allow(101, &held, &first));
  EXPECT_FALSE(throttle.Allow(109, &held, &first));
  ASSERT_TRUE(throttle.Allow(110, &held, &first));
  EXPECT_EQ(held, 3u);  // The two held back, and this one.
  EXPECT_FALSE(first);
}

TEST(LogThrottle, AClockSteppedBackWritesALine) {
  LogThrottle throttle(10);
  uint64_t held = 0;
  bool first = false;
  ASSERT_TRUE(throttle.Allow(1000, &held, &first));
  EXPECT_TRUE(throttle.Allow(5, &held, &first));
  EXPECT_FALSE(throttle.Allow(6, &held, &first));
}

}  // namespace
}  // namespace sluice::server
