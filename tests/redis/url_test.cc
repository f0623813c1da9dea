// ParseRedisUrl, RedactRedisUrl and the failure policy's names, beyond what
// redis_store_test.cc's RedisUrlTest covers: the corners of user info, IPv6, databases and
// host lists.

#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sluice/redis_store.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;

// The message of the error ParseRedisUrl gives `url`, failing the test if it gives none.
std::string Error(std::string_view url) {
  absl::StatusOr<RedisStoreOptions> o = ParseRedisUrl(url);
  EXPECT_TRUE(absl::IsInvalidArgument(o.status())) << url << ": " << o.status();
  return std::string(o.status().message());
}

// As redis-cli reads it: user info without a ':' is a password.
TEST(ParseRedisUrlTest, ReadsUserInfoWithoutAColonAsThePassword) {
  absl::StatusOr<RedisStoreOptions> o = ParseRedisUrl("redis://s3cret@host:7000");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->user, "");
  EXPECT_EQ(o->password, "s3cret");
  EXPECT_EQ(o->endpoints, (std::vector<RedisEndpoint>{{"host", 7000}}));
}

// The user ends at the first ':', the user info at the last '@', and escapes are decoded after
// splitting: a password may hold ':' and '@', and a user may hold them escaped.
TEST(ParseRedisUrlTest, SplitsUserInfoBeforeDecodingIt) {
  absl::StatusOr<RedisStoreOptions> o = ParseRedisUrl("redis://us%3Aer:p@ss:w%25rd@host");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->user, "us:er");
  EXPECT_EQ(o->password, "p@ss:w%rd");
  EXPECT_EQ(o->endpoints, (std::vector<RedisEndpoint>{{"host", 6379}}));
  o = ParseRedisUrl("redis://%41%62c:%7e@host");  // Hex digits of either case.
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->user, "Abc");
  EXPECT_EQ(o->password, "~");
}

TEST(ParseRedisUrlTest, RefusesAnEscapeWithoutTwoHexDigits) {
  for (const char* url : {"redis://u:abc%@host", "redis://u:abc%4@host", "redis://u%g1:p@host"}) {
    EXPECT_THAT(Error(url), HasSubstr("two hex digits")) << url;
  }
}

TEST(ParseRedisUrlTest, ReadsIpv6WithOrWithoutAPort) {
  absl::StatusOr<RedisStoreOptions> o = ParseRedisUrl("redis://[2001:db8::1]");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->endpoints, (std::vector<RedisEndpoint>{{"2001:db8::1", 6379}}));
  o = ParseRedisUrl("redis+cluster://[::1]:7000,[::2]:7001");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->endpoints, (std::vector<RedisEndpoint>{{"::1", 7000}, {"::2", 7001}}));
  EXPECT_THAT(Error("redis://[::1:7000"), HasSubstr("closing ']'"));
  EXPECT_THAT(Error("redis://[::1]7000"), HasSubstr("expected ':port' after ']'"));
  EXPECT_THAT(Error("redis://[]:7000"), HasSubstr("no host"));
}

TEST(ParseRedisUrlTest, ReadsTheDatabaseAsANumberThatFitsAnInt) {
  absl::StatusOr<RedisStoreOptions> o = ParseRedisUrl("redis://host/");  // Empty: database 0.
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->database, 0);
  o = ParseRedisUrl("redis://host/2147483647");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->database, 2147483647);
  o = ParseRedisUrl("redis+cluster://host/");  // A cluster may say database 0 by saying none.
  ASSERT_TRUE(o.ok()) << o.status();
  for (const char* url : {"redis://host/2147483648", "redis://host/99999999999", "redis://host/-1",
                          "redis://host/+1", "redis://host/ 1", "redis://host/1x"}) {
    EXPECT_THAT(Error(url), HasSubstr("is not a number")) << url;
  }
}

TEST(ParseRedisUrlTest, RefusesAnEmptyHostInAList) {
  EXPECT_THAT(Error("redis+cluster://a:1,,b:2"), HasSubstr("no host"));
  EXPECT_THAT(Error("redis+cluster://a:1,"), HasSubstr("no host"));
  EXPECT_THAT(Error("redis://"), HasSubstr("no host"));
  EXPECT_THAT(Error("redis://user:pw@"), HasSubstr("no host"));
  EXPECT_THAT(Error("redis+cluster://a:1,b:x"), HasSubstr("port 'x'"));
}

TEST(RedactRedisUrlTest, HidesThePasswordAndKeepsTheRest) {
  EXPECT_EQ(RedactRedisUrl("redis://:pw@host:1/2"), "redis://:***@host:1/2");
  EXPECT_EQ(RedactRedisUrl("redis://pw@host"), "redis://:***@host");  // A password alone.
  EXPECT_EQ(RedactRedisUrl("redis://u:p@ss@host"), "redis://u:***@host");
  EXPECT_EQ(RedactRedisUrl("redis+cluster://u:pw@a:1,b:2"), "redis+cluster://u:***@a:1,b:2");
  EXPECT_EQ(RedactRedisUrl("redis+cluster://a:1,b:2"), "redis+cluster://a:1,b:2");
  EXPECT_EQ(RedactRedisUrl("not a url@all"), "not a url@all");
}

