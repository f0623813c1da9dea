// A connection's reading of Redis's TIME, on which each script call's `expires` is built
// (call.h): read again every minute while calls are sent, never used once two minutes old
// (the first batch after an idle spell waits for a fresh one), and when Redis refuses TIME,
// asked again a minute later rather than before every batch, said once, the calls going
// without `expires` once the last reading is too old.
//
// The store's steady clock is moved ahead (AheadClock) to age the reading without waiting;
// what each script call carried is read from Redis's SLOWLOG (every command logged), and
// how often TIME was asked and refused from INFO commandstats.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sluice/redis_store.h"
#include "tests/redis/fixtures.h"
#include "tests/redis/log_lines.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using ::testing::MatchesRegex;
using namespace std::chrono_literals;
using testing::At, testing::kEpoch, testing::MustLimit, testing::MustStore, testing::OptionsFor;
using testing::RedisServer;

// `field` (calls, rejected_calls) of TIME's line in INFO commandstats; 0 before any.
int64_t TimeStat(testing::Client& client, const std::string& field) {
  testing::Reply info = client.Run({"INFO", "commandstats"});
  if (!info || info->str == nullptr) {
    ADD_FAILURE() << "INFO commandstats failed";
    return -1;
  }
  // cmdstat_time:calls=2,usec=...,rejected_calls=1,...
  const std::string_view text(info->str, info->len);
  const std::string_view head = "cmdstat_time:";
  size_t at = text.find(head);
  if (at == std::string_view::npos) {
    return 0;
  }
  std::string_view line = text.substr(at + head.size());
  line = line.substr(0, line.find('\r'));
  for (const std::string_view before : {std::string_view(""), std::string_view(",")}) {
    const std::string key = std::string(before) + field + "=";
    at = line.find(key);
    if (at != std::string_view::npos && (at == 0) == before.empty()) {
      return std::stoll(std::string(line.substr(at + key.size())));
    }
  }
  return 0;
}

// The `expires` the latest script call carried (ARGV[3]: "" for none), and Redis's time when
// it ran (seconds), from SLOWLOG; nullopt when none is logged.
struct Sent {
  std::string expires;
  int64_t at_s = 0;
};
std::optional<Sent> LastScriptCall(testing::Client& client) {
  testing::Reply log = client.Run({"SLOWLOG", "GET", "100"});
  if (!log || log->type != REDIS_REPLY_ARRAY) {
    ADD_FAILURE() << "SLOWLOG GET failed";
    return std::nullopt;
  }
  for (size_t i = 0; i < log->elements; ++i) {  // The newest first.
    const redisReply& entry = *log->element[i];
    const redisReply& args = *entry.element[3];
    // EVALSHA sha numkeys key margin count expires ...: one key a call.
    if (args.elements > 6 && std::string(args.element[0]->str) == "EVALSHA") {
      return Sent{.expires = std::string(args.element[6]->str, args.element[6]->len),
                  .at_s = entry.element[1]->integer};
    }
  }
  return std::nullopt;
}

// The `expires` of the latest script call ("" for none); "(no script call logged)" when none is.
std::string LastExpires(testing::Client& client) {
  std::optional<Sent> sent = LastScriptCall(client);
  return sent ? sent->expires : "(no script call logged)";
}

class RedisTimeTest : public ::testing::Test {
 protected:
  // A store of one connection on `server`, as `url` says, on clock_; calls answered within a
  // minute (a watchdog: the test moves clock_, not the real one).
  std::unique_ptr<RedisStore> Store(const std::string& url) {
    RedisStoreOptions options = OptionsFor(url);
    options.connections = 1;
    options.timeout = 60s;
    options.steady_clock_for_testing = clock_.Fn();
    options.log = lines_.Sink();
    return MustStore(options);
  }
  void Decide(RedisStore& redis, int n = 1) {
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<Decision> d = redis.Decide(limit_, "k", 1, At(kEpoch));
      ASSERT_TRUE(d.ok()) << d.status();
    }
  }

  testing::AheadClock clock_;
  testing::Lines lines_;
  const Limit limit_ = MustLimit({.limit = 1000, .period = 1h});
};

TEST_F(RedisTimeTest, TheFirstBatchAfterAnIdleSpellIsBuiltOnAFreshReading) {
  RedisServer server;
  testing::Client client(server.port());
  client.Run({"CONFIG", "SET", "slowlog-log-slower-than", "0"});
  std::unique_ptr<RedisStore> redis = Store(server.url());
  Decide(*redis);
  clock_.Advance(10min);  // Idle: the reading is ten minutes old.
  Decide(*redis);
  std::optional<Sent> sent = LastScriptCall(client);
  ASSERT_TRUE(sent.has_value());
  ASSERT_FALSE(sent->expires.empty());
  // On a fresh reading, its deadline (a minute away) on Redis's clock; on the old one, ten
  // minutes later than that.
  EXPECT_LE(std::stoll(sent->expires), (sent->at_s + 1) * 1'000'000 + 60'000'000)
      << "Redis ran it at " << sent->at_s << " s";
  // The handshake's, one after the idle spell, and the script's own in each of the two calls.
  EXPECT_EQ(TimeStat(client, "calls"), 4);
}

TEST_F(RedisTimeTest, ATimeRefusedAfterAGoodOneIsAskedAgainAMinuteLaterAndSaidOnce) {
  RedisServer server({"--user", "worker", "on", ">w0rk", "~*", "&*", "+@all"});
  testing::Client client(server.port());
  client.Run({"CONFIG", "SET", "slowlog-log-slower-than", "0"});
  std::unique_ptr<RedisStore> redis =
      Store("redis://worker:w0rk@127.0.0.1:" + std::to_string(server.port()));
  Decide(*redis);
  ASSERT_THAT(LastExpires(client), MatchesRegex("[0-9]+"));

  // TIME refused from now on (the script's own TIME too: with the caller's time, a call
  // without `expires` needs none).
  client.Run({"ACL", "SETUSER", "worker", "-time"});
  clock_.Advance(3min);
  // The first batch waits for TIME, which is refused: it goes without `expires` (before, it
  // carried one built on the three-minute-old reading). Before, TIME was asked again before
  // each of the five batches.
  Decide(*redis, 5);
  EXPECT_EQ(TimeStat(client, "rejected_calls"), 1);
  EXPECT_EQ(LastExpires(client), "");
  EXPECT_EQ(lines_.Count("refused TIME"), 1) << testing::Joined(lines_.Get());

  clock_.Advance(61s);  // Asked again, refused again, not said again.
  Decide(*redis, 3);
  EXPECT_EQ(TimeStat(client, "rejected_calls"), 2);
  EXPECT_EQ(lines_.Count("refused TIME"), 1) << testing::Joined(lines_.Get());

  client.Run({"ACL", "SETUSER", "worker", "+time"});
  clock_.Advance(61s);
  Decide(*redis);  // Goes as it is (TIME was refused last), the TIME along with it...
  Decide(*redis);  // ... and this one carries `expires` again.
  EXPECT_THAT(LastExpires(client), MatchesRegex("[0-9]+"));
  EXPECT_EQ(lines_.Count("answers TIME again"), 1) << testing::Joined(lines_.Get());
  EXPECT_EQ(redis->Stats().failures, 0u);
  EXPECT_EQ(redis->Stats().reconnects, 0u);
}

}  // namespace
}  // namespace sluice
