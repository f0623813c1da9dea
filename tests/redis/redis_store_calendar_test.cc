// Calendar quotas on Redis: the script is sent the bounds of the windows around the caller's
// time and decides as the memory store does, figure for figure, near the edges of real
// windows (tests/testing/calendar_traces.h); on Redis's own clock too.

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "sluice/memory_store.h"
#include "sluice/redis_store.h"
#include "sluice/settle.h"
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
  // The day's rest, plus expiry_margin (600 s here: a bound of 1 s failed in the first ten
  // minutes of every UTC day).
  EXPECT_LE(ttl->integer, 24 * 3'600'000 + options.expiry_margin.count());
}

// Charges, settles (below, at and above the charge, with a debt bound) and their give-backs
// across the edge of a real window: what Redis gives back, charges and answers after, and
// every decision, equal to the C++ reference's (src/core/settle.cc), figure for figure.
TEST(RedisCalendarTest, SettlesAsTheReferenceDoesAcrossAWindowsEdge) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = MustStore(OptionsFor(server));
  testing::Random rnd(testing::Seed(20261128));
  testing::Client client(server.port());
  const std::vector<std::string> keys = {"alice", "bob"};
  int given = 0;
  int charged = 0;
  for (int round = 0; round < 80; ++round) {
    client.Run({"FLUSHALL"});
    const testing::CalendarTrace trace = testing::RandomCalendarTrace(rnd, 1);
    const Limit& limit = trace.limit;
    std::vector<AnyState> states(keys.size(), InitialState(Algorithm::kFixedWindow));
    struct Out {
      size_t key;
      Charge charge;
    };
    std::vector<Out> out;
    int64_t t = trace.steps[0].time - 2 * 3'600'000'000LL;
    for (int step = 0; step < 60; ++step) {
      t += rnd.Between(0, 240'000'000);  // Up to 4 minutes: 4 hours in all, across the edge.
      SCOPED_TRACE(limit.ToString() + " round " + std::to_string(round) + " step " +
                   std::to_string(step) + " t=" + std::to_string(t));
      if (!out.empty() && rnd.OneIn(2)) {
        const size_t i = static_cast<size_t>(rnd.Between(0, static_cast<int64_t>(out.size()) - 1));
        const Out o = out[i];
        out.erase(out.begin() + static_cast<std::ptrdiff_t>(i));
        const Settlement settlement{.charge = o.charge,
                                    .units = rnd.Between(0, o.charge.units + limit.limit()),
                                    .max_debt = rnd.Between(0, 3)};
        const Settled want = Settle(limit, states[o.key], At(t), settlement);
        const LimitedKey request{&limit, keys[o.key]};
        Settled got;
        ASSERT_TRUE(
            redis->SettleAll({&request, 1}, {&settlement, 1}, "", At(t), At(t), {&got, 1}).ok());
        ASSERT_EQ(got, want) << "settle " << settlement.units << " of " << o.charge.units;
        given += want.given_back > 0 ? 1 : 0;
        charged += want.charged > 0 ? 1 : 0;
        continue;
      }
      const size_t key = static_cast<size_t>(rnd.Between(0, 1));
      const LimitedKey request{&limit, keys[key]};
      const int64_t cost = rnd.Between(0, 3);
      Decision got;
      Charge receipt;
      ASSERT_TRUE(redis->ChargeAll({&request, 1}, cost, At(t), {&got, 1}, {&receipt, 1}).ok());
      const Decision want = Decide(limit, std::get<FixedWindowState>(states[key]), At(t), cost);
      ASSERT_EQ(got, want) << "charge of " << cost;
      if (want.allowed && cost > 0) {
        out.push_back({key, receipt});
      }
    }
  }
  EXPECT_GT(given, 80);
  EXPECT_GT(charged, 20);
}

// A key written by a server whose clock ran three days ahead, asked about a calendar day by
// one on time: the script cannot place the key's time in the windows it was sent, and says so
// as an error the failure policy decides (deny: Unavailable), never as an admission.
TEST(RedisCalendarTest, AKeyADayAheadOfTheWindowsSentIsAClockError) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = MustStore(OptionsFor(server));
  const Limit day = MustLimit({.limit = 5, .calendar = Calendar{CalendarUnit::kDay, "UTC"}});
  constexpr int64_t kDay = 86'400'000'000;
  const int64_t t = 1'735'689'600'000'000;  // 2025-01-01T00:00Z
  ASSERT_TRUE(redis->Decide(day, "k", 1, At(t + 3 * kDay)).ok());
  const absl::StatusOr<Decision> behind = redis->Decide(day, "k", 1, At(t));
  ASSERT_FALSE(behind.ok());
  EXPECT_TRUE(absl::IsUnavailable(behind.status())) << behind.status();
  EXPECT_NE(behind.status().message().find("CLOCK sluice"), std::string_view::npos)
      << behind.status();
  // A day behind is still in the windows sent: decided, in the key's day.
  const absl::StatusOr<Decision> near = redis->Decide(day, "k", 1, At(t + 2 * kDay + 1));
  ASSERT_TRUE(near.ok()) << near.status();
  EXPECT_EQ(near->remaining, 3);
}

}  // namespace
}  // namespace sluice
