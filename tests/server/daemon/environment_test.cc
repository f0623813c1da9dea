#include "server/daemon/environment.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sluice/redis_store.h"

namespace sluice::server {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Key;
using ::testing::Not;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

// The flags `environment` gives, by name; nothing given on the command line but `given`.
std::map<std::string, std::string> Flags(const Environment& environment,
                                         std::vector<std::string> given = {}) {
  absl::StatusOr<EnvSettings> settings =
      ReadEnvironment(environment, [&given](std::string_view flag) {
        return std::find(given.begin(), given.end(), flag) != given.end();
      });
  EXPECT_TRUE(settings.ok()) << settings.status();
  std::map<std::string, std::string> flags;
  for (const EnvFlag& flag : settings.ok() ? settings->flags : std::vector<EnvFlag>{}) {
    flags[flag.flag] = flag.value;
  }
  return flags;
}

// The error `environment` is refused with.
std::string Refusal(const Environment& environment) {
  absl::StatusOr<EnvSettings> settings =
      ReadEnvironment(environment, [](std::string_view) { return false; });
  EXPECT_FALSE(settings.ok());
  return settings.ok() ? "(accepted)" : std::string(settings.status().message());
}

TEST(EnvironmentTest, NothingOfTheirsGivesNothing) {
  EXPECT_THAT(Flags({{"HOME", "/root"}, {"PORT", ""}}), IsEmpty());  // Empty is unset.
}

// Names other programs use too apply alone, with their default for the other half, and
// bring no other default of theirs.
TEST(EnvironmentTest, SharedNamesApplyAlone) {
  EXPECT_THAT(Flags({{"PORT", "9000"}}), ElementsAre(Pair("--http", "0.0.0.0:9000")));
  EXPECT_THAT(Flags({{"HOST", "::1"}, {"LOG_LEVEL", "WARNING"}}),
              UnorderedElementsAre(Pair("--http", "[::1]:8080"), Pair("--log-level", "warn")));
}

// Their docker-compose-example.yml's ratelimit service: ports, debug port and the rest left to
// their defaults.
TEST(EnvironmentTest, TheirComposeExample) {
  const Environment environment = {{"USE_STATSD", "true"},
                                   {"STATSD_HOST", "statsd"},
                                   {"STATSD_PORT", "9125"},
                                   {"LOG_LEVEL", "debug"},
                                   {"REDIS_SOCKET_TYPE", "tcp"},
                                   {"REDIS_URL", "redis:6379"},
                                   {"RUNTIME_ROOT", "/data"},
                                   {"RUNTIME_SUBDIRECTORY", "ratelimit"},
                                   {"RUNTIME_WATCH_ROOT", "false"},
                                   {"CONFIG_TYPE", "FILE"},
                                   {"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s"}};
  EXPECT_THAT(
      Flags(environment),
      UnorderedElementsAre(Pair("--http", "0.0.0.0:8080"), Pair("--grpc", "0.0.0.0:8081"),
                           Pair("--log-level", "debug"), Pair("--config", "/data/ratelimit/config"),
                           Pair("--store", "redis://redis:6379"), Pair("--statsd", "statsd:9125")));
  absl::StatusOr<EnvSettings> settings =
      ReadEnvironment(environment, [](std::string_view) { return false; });
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_TRUE(settings->theirs);
  EXPECT_THAT(settings->ignored, ElementsAre("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"));
}

// CONFIG_TYPE=GRPC_XDS_SOTW: rules from xDS at their default address, or theirs; not from
// RUNTIME_ROOT's files.
TEST(EnvironmentTest, RulesFromXdsInsteadOfFiles) {
  const auto flags = Flags({{"CONFIG_TYPE", "grpc_xds_sotw"}, {"RUNTIME_ROOT", "/data"}});
  EXPECT_THAT(flags, Contains(Pair("--xds", "localhost:18000")));
  EXPECT_THAT(flags, Not(Contains(Key("--config"))));
  EXPECT_THAT(Flags({{"CONFIG_TYPE", "GRPC_XDS_SOTW"},
                     {"CONFIG_GRPC_XDS_SERVER_URL", "xds:9000"},
                     {"CONFIG_GRPC_XDS_NODE_ID", "node-1"},
                     {"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "1m30s"},
                     {"FORCE_START_WITHOUT_INITIAL_CONFIG", "true"}}),
              ::testing::IsSupersetOf({Pair("--xds", "xds:9000"), Pair("--xds-node-id", "node-1"),
                                       Pair("--xds-backoff-initial", "90s"),
                                       Pair("--xds-force-start", "true")}));
}

TEST(EnvironmentTest, TheirDefaultsInTheirEnvironment) {
  EXPECT_THAT(Flags({{"SHADOW_MODE", "True"}}),
              UnorderedElementsAre(
                  Pair("--http", "0.0.0.0:8080"), Pair("--grpc", "0.0.0.0:8081"),
                  Pair("--log-level", "warn"), Pair("--config", "/srv/runtime_data/current/config"),
                  Pair("--store", "unix:///var/run/nutcracker/ratelimit.sock"),
                  Pair("--statsd", "localhost:8125"), Pair("--shadow-mode", "true")));
}

TEST(EnvironmentTest, AFlagGivenLeavesItsVariablesUnread) {
  EXPECT_THAT(Flags({{"PORT", "abc"}, {"SHADOW_MODE", "maybe"}, {"DEBUG_PORT", "6070"}},
                    {"--http", "--shadow-mode", "--grpc", "--log-level", "--config", "--store",
                     "--statsd"}),
              ElementsAre(Pair("--debug", "0.0.0.0:6070")));
}

// Theirs: REDIS_URL "master,host:port,...", REDIS_AUTH the master's, REDIS_SENTINEL_AUTH the
// sentinels'; the URL they make is one ParseRedisUrl reads back.
TEST(EnvironmentTest, SentinelStore) {
  const Environment sentinel = {{"REDIS_TYPE", "SENTINEL"},
                                {"REDIS_URL", "my master, a:26379,b:26380"},
                                {"REDIS_AUTH", "p@ss"},
                                {"REDIS_SENTINEL_AUTH", "sen:t&nel"}};
  const std::string store = Flags(sentinel, {"--http", "--grpc"}).at("--store");
  EXPECT_EQ(store,
            "redis+sentinel://p%40ss@a:26379,b:26380/mymaster?sentinel_user=sen&"
            "sentinel_password=t%26nel");
  absl::StatusOr<RedisStoreOptions> options = ParseRedisUrl(store);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->sentinel.master_name, "mymaster");
  EXPECT_EQ(options->password, "p@ss");
  EXPECT_EQ(options->sentinel.user, "sen");
  EXPECT_EQ(options->sentinel.password, "t&nel");
  EXPECT_EQ(options->sentinel.endpoints, (std::vector<RedisEndpoint>{{"a", 26379}, {"b", 26380}}));
}

TEST(EnvironmentTest, TheStore) {
  const Environment cluster = {
      {"REDIS_TYPE", "CLUSTER"},       {"REDIS_URL", "a:7000, b:7001"},
      {"REDIS_AUTH", "us er:p@ss:w"},  {"REDIS_TLS", "true"},
      {"REDIS_TLS_CACERT", "/ca.pem"}, {"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "1"},
      {"REDIS_POOL_SIZE", "100"}};
  const std::map<std::string, std::string> flags = Flags(cluster, {"--http", "--grpc"});
  EXPECT_EQ(flags.at("--store"), "rediss+cluster://us%20er:p%40ss%3Aw@a:7000,b:7001");
  EXPECT_EQ(flags.at("--redis-tls-ca"), "/ca.pem");
  EXPECT_EQ(flags.at("--redis-tls-skip-verify"), "true");
  EXPECT_EQ(flags.at("--redis-connections"), "64");  // Their pool of 100, bounded.
  // Their cache of keys over the limit is the denial cache, in entries of 256 bytes.
  EXPECT_EQ(Flags({{"LOCAL_CACHE_SIZE_IN_BYTES", "1048576"}}).at("--redis-deny-cache"), "4096");
  EXPECT_FALSE(Flags({{"LOCAL_CACHE_SIZE_IN_BYTES", "0"}}).contains("--redis-deny-cache"));
  EXPECT_EQ(Flags({{"REDIS_URL", "/run/redis.sock"}, {"REDIS_AUTH", "secret"}}).at("--store"),
            "unix://secret@/run/redis.sock");
  EXPECT_EQ(
      Flags({{"REDIS_SOCKET_TYPE", "tcp"}, {"REDIS_URL", "h:1"}, {"REDIS_TLS", "t"}}).at("--store"),
      "rediss://h:1");
  EXPECT_EQ(Flags({{"REDIS_URL", "redis://h:1/2"}}).at("--store"), "redis://h:1/2");
}

TEST(EnvironmentTest, DurationsAsGoWritesThem) {
  for (const auto& [go, ours] :
       {std::pair{"1m30s", "90s"}, std::pair{"1.5s", "1500ms"}, std::pair{"250us", "250us"},
        std::pair{"100ns", "1us"}, std::pair{"2h", "2h"}}) {
    EXPECT_EQ(Flags({{"REDIS_TIMEOUT", go}}).at("--redis-timeout"), ours) << go;
  }
  // 0 is no timeout to them; sluiced always has one, and keeps its own.
  EXPECT_FALSE(Flags({{"REDIS_TIMEOUT", "0"}}).contains("--redis-timeout"));
}

TEST(EnvironmentTest, GrpcTls) {
  const std::map<std::string, std::string> flags =
      Flags({{"GRPC_SERVER_USE_TLS", "true"},
             {"GRPC_SERVER_TLS_CERT", "/c.pem"},
             {"GRPC_SERVER_TLS_KEY", "/k.pem"},
             {"GRPC_CLIENT_TLS_CACERT", "/ca.pem"}},
            {"--http", "--grpc", "--store", "--statsd"});
  EXPECT_EQ(flags.at("--grpc-tls-cert"), "/c.pem");
  EXPECT_EQ(flags.at("--grpc-tls-key"), "/k.pem");
  EXPECT_EQ(flags.at("--grpc-tls-client-ca"), "/ca.pem");
  // Without GRPC_SERVER_USE_TLS, the files are not read, as theirs.
  EXPECT_FALSE(Flags({{"GRPC_SERVER_TLS_CERT", "/c.pem"}}).contains("--grpc-tls-cert"));
}

// BACKEND_TYPE=memcache: MEMCACHE_HOST_PORT's servers as the Memcached store; Redis's store
// variables and the memcache ones sluiced has no use for are said to be ignored; DNS SRV
// discovery and TLS, which it does not do, refused naming their variable.
TEST(EnvironmentTest, MemcacheBackendIsTheMemcachedStore) {
  EXPECT_EQ(Flags({{"BACKEND_TYPE", "memcache"},
                   {"MEMCACHE_HOST_PORT", "10.0.0.1:11211, 10.0.0.2:11212"}})
                .at("--store"),
            "memcached://10.0.0.1:11211,10.0.0.2:11212");
  // Redis's timeout is the Memcached store's too.
  const auto flags = Flags(
      {{"BACKEND_TYPE", "MEMCACHE"}, {"MEMCACHE_HOST_PORT", "mc:11211"}, {"REDIS_TIMEOUT", "2s"}});
  EXPECT_EQ(flags.at("--store"), "memcached://mc:11211");
  EXPECT_EQ(flags.at("--redis-timeout"), "2s");
  absl::StatusOr<EnvSettings> settings = ReadEnvironment({{"BACKEND_TYPE", "memcache"},
                                                          {"MEMCACHE_HOST_PORT", "mc:11211"},
                                                          {"REDIS_URL", "redis:6379"},
                                                          {"MEMCACHE_MAX_IDLE_CONNS", "8"}},
                                                         [](std::string_view) { return false; });
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_THAT(settings->ignored, UnorderedElementsAre("MEMCACHE_MAX_IDLE_CONNS",
                                                      "REDIS_URL (BACKEND_TYPE is memcache)"));
  // Their default backend is Redis: the servers are not read, and said so.
  settings = ReadEnvironment(
      {{"MEMCACHE_HOST_PORT", "mc:11211"}, {"REDIS_URL", "r:6379"}, {"REDIS_SOCKET_TYPE", "tcp"}},
      [](std::string_view) { return false; });
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_THAT(settings->ignored, ElementsAre("MEMCACHE_HOST_PORT (BACKEND_TYPE is not memcache)"));
  EXPECT_THAT(Refusal({{"BACKEND_TYPE", "memcache"}, {"MEMCACHE_SRV", "_mc._tcp.example"}}),
              HasSubstr("MEMCACHE_SRV=_mc._tcp.example: sluiced does not discover"));
  EXPECT_THAT(
      Refusal(
          {{"BACKEND_TYPE", "memcache"}, {"MEMCACHE_HOST_PORT", "mc:1"}, {"MEMCACHE_TLS", "true"}}),
      HasSubstr("MEMCACHE_TLS=true: sluiced's Memcached store has no TLS"));
  EXPECT_THAT(Refusal({{"BACKEND_TYPE", "memcache"}, {"MEMCACHE_HOST_PORT", "a:1,,b:2"}}),
              HasSubstr("MEMCACHE_HOST_PORT=a:1,,b:2: an empty entry"));
}

TEST(EnvironmentTest, MalformedOrRefusedValuesNameTheirVariable) {
  EXPECT_THAT(Refusal({{"PORT", "abc"}}), HasSubstr("PORT=abc"));
  EXPECT_THAT(Refusal({{"GRPC_PORT", "70000"}}), HasSubstr("GRPC_PORT=70000"));
  EXPECT_THAT(Refusal({{"SHADOW_MODE", "yes"}}), HasSubstr("SHADOW_MODE=yes"));
  EXPECT_THAT(Refusal({{"REDIS_TIMEOUT", "10"}}), HasSubstr("REDIS_TIMEOUT=10"));
  EXPECT_THAT(Refusal({{"REDIS_POOL_SIZE", "0"}}), HasSubstr("REDIS_POOL_SIZE=0"));
  EXPECT_THAT(Refusal({{"LOCAL_CACHE_SIZE_IN_BYTES", "lots"}}),
              HasSubstr("LOCAL_CACHE_SIZE_IN_BYTES=lots"));
  EXPECT_THAT(Refusal({{"LOG_LEVEL", "loud"}}), HasSubstr("LOG_LEVEL=loud"));
  EXPECT_THAT(Refusal({{"NEAR_LIMIT_RATIO", "most"}}), HasSubstr("NEAR_LIMIT_RATIO=most"));
  EXPECT_THAT(Refusal({{"RUNTIME_WATCH_ROOT", "sometimes"}}), HasSubstr("RUNTIME_WATCH_ROOT"));
  EXPECT_THAT(Refusal({{"REDIS_TYPE", "sentinel"}, {"REDIS_URL", "mymaster"}}),
              HasSubstr("master-name,host:port"));
  EXPECT_THAT(Refusal({{"REDIS_TYPE", "replicas"}}), HasSubstr("SENTINEL"));
  EXPECT_THAT(Refusal({{"BACKEND_TYPE", "memcache"}}), HasSubstr("MEMCACHE_HOST_PORT is not set"));
  EXPECT_THAT(Refusal({{"BACKEND_TYPE", "memcached"}}), HasSubstr("expected redis or memcache"));
  EXPECT_THAT(Refusal({{"CONFIG_TYPE", "GRPC_XDS_DELTA"}}),
              HasSubstr("CONFIG_TYPE=GRPC_XDS_DELTA: expected FILE"));
  EXPECT_THAT(Refusal({{"GRPC_UDS", "/tmp/rl.sock"}}), HasSubstr("GRPC_UDS"));
  EXPECT_THAT(Refusal({{"GRPC_SERVER_USE_TLS", "true"}}), HasSubstr("GRPC_SERVER_TLS_CERT"));
  EXPECT_THAT(Refusal({{"REDIS_TLS", "true"}, {"REDIS_URL", "/s.sock"}}), HasSubstr("REDIS_TLS"));
}

}  // namespace
}  // namespace sluice::server
