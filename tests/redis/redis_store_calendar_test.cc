// Calendar quotas on Redis: the script is sent the bounds of the windows around the caller's
// time and decides as the memory store does, figure for figure, near the edges of real
// windows (tests/testing/calendar_traces.h); on Redis's own clock too.

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "sluice/redis_store.h"
#include "tests/redis/fixtures.h"
#include "tests/testing/calendar_traces.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::At, testing::MustLimit, testing::MustStore, testing::OptionsFor;
using testing::RedisServer;

TEST(RedisCalendarTest, DecidesAsTheMemoryStoreDoesNearTheEdgesOfRealWindows) {
  RedisServer server;
  RedisStoreOptions options = OptionsFor(server);
  options.connections = 1;
  options.batch = 8;
  std::unique_ptr<RedisStore> redis = MustStore(options);
  testing::Random rnd(testing::Seed(20261127));
  const std::vector<std::string> keys = {"alice", "bob", "{carol}:x"};
  testing::Client client(server.port());
  int allowed = 0;
  int denied = 0;
  for (int round = 0; round < 30; ++round) {
    client.Run({"FLUSHALL"});
    MemoryStore memory;
    const testing::CalendarTrace trace = testing::RandomCalendarTrace(rnd, 80);
    const LimitedKey requests[] = {
        {&trace.limit, keys[0]}, {&trace.limit, keys[1]}, {&trace.limit, keys[2]}};
    std::vector<Decision> from_redis(trace.steps.size());
    std::vector<std::promise<absl::StatusOr<Decision>>> done(trace.steps.size());
    for (size_t i = 0; i < trace.steps.size(); ++i) {
      const testing::CalendarStep& s = trace.steps[i];
      redis->DecideAllAsync({&requests[s.key], 1}, s.cost, At(s.time), {&from_redis[i], 1},
                            [&done, i](absl::StatusOr<Decision> d) { done[i].set_value(d); });
    }
    std::vector<absl::StatusOr<Decision>> got;
    for (auto& d : done) {
      got.push_back(d.get_future().get());
    }
    for (size_t i = 0; i < trace.steps.size(); ++i) {
      const testing::CalendarStep& s = trace.steps[i];
      ASSERT_TRUE(got[i].ok()) << got[i].status();
      const absl::StatusOr<Decision> want =
          memory.Decide(trace.limit, keys[static_cast<size_t>(s.key)], s.cost, At(s.time));
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_EQ(*got[i], *want) << trace.limit.ToString() << " round " << round << " step " << i
                                << " at " << s.time << " key " << s.key << " cost " << s.cost;
      (want->allowed ? allowed : denied) += 1;
    }
  }
  EXPECT_GT(allowed, 200);  // Both answers, and windows that turned (denied, then allowed).
  EXPECT_GT(denied, 200);
}

// On Redis's own clock (TIME), sent the bounds around this host's: a day in UTC holds two,
// and the key's TTL ends with the day.
TEST(RedisCalendarTest, DecidesOnRedisTimeWithTheBoundsOfThisHostsWindows) {
  RedisServer server;
  RedisStoreOptions options = OptionsFor(server);
  options.use_caller_time = false;
  std::unique_ptr<RedisStore> redis = MustStore(options);
  const Limit day = MustLimit({.limit = 2, .calendar = Calendar{CalendarUnit::kDay, "UTC"}});
  const Timestamp now = SystemClock().Now();
  ASSERT_TRUE(redis->Decide(day, "k", 1, now).ok());
  const absl::StatusOr<Decision> second = redis->Decide(day, "k", 1, now);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->allowed);
  const absl::StatusOr<Decision> third = redis->Decide(day, "k", 1, now);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_FALSE(third->allowed);
  EXPECT_GT(third->retry_after, Micros{0});
  EXPECT_LE(third->retry_after, Micros{24h});
  testing::Client client(server.port());
  testing::Reply keys = client.Run({"KEYS", "*c0UTC:*"});  // The calendar is in the key's name.
  ASSERT_TRUE(keys && keys->type == REDIS_REPLY_ARRAY);
  ASSERT_EQ(keys->elements, 1u);
  testing::Reply ttl = client.Run({"PTTL", keys->element[0]->str});
  ASSERT_TRUE(ttl);
  EXPECT_GT(ttl->integer, 0);
  EXPECT_LE(ttl->integer, 24 * 3'600'000 + 1'000);  // The day's rest, plus expiry_margin.
}

}  // namespace
}  // namespace sluice
