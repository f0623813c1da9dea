// How RedisStore reads Redis's errors (src/redis/errors.h): those that say Redis cannot decide
// now follow the failure policy, the rest are the call's own.

#include "src/redis/errors.h"

#include "gtest/gtest.h"

namespace sluice::internal {
namespace {

TEST(RedisErrorsTest, RedisThatCannotDecideIsUnavailable) {
  for (const char* text :
       {"OOM command not allowed when used memory > 'maxmemory'.",
        "BUSY Redis is busy running a script.", "LOADING Redis is loading the dataset in memory",
        "CLUSTERDOWN The cluster is down", "TRYAGAIN Multiple keys request",
        "NOREPLICAS Not enough good replicas to write.",
        "MISCONF Redis is configured to save RDB snapshots", "NOAUTH Authentication required.",
        "NOPERM this user has no permissions to run the 'evalsha' command"}) {
    EXPECT_EQ(ClassifyRedisError(text), RedisErrorKind::kUnavailable) << text;
    EXPECT_TRUE(absl::IsUnavailable(RedisErrorStatus(text))) << text;
  }
}

TEST(RedisErrorsTest, AServerThatIsNotAMasterIsUnavailableAndToBeFoundAgain) {
  for (const char* text : {"READONLY You can't write against a read only replica.",
                           "MASTERDOWN Link with MASTER is down"}) {
    EXPECT_EQ(ClassifyRedisError(text), RedisErrorKind::kNotMaster) << text;
    const absl::Status status = RedisErrorStatus(text);
    EXPECT_TRUE(absl::IsUnavailable(status)) << text;
    EXPECT_EQ(ClassifyRedisStatus(status), RedisErrorKind::kNotMaster) << text;
    EXPECT_EQ(RedisErrorText(status), text);
  }
}

// Redis 6 raises a command's error inside the script with the script's place in front.
TEST(RedisErrorsTest, ACommandsErrorInsideTheScriptIsReadPastThePlaceRedis6PutsFirst) {
  EXPECT_EQ(ClassifyRedisError("@user_script: 73: -OOM command not allowed when used memory"),
            RedisErrorKind::kUnavailable);
  EXPECT_EQ(ClassifyRedisError("@user_script: 9: -READONLY You can't write against a replica"),
            RedisErrorKind::kNotMaster);
  EXPECT_EQ(ClassifyRedisError("@user_script: 9: -ERR wrong number of arguments"),
            RedisErrorKind::kCall);
}

TEST(RedisErrorsTest, TheCallsOwnErrorsAreInternal) {
  for (const char* text : {"WRONGTYPE Operation against a key holding the wrong kind of value",
                           "ERR wrong number of arguments for 'evalsha' command",
                           "user_script:382: time 5 us is outside what the Redis store decides at",
                           "script error", "OOMPH not a prefix", "", "READONLYISH"}) {
    EXPECT_EQ(ClassifyRedisError(text), RedisErrorKind::kCall) << text;
    EXPECT_TRUE(absl::IsInternal(RedisErrorStatus(text))) << text;
  }
  EXPECT_EQ(ClassifyRedisStatus(absl::UnavailableError("READONLY not ours")),
            RedisErrorKind::kCall);  // Not RedisErrorStatus's.
}

}  // namespace
}  // namespace sluice::internal
