// A change of limit on Redis (LimitedKey::before): a key that does not exist under the new
// figures adopts the newest earlier key that does, converted inside the script
// (src/redis/convert.lua) as ConvertState converts it; the earlier key stays for the servers
// that have not reloaded, marked so that it is carried once; a reset forgets the earlier keys
// too. Checked by hand, and against a model of the Redis keys on
// random traces of changes: small limits of every algorithm, limits of every size (the
// script's exactness), and calendar quotas near real window edges.

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "sluice/convert.h"
#include "sluice/redis_store.h"
#include "sluice/settle.h"
#include "src/redis/keys.h"
#include "tests/redis/fixtures.h"
#include "tests/testing/limit_changes.h"
#include "tests/testing/random.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;
using testing::Admit;
using testing::At;
using testing::MustLimit;
using testing::MustStore;
using testing::OptionsFor;
using testing::RedisServer;

constexpr int64_t kStart = testing::kHourStart;

// The debt a key of `limit` may carry through a change on Redis: the largest a settle may
// leave, and for the buckets no more than keeps (B + D) x P' within 2^52, the script's range.
int64_t RedisMaxDebt(const Limit& limit) {
  int64_t debt = kMaxDebt;
  if (UsesBurst(limit.algorithm())) {
    debt = std::min(debt, (int64_t{1} << 52) / limit.rate_period_us() - limit.burst());
  }
  return debt;
}

// The Redis keys of a store as a map of (figures, key) to state, with their marks, and what
// the script does with `before` (src/redis/convert.lua): when the key under the figures now
// does not exist, the newest earlier key that does is converted into it unless marked, and
// then marked (or deleted, when it had reset). Then the request is decided as Decide does,
// and written when it charged.
class KeysModel {
 public:
  Decision DecideAt(const Limit& limit, std::span<const Limit> before, const std::string& key,
                    int64_t cost, int64_t t) {
    const Id here{limit.ToString(), key};
    if (!keys_.contains(here)) {
      Adopt(limit, before, here, t);
    }
    const auto found = keys_.find(here);
    AnyState state = found != keys_.end() ? found->second : InitialState(limit.algorithm());
    const Decision d = Decide(limit, state, At(t), cost);
    if (d.allowed && cost > 0) {
      keys_[here] = state;
    }
    return d;
  }

  void Reset(const Limit& limit, std::span<const Limit> before, const std::string& key) {
    for (const Limit& l : before) {
      keys_.erase({l.ToString(), key});
      marked_.erase({l.ToString(), key});
    }
    keys_.erase({limit.ToString(), key});
    marked_.erase({limit.ToString(), key});
  }

  int adopted = 0;

 private:
  using Id = std::pair<std::string, std::string>;

  void Adopt(const Limit& limit, std::span<const Limit> before, const Id& here, int64_t t) {
    for (const Limit& earlier : before) {
      const auto there = keys_.find({earlier.ToString(), here.second});
      if (there == keys_.end()) {
        continue;
      }
      if (marked_.contains(there->first)) {
        return;
      }
      AnyState probe = there->second;
      if (Decide(earlier, probe, At(t), 0).reset_after == Micros{0}) {
        keys_.erase(there);
        return;
      }
      const AnyState carried =
          ConvertState(earlier, there->second, limit, At(t), RedisMaxDebt(limit));
      if (carried != InitialState(limit.algorithm())) {
        keys_[here] = carried;
        ++adopted;
      }
      marked_.insert(there->first);
      return;
    }
  }

  std::map<Id, AnyState> keys_;
  std::set<Id> marked_;
};