TEST(ParseRedisUrlTest, NeverNamesThePasswordInAnError) {
  for (const char* url :
       {"redis://u:hunter2@host:99999", "redis://hunter2@host/db", "redis://u:hunter2@[::1",
        "redis://u:hunter2@a:1,b:2", "redis+cluster://u:hunter2@a:1/3", "redis://u:hunter2@"}) {
    const std::string error = Error(url);
    EXPECT_THAT(error, HasSubstr("***")) << url;
    EXPECT_THAT(error, ::testing::Not(HasSubstr("hunter2"))) << url;
  }
}

// unix://[[user]:password@]/path[?db=N], as redis-py and go-redis read it.
TEST(ParseRedisUrlTest, ReadsAUnixSocketWithItsDatabaseAndPassword) {
  absl::StatusOr<RedisStoreOptions> o = ParseRedisUrl("unix:///run/redis/redis.sock");
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_EQ(o->endpoints.size(), 1u);
  EXPECT_EQ(o->endpoints[0].socket, "/run/redis/redis.sock");
  EXPECT_EQ(RedisEndpointName(o->endpoints[0]), "unix:/run/redis/redis.sock");
  EXPECT_EQ(o->database, 0);
  EXPECT_FALSE(o->cluster);
  EXPECT_FALSE(o->tls.enabled);

  o = ParseRedisUrl("unix://al%40ce:p@ss@/var/run/a@b/redis.sock?db=5");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->user, "al@ce");
  EXPECT_EQ(o->password, "p@ss");  // The user info ends at the first "@/".
  EXPECT_EQ(o->endpoints[0].socket, "/var/run/a@b/redis.sock");
  EXPECT_EQ(o->database, 5);

  o = ParseRedisUrl("unix://secret@/tmp/r.sock");  // A password alone, as for redis://.
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->password, "secret");
  EXPECT_EQ(RedactRedisUrl("unix://u:secret@/tmp/a@b.sock"), "unix://u:***@/tmp/a@b.sock");
  EXPECT_EQ(RedactRedisUrl("unix:///tmp/a@b.sock"), "unix:///tmp/a@b.sock");
}

TEST(ParseRedisUrlTest, RefusesAUnixSocketItCannotUse) {
  EXPECT_THAT(Error("unix://redis.sock"), HasSubstr("must be absolute"));
  EXPECT_THAT(Error("unix://"), HasSubstr("must be absolute"));
  EXPECT_THAT(Error("unix:///r.sock?database=1"), HasSubstr("unknown query 'database=1'"));
  EXPECT_THAT(Error("unix:///r.sock?db=x"), HasSubstr("database 'x' is not a number"));
  EXPECT_THAT(Error("unix:///r.sock?db=-1"), HasSubstr("database '-1' is not a number"));
  EXPECT_THAT(Error("unix:///" + std::string(107, 'x')), HasSubstr("at most 107"));
  EXPECT_TRUE(ParseRedisUrl("unix:///" + std::string(106, 'x')).ok());
  const std::string error = Error("unix://u:hunter2@/r.sock?db=x");
  EXPECT_THAT(error, HasSubstr("***"));
  EXPECT_THAT(error, ::testing::Not(HasSubstr("hunter2")));
}

TEST(ParseRedisUrlTest, RedissIsRedisOverTls) {
  absl::StatusOr<RedisStoreOptions> o = ParseRedisUrl("rediss://:pw@cache.internal:6380/2");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->tls.enabled);
  EXPECT_TRUE(o->tls.verify_hostname);
  EXPECT_FALSE(o->cluster);
  EXPECT_EQ(o->endpoints, (std::vector<RedisEndpoint>{{"cache.internal", 6380}}));
  EXPECT_EQ(o->database, 2);
  o = ParseRedisUrl("rediss+cluster://a:7000,b:7001");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->tls.enabled);
  EXPECT_TRUE(o->cluster);
  EXPECT_EQ(o->endpoints, (std::vector<RedisEndpoint>{{"a", 7000}, {"b", 7001}}));
  o = ParseRedisUrl("redis://a");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->tls.enabled);
  EXPECT_THAT(Error("rediss+cluster://a:1/3"), HasSubstr("only database 0"));
  EXPECT_THAT(Error("redis+unix:///r.sock"), HasSubstr("unix:///path/to/redis.sock"));
}

