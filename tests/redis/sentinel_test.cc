// What the Redis store reads from sentinels and masters (src/redis/sentinel.h), without a
// server: ROLE's answer, SENTINEL get-master-addr-by-name's, +switch-master's payload, and the
// checks of RedisSentinelOptions.

#include "src/redis/sentinel.h"

#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "tests/redis/resp_reader.h"

namespace sluice::internal {
namespace {

using ::testing::HasSubstr;
using testing::ReadResp;

TEST(IsMasterRoleTest, OnlyAMasterIsOne) {
  EXPECT_TRUE(IsMasterRole(*ReadResp("*3\r\n$6\r\nmaster\r\n:3129659\r\n*0\r\n")));
  EXPECT_FALSE(IsMasterRole(
      *ReadResp("*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:9999\r\n$9\r\nconnected\r\n:1\r\n")));
  EXPECT_FALSE(IsMasterRole(*ReadResp("*1\r\n$8\r\nsentinel\r\n")));
  EXPECT_FALSE(IsMasterRole(*ReadResp("-NOPERM this user has no permissions\r\n")));
  EXPECT_FALSE(IsMasterRole(*ReadResp("*0\r\n")));
  EXPECT_FALSE(IsMasterRole(*ReadResp("$6\r\nmaster\r\n")));  // Not in an array.
}

TEST(ReadMasterAddressTest, ReadsAnAddressAndNothingElse) {
  EXPECT_EQ(ReadMasterAddress(*ReadResp("*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6380\r\n")),
            (RedisEndpoint{"127.0.0.1", 6380}));
  EXPECT_EQ(ReadMasterAddress(*ReadResp("*2\r\n$3\r\n::1\r\n$5\r\n65535\r\n")),
            (RedisEndpoint{"::1", 65535}));
  // nil: the sentinel does not know the name.
  EXPECT_EQ(ReadMasterAddress(*ReadResp("*-1\r\n")), std::nullopt);
  EXPECT_EQ(ReadMasterAddress(*ReadResp("$-1\r\n")), std::nullopt);
  EXPECT_EQ(ReadMasterAddress(*ReadResp("*2\r\n$1\r\nh\r\n$1\r\n0\r\n")), std::nullopt);
  EXPECT_EQ(ReadMasterAddress(*ReadResp("*2\r\n$1\r\nh\r\n$5\r\n65536\r\n")), std::nullopt);
  EXPECT_EQ(ReadMasterAddress(*ReadResp("*2\r\n$0\r\n\r\n$4\r\n6379\r\n")), std::nullopt);
  EXPECT_EQ(ReadMasterAddress(*ReadResp("*1\r\n$1\r\nh\r\n")), std::nullopt);
  EXPECT_EQ(ReadMasterAddress(*ReadResp("*2\r\n$1\r\nh\r\n:6379\r\n")), std::nullopt);
}

TEST(ReadSwitchMasterTest, ReadsTheNewAddressOfItsMasterOnly) {
  EXPECT_EQ(ReadSwitchMaster("mymaster 127.0.0.1 6379 127.0.0.1 6380", "mymaster"),
            (RedisEndpoint{"127.0.0.1", 6380}));
  EXPECT_EQ(ReadSwitchMaster("my master 10.0.0.1 1 10.0.0.2 2", "my master"),
            (RedisEndpoint{"10.0.0.2", 2}));
  EXPECT_EQ(ReadSwitchMaster("other 127.0.0.1 6379 127.0.0.1 6380", "mymaster"), std::nullopt);
  EXPECT_EQ(ReadSwitchMaster("mymaster2 127.0.0.1 6379 127.0.0.1 6380", "mymaster"), std::nullopt);
  EXPECT_EQ(ReadSwitchMaster("127.0.0.1 6379 127.0.0.1 6380", "mymaster"), std::nullopt);
  EXPECT_EQ(ReadSwitchMaster("mymaster 127.0.0.1 6379 127.0.0.1 x", "mymaster"), std::nullopt);
  EXPECT_EQ(ReadSwitchMaster("", "mymaster"), std::nullopt);
}

TEST(CheckWhereRedisIsTest, RefusesWhatCannotWork) {
  RedisStoreOptions options;
  EXPECT_THAT(CheckWhereRedisIs(options).message(), HasSubstr("needs a host"));
  options.endpoints = {{"a", 1}};
  EXPECT_TRUE(CheckWhereRedisIs(options).ok());
  options.sentinel.endpoints = {{"s", 26379}};
  EXPECT_THAT(CheckWhereRedisIs(options).message(), HasSubstr("without a master name"));
  options.sentinel.master_name = "mymaster";
  EXPECT_THAT(CheckWhereRedisIs(options).message(), HasSubstr("give no Redis endpoints"));
  options.endpoints.clear();
  EXPECT_TRUE(CheckWhereRedisIs(options).ok());
  options.cluster = true;
  EXPECT_THAT(CheckWhereRedisIs(options).message(), HasSubstr("no cluster"));
  options.cluster = false;
  options.sentinel.endpoints = {{.host = "", .port = 0, .socket = "/s.sock"}};
  EXPECT_THAT(CheckWhereRedisIs(options).message(), HasSubstr("a host and a port"));
  options.sentinel.endpoints.clear();
  EXPECT_THAT(CheckWhereRedisIs(options).message(), HasSubstr("no sentinel"));
  // RedisStore::Create runs them.
  EXPECT_THAT(RedisStore::Create(options).status().message(), HasSubstr("no sentinel"));
}

}  // namespace
}  // namespace sluice::internal