// Runs `changes` changes of `requests` requests each on keys "<run>.0" to "<run>.3" against the
// model, the limits drawn by `next_limit`, the gaps by `gap`, the costs by `cost`; every so often
// a reset. Fails at the first answer that differs.
template <typename NextLimit, typename Gap, typename Cost>
void CompareWithTheModel(RedisStore& redis, KeysModel& model, int run, int64_t start, int changes,
                         int requests, testing::Random& random, NextLimit next_limit, Gap gap,
                         Cost cost_of) {
  std::vector<Limit> history;
  int64_t t = start;
  const std::string prefix = std::to_string(run) + ".";
  for (int change = 0; change < changes; ++change) {
    const Limit limit = next_limit();
    const std::vector<Limit> before = testing::EarlierFigures(history, limit);
    history.insert(history.begin(), limit);
    for (int request = 0; request < requests; ++request) {
      t += gap(limit);
      const std::string key = prefix + std::to_string(random.Between(0, 3));
      const LimitedKey r{.limit = &limit, .key = key, .before = before};
      if (random.OneIn(60)) {
        ASSERT_TRUE(redis.ResetAll({&r, 1}, At(t)).ok());
        model.Reset(limit, before, key);
        continue;
      }
      const int64_t cost = cost_of(limit);
      const Decision want = model.DecideAt(limit, before, key, cost, t);
      Decision each[1];
      const absl::StatusOr<Decision> got = redis.DecideAll({&r, 1}, cost, At(t), each);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(*got, want) << "run " << run << ", change " << change << ", request " << request
                            << ": " << limit.ToString() << " from "
                            << (before.empty() ? "nothing" : before[0].ToString()) << ", key "
                            << key << ", cost " << cost << " at " << t;
    }
  }
}

TEST(RedisChangeTest, ALoweredOrRaisedLimitKeepsTheUnitsUsedAndAResetForgetsThem) {
  RedisServer server;
  std::unique_ptr<RedisStore> store = MustStore(OptionsFor(server));
  const Limit ten = MustLimit({.limit = 10, .period = 1h});
  const Limit four = MustLimit({.limit = 4, .period = 1h});
  const Limit twenty = MustLimit({.limit = 20, .period = 1h});
  EXPECT_EQ(Admit(*store, ten, {}, "a", kStart, 7), 7);
  EXPECT_EQ(Admit(*store, ten, {}, "b", kStart, 7), 7);
  const std::vector<Limit> from_ten = {ten};
  EXPECT_EQ(Admit(*store, four, from_ten, "a", kStart + 1, 5), 0);  // 7 used of 4.
  EXPECT_EQ(Admit(*store, four, {}, "a", kStart + 1, 5), 0);        // Found without `before`.
  EXPECT_EQ(Admit(*store, twenty, from_ten, "b", kStart + 1, 20), 13);
  EXPECT_EQ(Admit(*store, twenty, {}, "fresh", kStart + 1, 30), 20);
  // The earlier key stays, for the servers of a fleet that have not reloaded yet: they go on
  // from what it held (7 of 10), not afresh.
  EXPECT_EQ(Admit(*store, ten, {}, "a", kStart + 2, 10), 3);
  // A key that exists is never converted into: a change back finds "b" as it was before the
  // change (7 of 10), not what the 20 per hour admitted since, which stays on its own key.
  const std::vector<Limit> from_twenty = {twenty, ten};
  EXPECT_EQ(Admit(*store, ten, from_twenty, "b", kStart + 2, 5), 3);
  EXPECT_EQ(Admit(*store, twenty, from_ten, "b", kStart + 2, 5), 0);  // 20 used of 20.
  // Carried once only: when the new figures' key is gone (a shorter window ended), it starts
  // afresh rather than from the earlier key again.
  const Limit minute = MustLimit({.limit = 5, .period = 1min});
  EXPECT_EQ(Admit(*store, ten, {}, "m", kStart, 8), 8);
  EXPECT_EQ(Admit(*store, minute, from_ten, "m", kStart + 1, 5), 0);  // 8 used: a lump of 5.
  testing::Client client(server.port());
  client.Run({"DEL", internal::RedisKey(OptionsFor(server).key_prefix, minute, "m")});  // Expired.
  EXPECT_EQ(Admit(*store, minute, from_ten, "m", kStart + 60'000'000, 5), 5);
  // A reset forgets the key under its earlier figures too.
  EXPECT_EQ(Admit(*store, ten, {}, "c", kStart, 9), 9);
  const LimitedKey reset{.limit = &twenty, .key = "c", .before = from_ten};
  ASSERT_TRUE(store->ResetAll({&reset, 1}, At(kStart + 1)).ok());
  EXPECT_EQ(Admit(*store, twenty, from_ten, "c", kStart + 2, 30), 20);
  // A charge (a request that reports its receipts) and a split request adopt as a decision.
  const Limit per_key = MustLimit({.limit = 3, .period = 1h});
  EXPECT_EQ(Admit(*store, ten, {}, "d", kStart, 2), 2);
  const LimitedKey charged{.limit = &per_key, .key = "d", .before = from_ten};
  Decision each[1];
  Charge receipt[1];
  const absl::StatusOr<Decision> d =
      store->ChargeAll({&charged, 1}, 1, At(kStart + 3), each, receipt);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->remaining, 0);  // 2 carried, 1 charged, of 3.
}