// redis+sentinel://[[user]:password@]host[:port][,...]/master-name[?db=N&sentinel_user=U&
// sentinel_password=P]: the hosts are the sentinels (26379 by default), the user info the
// master's.
TEST(ParseRedisUrlTest, ReadsSentinelsTheMasterNameAndBothAuths) {
  absl::StatusOr<RedisStoreOptions> o = ParseRedisUrl(
      "redis+sentinel://u:p@ss%3F@a,b:26380,[::1]:7/my%20master?db=3&sentinel_user=s%40u&"
      "sentinel_password=x@y%26z");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->endpoints.empty());  // The sentinels name the master.
  EXPECT_FALSE(o->cluster);
  EXPECT_FALSE(o->tls.enabled);
  EXPECT_EQ(o->sentinel.endpoints,
            (std::vector<RedisEndpoint>{{"a", 26379}, {"b", 26380}, {"::1", 7}}));
  EXPECT_EQ(o->sentinel.master_name, "my master");
  EXPECT_EQ(o->user, "u");
  // The user info ends at the last '@' before the query (so a '?' in it is escaped).
  EXPECT_EQ(o->password, "p@ss?");
  EXPECT_EQ(o->database, 3);
  EXPECT_EQ(o->sentinel.user, "s@u");
  EXPECT_EQ(o->sentinel.password, "x@y&z");

  o = ParseRedisUrl("rediss+sentinel://s:1/m");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->tls.enabled);
  EXPECT_EQ(o->sentinel.master_name, "m");
  EXPECT_EQ(o->password, "");
  EXPECT_EQ(o->sentinel.password, "");
  EXPECT_EQ(o->database, 0);
}

TEST(ParseRedisUrlTest, RefusesASentinelUrlNamingWhatIsWrong) {
  EXPECT_THAT(Error("redis+sentinel://a:26379"), HasSubstr("no master name"));
  EXPECT_THAT(Error("redis+sentinel://a:26379/"), HasSubstr("no master name"));
  EXPECT_THAT(Error("redis+sentinel://a:26379/?db=1"), HasSubstr("no master name"));
  EXPECT_THAT(Error("redis+sentinel:///m"), HasSubstr("no sentinel"));
  EXPECT_THAT(Error("redis+sentinel://pw@/m"), HasSubstr("no sentinel"));
  EXPECT_THAT(Error("redis+sentinel://a:0/m"), HasSubstr("port '0'"));
  EXPECT_THAT(Error("redis+sentinel://a:1,,b/m"), HasSubstr("no host"));
  EXPECT_THAT(Error("redis+sentinel://a/m/2"), HasSubstr("holds a '/' (the database is ?db=N)"));
  EXPECT_THAT(Error("redis+sentinel://a/m%zz"), HasSubstr("master name"));
  EXPECT_THAT(Error("redis+sentinel://a/m?db=x"), HasSubstr("database 'x' is not a number"));
  EXPECT_THAT(Error("redis+sentinel://a/m?master=n"),
              HasSubstr("unknown query parameter 'master'"));
  EXPECT_THAT(Error("redis+sentinel://a/m?sentinel_password=%4"),
              HasSubstr("'%' in sentinel_password"));
  for (const char* url : {"redis+sentinel://u:hunter2@a:0/m",
                          "redis+sentinel://a/m?db=x&"
                          "sentinel_password=hunter2"}) {
    const std::string error = Error(url);
    EXPECT_THAT(error, HasSubstr("***")) << url;
    EXPECT_THAT(error, ::testing::Not(HasSubstr("hunter2"))) << url;
  }
}

TEST(RedactRedisUrlTest, HidesBothPasswordsOfASentinelUrl) {
  EXPECT_EQ(
      RedactRedisUrl("redis+sentinel://u:p@w@a,b/m?db=1&sentinel_password=x@y&sentinel_user=s"),
      "redis+sentinel://u:***@a,b/m?db=1&sentinel_password=***&sentinel_user=s");
  EXPECT_EQ(RedactRedisUrl("rediss+sentinel://a/m?sentinel_password=x"),
            "rediss+sentinel://a/m?sentinel_password=***");
  EXPECT_EQ(RedactRedisUrl("redis+sentinel://a/m"), "redis+sentinel://a/m");
}

TEST(RedisEndpointNameTest, NamesHostsAddressesAndSockets) {
  EXPECT_EQ(RedisEndpointName({"cache", 6380}), "cache:6380");
  EXPECT_EQ(RedisEndpointName({"::1", 7000}), "[::1]:7000");
  EXPECT_EQ(RedisEndpointName({.host = "", .port = 0, .socket = "/r.sock"}), "unix:/r.sock");
}

TEST(FailurePolicyTest, NamesReadBackAndOthersAreRefused) {
  for (FailurePolicy policy :
       {FailurePolicy::kAllow, FailurePolicy::kDeny, FailurePolicy::kLocal}) {
    absl::StatusOr<FailurePolicy> read = ParseFailurePolicy(FailurePolicyName(policy));
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(*read, policy);
  }
  EXPECT_EQ(FailurePolicyName(FailurePolicy::kLocal), "local");
  for (const char* name : {"", "Allow", "fail-open", "deny "}) {
    absl::StatusOr<FailurePolicy> read = ParseFailurePolicy(name);
    EXPECT_TRUE(absl::IsInvalidArgument(read.status())) << name;
    EXPECT_THAT(read.status().message(), HasSubstr("use allow, deny or local")) << name;
  }
}

}  // namespace
}  // namespace sluice