// A hot key's share (SharePolicy) is taken under the new figures with the earlier ones named:
// its first take carries the key, as a decision does.
TEST(RedisChangeTest, AShareOfAHotKeyCarriesItsKeyToo) {
  RedisServer server;
  RedisStoreOptions options = OptionsFor(server);
  options.shares = true;
  std::unique_ptr<RedisStore> store = MustStore(options);
  const Limit ten = MustLimit({.limit = 10, .period = 1h});
  const Limit four = MustLimit({.limit = 4, .period = 1h});
  const SharePolicy policy{.max = 2, .ttl = 100ms};
  const std::vector<Limit> from_ten = {ten};
  EXPECT_EQ(Admit(*store, ten, {}, "hot", kStart, 7), 7);
  for (const bool named : {true, false}) {
    const LimitedKey request{
        .limit = &four,
        .key = named ? "hot" : "cold",
        .share = &policy,
        .before = named ? std::span<const Limit>(from_ten) : std::span<const Limit>()};
    Decision each[1];
    const absl::StatusOr<Decision> d = store->DecideAll({&request, 1}, 1, At(kStart + 1), each);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->allowed, !named) << (named ? "7 used of 4, carried" : "a key of its own");
  }
}

// A rollback during a rollout: servers on 10 per hour name 20 as earlier, servers on 20 name
// 10, and both decide on one key. Each set of figures counts on its own key (neither converts
// into a key that exists), so each admits what its own limit leaves: never more in all than
// both limits, and none of the admissions of one is undone by the other.
TEST(RedisChangeTest, ARollbackDuringARolloutHoldsEachServerToItsOwnLimit) {
  RedisServer server;
  std::unique_ptr<RedisStore> store = MustStore(OptionsFor(server));
  const Limit ten = MustLimit({.limit = 10, .period = 1h});
  const Limit twenty = MustLimit({.limit = 20, .period = 1h});
  const std::vector<Limit> from_ten = {ten};
  const std::vector<Limit> from_twenty = {twenty};
  EXPECT_EQ(Admit(*store, ten, {}, "k", kStart, 5), 5);
  const LimitedKey carry{.limit = &twenty, .key = "k", .before = from_ten};
  Decision each[1];
  const absl::StatusOr<Decision> carried = store->DecideAll({&carry, 1}, 0, At(kStart + 1), each);
  ASSERT_TRUE(carried.ok()) << carried.status();
  EXPECT_EQ(carried->remaining, 15);  // 5 of 20, carried.
  int64_t on_ten = 0;
  int64_t on_twenty = 0;
  for (int round = 0; round < 40; ++round) {
    on_ten += Admit(*store, ten, from_twenty, "k", kStart + 2 + round, 1);
    on_ten += Admit(*store, ten, from_twenty, "k", kStart + 2 + round, 1);
    on_twenty += Admit(*store, twenty, from_ten, "k", kStart + 2 + round, 1);
  }
  EXPECT_EQ(on_ten, 5);      // 10 less the 5 used before.
  EXPECT_EQ(on_twenty, 15);  // 20 less the 5 carried.
}

// A key in debt past what the new figures hold (a settle charged it up to its limit plus the
// largest debt) is capped there, the excess taken off its oldest units, as ConvertState does.
TEST(RedisChangeTest, AKeyInDebtPastTheNewCeilingIsCappedAsConvertStateCaps) {
  RedisServer server;
  const RedisStoreOptions options = OptionsFor(server);
  std::unique_ptr<RedisStore> redis = MustStore(options);
  testing::Client client(server.port());
  const int64_t most = kMaxDebt;
  const Limit ten =
      MustLimit({.algorithm = Algorithm::kSlidingBuckets, .limit = 10, .period = 1h, .buckets = 2});
  const Limit four =
      MustLimit({.algorithm = Algorithm::kSlidingBuckets, .limit = 4, .period = 1h, .buckets = 2});
  const int64_t width = 1800'000'000;
  const int64_t bucket = kStart / width;
  SlidingBucketsState state{.last = kStart};
  state.buckets.Add(bucket - 1, 600'000'000'000'000);
  state.buckets.Add(bucket, 400'000'000'000'010);  // 10 + 10^15 in all: full, at the most debt.
  const std::string earlier = internal::RedisKey(options.key_prefix, ten, "debt");
  client.Run({"RPUSH", earlier, fmt::format("{} 600000000000000", bucket - 1),
              fmt::format("{} 400000000000010", bucket), fmt::format("{} {}", kStart, 10 + most)});
  client.Run({"PEXPIRE", earlier, "600000"});
  const std::vector<Limit> from_ten = {ten};
  EXPECT_EQ(Admit(*redis, four, from_ten, "debt", kStart + 1, 1), 0);
  const auto want =
      std::get<SlidingBucketsState>(ConvertState(ten, state, four, At(kStart + 1), kMaxDebt));
  std::vector<std::string> entries;
  for (const CountQueue::Entry& e : want.buckets.entries()) {
    entries.push_back(fmt::format("{} {}", e.index, e.count));
  }
  entries.push_back(fmt::format("{} {}", want.last, want.buckets.total()));
  ASSERT_EQ(entries[0], fmt::format("{} 599999999999994", bucket - 1));  // 6 taken off.
  const testing::Reply list =
      client.Run({"LRANGE", internal::RedisKey(options.key_prefix, four, "debt"), "0", "-1"});
  ASSERT_NE(list.get(), nullptr);
  std::vector<std::string> got;
  for (size_t i = 0; i < list->elements; ++i) {
    got.emplace_back(list->element[i]->str, list->element[i]->len);
  }
  EXPECT_EQ(got, entries);
  // The earlier key stays, marked as carried, for as long as it lives.
  EXPECT_EQ(client.Run({"EXISTS", earlier})->integer, 1);
  const std::string mark = internal::CarriedKey(options.key_prefix, ten, "debt");
  EXPECT_EQ(client.Run({"EXISTS", mark})->integer, 1);
  EXPECT_GT(client.Run({"PTTL", mark})->integer, 0);
}

// Small limits of every algorithm, changed eight times a run: every pair of shapes, keys that
// fill, drain and reset.
TEST(RedisChangeTest, DecidesAsAModelOfItsKeysThroughRandomChangesOfSmallLimits) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = MustStore(OptionsFor(server));
  testing::Random random(testing::Seed(3402));
  KeysModel model;
  for (int run = 0; run < 12; ++run) {
    CompareWithTheModel(
        *redis, model, run, kStart + run * 1'000'000'000LL, 8, 40, random,
        [&] { return testing::RandomSmallLimit(random); },
        [&](const Limit&) { return random.Between(0, 400); },
        [&](const Limit&) { return random.Between(0, 3); });
  }
  EXPECT_GT(model.adopted, 20);  // The traces moved states, not only started afresh.
}

// Limits of every size the Redis store takes, from 1 per us to a billion per 400 days: the
// script's products stay exact (or capped where only their minimum matters) as Int128 does.
TEST(RedisChangeTest, ConvertsLimitsOfEverySizeExactly) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = MustStore(OptionsFor(server));
  testing::Random random(testing::Seed(3403));
  KeysModel model;
  for (int run = 0; run < 30; ++run) {
    CompareWithTheModel(
        *redis, model, run, kStart, 6, 12, random,
        [&] { return random.LimitFor(*redis, static_cast<Algorithm>(random.Between(0, 6))); },
        // Now and then back in time: the script then reads a TAT ahead of now.
        [&](const Limit& l) {
          return random.OneIn(8) ? -random.Between(0, l.period().count()) : random.Gap(l);
        },
        [&](const Limit& l) {
          const int64_t capacity = UsesBurst(l.algorithm()) ? l.burst() : l.limit();
          return random.OneIn(2) ? random.Between(0, capacity) : random.Cost(l);
        });
  }
  EXPECT_GT(model.adopted, 30);
}

// Calendar quotas (days, weeks, months in Berlin and New York) changed to and from each other
// and to limits of other shapes, over days that DST made 23 and 25 hours long: the bounds and
// the window counts the server sends let the script convert as ConvertState does.
TEST(RedisChangeTest, ConvertsCalendarQuotasNearRealWindowEdges) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = MustStore(OptionsFor(server));
  testing::Random random(testing::Seed(3404));
  KeysModel model;
  const auto calendar = [](CalendarUnit unit, const char* zone) {
    return Calendar{.unit = unit, .time_zone = zone};
  };
  const int64_t n = 0;  // Drawn per change below.
  const std::vector<LimitSpec> shapes = {
      {.limit = n, .calendar = calendar(CalendarUnit::kDay, "Europe/Berlin")},
      {.limit = n, .calendar = calendar(CalendarUnit::kWeek, "Europe/Berlin")},
      {.limit = n, .calendar = calendar(CalendarUnit::kMonth, "Europe/Berlin")},
      {.limit = n, .calendar = calendar(CalendarUnit::kDay, "America/New_York")},
      {.limit = n, .period = 1h},
      {.algorithm = Algorithm::kSlidingWindow, .limit = n, .period = 6h},
      {.algorithm = Algorithm::kSlidingLog, .limit = n, .period = 240h},
      {.algorithm = Algorithm::kTokenBucket, .limit = n, .period = 24h},
      {.algorithm = Algorithm::kGcra, .limit = n, .period = 48h},
  };
  // Two days before Berlin's 23-hour day (2024-03-31) and its 25-hour one (2024-10-27).
  const int64_t starts[] = {(1711839600LL - 2 * 86400) * 1'000'000,
                            (1729980000LL - 2 * 86400) * 1'000'000};
  for (int run = 0; run < 16; ++run) {
    CompareWithTheModel(
        *redis, model, run, starts[run % 2], 8, 30, random,
        [&] {
          LimitSpec spec = shapes[static_cast<size_t>(random.Between(0, 8))];
          // Large limits too, so that what an earlier quota would still admit in the new
          // one's first window (all its windows that start there) decides the units carried.
          spec.limit = random.OneIn(3) ? random.Between(20, 200) : random.Between(1, 6);
          return MustLimit(spec);
        },
        [&](const Limit&) { return random.Between(0, 3 * 3'600'000'000LL); },
        [&](const Limit&) { return random.Between(0, 3); });
  }
  EXPECT_GT(model.adopted, 20);
}

// The record a fleet shares (sluiced keeps each limit's figures there): fields written a few
// at a time are read back whole, a field written again holds its last value, and a name that
// would break the key's slot is refused.
TEST(RedisRecordTest, WritesAndReadsAHashOfFields) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = MustStore(OptionsFor(server));
  absl::StatusOr<RedisStore::Record> empty = redis->ReadRecord("limits");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
  const std::vector<std::pair<std::string, std::string>> first = {{"a", "1"}, {"b\n\t", "2 3"}};
  const std::vector<std::pair<std::string, std::string>> second = {{"a", "4"}, {"c", ""}};
  ASSERT_TRUE(redis->WriteRecord("limits", first).ok());
  ASSERT_TRUE(redis->WriteRecord("limits", second).ok());
  ASSERT_TRUE(redis->WriteRecord("limits", {}).ok());
  absl::StatusOr<RedisStore::Record> record = redis->ReadRecord("limits");
  ASSERT_TRUE(record.ok()) << record.status();
  std::sort(record->begin(), record->end());
  EXPECT_EQ(*record, (RedisStore::Record{{"a", "4"}, {"b\n\t", "2 3"}, {"c", ""}}));
  testing::Client client(server.port());
  EXPECT_EQ(client.Run({"HLEN", OptionsFor(server).key_prefix + "limits"})->integer, 3);
  // More fields than one script call reads (HSCAN, 500 a part): all of them, once each.
  std::vector<std::pair<std::string, std::string>> many;
  for (int i = 0; i < 3000; ++i) {
    many.emplace_back("f" + std::to_string(i), std::to_string(i));
  }
  ASSERT_TRUE(redis->WriteRecord("many", many).ok());
  absl::StatusOr<RedisStore::Record> all = redis->ReadRecord("many");
  ASSERT_TRUE(all.ok()) << all.status();
  std::sort(all->begin(), all->end());
  std::sort(many.begin(), many.end());
  EXPECT_EQ(*all, many);
  for (const char* bad : {"", "{x}", "a}"}) {
    EXPECT_EQ(redis->ReadRecord(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(redis->WriteRecord(bad, first).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace sluice
