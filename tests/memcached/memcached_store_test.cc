// MemcachedStore against a real memcached: its URLs and item names, the same decisions as
// MemoryStore on random traces for every algorithm and for several limits at once, threads of
// two stores on one hot key, hostile items and leases refused. Failures, policies and two
// servers are in memcached_failures_test.cc.

#include "sluice/memcached_store.h"

#include <algorithm>
#include <atomic>
#include <future>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "tests/memcached/fixtures.h"
#include "tests/testing/calendar_traces.h"
#include "tests/testing/random.h"
#include "tests/testing/several_limits.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MemcachedOptionsFor;
using testing::MemcachedServer;
using testing::MustLimit;
using testing::MustMemcached;
using namespace std::chrono_literals;

TEST(MemcachedUrlTest, ReadsServersWithDefaultPorts) {
  absl::StatusOr<MemcachedStoreOptions> o =
      ParseMemcachedUrl("memcached://10.0.0.1:11311,cache.local,[::1]:7000");
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_EQ(o->servers.size(), 3u);
  EXPECT_EQ(o->servers[0], (MemcachedEndpoint{.host = "10.0.0.1", .port = 11311}));
  EXPECT_EQ(o->servers[1], (MemcachedEndpoint{.host = "cache.local", .port = 11211}));
  EXPECT_EQ(o->servers[2], (MemcachedEndpoint{.host = "::1", .port = 7000}));
}

TEST(MemcachedUrlTest, RefusesWhatItCannotReadNamingThePart) {
  for (const char* url :
       {"redis://h", "memcached://", "memcached://h:0", "memcached://h:x", "memcached://h,,g",
        "memcached://u@h", "memcached://h/db", "memcached://[::1", "memcached://h:1,h:1"}) {
    absl::StatusOr<MemcachedStoreOptions> o = ParseMemcachedUrl(url);
    EXPECT_TRUE(absl::IsInvalidArgument(o.status())) << url;
    EXPECT_NE(o.status().message().find("memcached URL"), std::string_view::npos) << url;
  }
}

TEST(MemcachedStoreTest, ItemNamesArePrintableDistinctAndShort) {
  MemcachedServer server;
  auto store = MustMemcached(MemcachedOptionsFor({&server}));
  const Limit l = MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s});
  EXPECT_EQ(store->ItemKey(l, "alice"), "sluice:gcra%2010/1s%20burst%2010:alice");
  const std::string spaced = store->ItemKey(l, "a b");
  const std::string escaped = store->ItemKey(l, "a%20b");
  EXPECT_NE(spaced, escaped);
  const std::string long_key(300, 'x');
  const std::string hashed = store->ItemKey(l, long_key);
  EXPECT_LE(hashed.size(), 250u);
  EXPECT_NE(hashed, store->ItemKey(l, long_key + "y"));
  // A key of every byte is stored and decided like any other.
  std::string bytes;
  for (int c = 0; c < 256; ++c) {
    bytes += static_cast<char>(c);
  }
  absl::StatusOr<Decision> d = store->Decide(l, bytes, 1, At(kEpoch));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->allowed);
  EXPECT_EQ(d->remaining, 9);
}

struct Step {
  int64_t time;
  int key;
  int64_t cost;
};

class MemcachedDifferentialTest : public ::testing::TestWithParam<Algorithm> {};

// Random limits of the algorithm, each with a trace over three keys: gaps from none to days,
// now and then a step back in time, costs 0, 1 and past the burst. Half the trace goes
// through DecideAllAsync (one call at a time), half through Decide; the same trace goes
// through a MemoryStore.
TEST_P(MemcachedDifferentialTest, DecidesAsTheMemoryStoreDoesFigureForFigure) {
  MemcachedServer server;
  auto store = MustMemcached(MemcachedOptionsFor({&server}));
  testing::Random rnd(testing::Seed(20261126) + static_cast<uint64_t>(GetParam()));
  int allowed = 0;
  int denied = 0;
  for (int round = 0; round < 12; ++round) {
    MemoryStore memory;
    const Limit limit = rnd.LimitFor(*store, GetParam());
    // Keys of this round alone: each round starts afresh, as its MemoryStore does.
    const std::vector<std::string> keys = {fmt::format("alice.{}", round),
                                           fmt::format("bob.{}", round),
                                           fmt::format("{{carol}} {}", round)};
    int64_t t = kEpoch + rnd.Between(0, 1'000'000'000);
    for (int i = 0; i < 80; ++i) {
      t += rnd.OneIn(25) ? -rnd.Between(1, 2 * limit.period().count()) : rnd.Gap(limit);
      const Step step{t, static_cast<int>(rnd.Between(0, 2)), rnd.Cost(limit)};
      const std::string& key = keys[static_cast<size_t>(step.key)];
      absl::StatusOr<Decision> got;
      if (i % 2 == 0) {
        got = store->Decide(limit, key, step.cost, At(step.time));
      } else {
        const LimitedKey request{&limit, key};
        Decision each;
        std::promise<absl::StatusOr<Decision>> done;
        store->DecideAllAsync({&request, 1}, step.cost, At(step.time), {&each, 1},
                              [&done](absl::StatusOr<Decision> d) { done.set_value(d); });
        got = done.get_future().get();
        if (got.ok()) {
          ASSERT_EQ(each, *got);
        }
      }
      absl::StatusOr<Decision> want = memory.Decide(limit, key, step.cost, At(step.time));
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_EQ(*got, *want) << limit.ToString() << " round " << round << " step " << i << " at "
                             << step.time << " key " << key << " cost " << step.cost;
      (want->allowed ? allowed : denied) += 1;
    }
  }
  EXPECT_GT(allowed, 100);  // The traces exercise both answers.
  EXPECT_GT(denied, 30);
  EXPECT_EQ(store->Stats().failures, 0u);
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, MemcachedDifferentialTest,
                         ::testing::ValuesIn(testing::AllAlgorithms()), testing::AlgorithmTestName);

// Calendar quotas near the edges of real windows (tests/testing/calendar_traces.h): the same
// figures as the memory store's, and items named apart from a fixed period's.
TEST(MemcachedStoreTest, DecidesCalendarQuotasAsTheMemoryStore) {
  MemcachedServer server;
  auto store = MustMemcached(MemcachedOptionsFor({&server}));
  testing::Random rnd(testing::Seed(20261127));
  int allowed = 0;
  int denied = 0;
  for (int round = 0; round < 12; ++round) {
    MemoryStore memory;
    const testing::CalendarTrace trace = testing::RandomCalendarTrace(rnd, 60);
    const std::vector<std::string> keys = {fmt::format("alice.{}", round),
                                           fmt::format("bob.{}", round),
                                           fmt::format("{{carol}} {}", round)};
    for (const testing::CalendarStep& step : trace.steps) {
      const std::string& key = keys[static_cast<size_t>(step.key)];
      const absl::StatusOr<Decision> got =
          store->Decide(trace.limit, key, step.cost, At(step.time));
      const absl::StatusOr<Decision> want =
          memory.Decide(trace.limit, key, step.cost, At(step.time));
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_TRUE(want.ok()) << want.status();
      ASSERT_EQ(*got, *want) << trace.limit.ToString() << " round " << round << " at " << step.time
                             << " key " << key << " cost " << step.cost;
      (want->allowed ? allowed : denied) += 1;
    }
  }
  EXPECT_GT(allowed, 100);
  EXPECT_GT(denied, 100);
  const Limit calendar = MustLimit({.limit = 5, .calendar = Calendar{CalendarUnit::kDay, "UTC"}});
  const Limit fixed = MustLimit({.limit = 5, .period = CalendarPeriod(CalendarUnit::kDay)});
  EXPECT_NE(store->ItemKey(calendar, "k"), store->ItemKey(fixed, "k"));
}

TEST(MemcachedStoreTest, DecidesSeveralLimitsAllOrNothingAsTheMemoryStore) {
  MemcachedServer server;
  auto store = MustMemcached(MemcachedOptionsFor({&server}));
  testing::Random rnd(testing::Seed(11));
  testing::ExpectSeveralLimitsAsTheMemoryStore(
      *store, rnd, /*rounds=*/20, /*steps=*/50,
      [](int round) { return fmt::format("user.{}", round); });
}

// The race tests below loop, a fresh key each round, until the race they are named for has
// happened (the stores' own counters say so), checking the outcome of every round; a bound of
// rounds far above what a race needs (a round or two on any machine: six threads of two
// stores, each call several round trips) fails the test only if the race never comes.
constexpr int kMaxRounds = 200;

// Threads of two stores (two servers of a fleet) on one key, the clock frozen: exactly the
// limit is admitted, never more, whoever wins each cas; rounds until writes have collided
// (cas_conflicts), for each algorithm.
TEST(MemcachedStoreTest, ThreadsOfTwoStoresOnOneHotKeyAdmitExactlyTheLimit) {
  MemcachedServer server;
  MemcachedStoreOptions options = MemcachedOptionsFor({&server});
  options.cas_retries = 10'000;  // This test counts admissions; contention must not fail calls.
  auto a = MustMemcached(options);
  auto b = MustMemcached(options);
  for (const Algorithm algorithm : {Algorithm::kFixedWindow, Algorithm::kGcra,
                                    Algorithm::kSlidingWindow, Algorithm::kTokenBucket}) {
    const Limit limit =
        MustLimit({.algorithm = algorithm, .limit = 150, .period = 1h, .burst = 150});
    uint64_t conflicts = 0;
    int round = 0;
    for (; round < kMaxRounds && conflicts == 0; ++round) {
      const uint64_t before = a->Stats().cas_conflicts + b->Stats().cas_conflicts;
      const std::string key = fmt::format("hot.{}.{}", AlgorithmName(algorithm), round);
      std::atomic<int> admitted{0};
      std::atomic<int> errors{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < 6; ++t) {
        MemcachedStore& store = t % 2 == 0 ? *a : *b;
        threads.emplace_back([&] {
          for (int i = 0; i < 40; ++i) {
            absl::StatusOr<Decision> d = store.Decide(limit, key, 1, At(kEpoch));
            if (!d.ok()) {
              errors.fetch_add(1);
            } else if (d->allowed) {
              admitted.fetch_add(1);
            }
          }
        });
      }
      for (std::thread& t : threads) {
        t.join();
      }
      ASSERT_EQ(errors.load(), 0) << limit.ToString() << " round " << round;
      ASSERT_EQ(admitted.load(), 150) << limit.ToString() << " round " << round;  // 240 asked.
      conflicts = a->Stats().cas_conflicts + b->Stats().cas_conflicts - before;
    }
    EXPECT_GT(conflicts, 0u) << limit.ToString() << ": no write lost a cas in " << round
                             << " rounds: the race was never run";
    std::cout << "[ cas      ] " << AlgorithmName(algorithm) << ": " << conflicts
              << " conflicts in " << round << " round(s)\n";
  }
  EXPECT_EQ(a->Stats().cas_exhausted + b->Stats().cas_exhausted, 0u);
}

// Contention is no outage: under `allow`, with no cas retry at all, the calls that lose a race
// fail (ResourceExhausted) and are never admitted uncharged, so the admissions are exactly the
// limit however many were lost. Rounds until a call has lost one.
TEST(MemcachedStoreTest, ContentionIsNeverDecidedByTheFailurePolicy) {
  MemcachedServer server;
  MemcachedStoreOptions options = MemcachedOptionsFor({&server});
  options.cas_retries = 0;
  options.on_failure = FailurePolicy::kAllow;
  auto a = MustMemcached(options);
  auto b = MustMemcached(options);
  const Limit limit =
      MustLimit({.algorithm = Algorithm::kGcra, .limit = 100, .period = 1h, .burst = 100});
  int lost_in_all = 0;
  int round = 0;
  for (; round < kMaxRounds && lost_in_all == 0; ++round) {
    const std::string key = fmt::format("contended.{}", round);
    std::atomic<int> admitted{0};
    std::atomic<int> lost{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t) {
      MemcachedStore& store = t % 2 == 0 ? *a : *b;
      threads.emplace_back([&] {
        // Until this thread has seen the limit reached three times.
        for (int mine = 0; mine < 3;) {
          absl::StatusOr<Decision> d = store.Decide(limit, key, 1, At(kEpoch));
          if (!d.ok()) {
            EXPECT_TRUE(absl::IsResourceExhausted(d.status())) << d.status();
            lost.fetch_add(1);
          } else if (d->allowed) {
            admitted.fetch_add(1);
          } else {
            ++mine;
          }
        }
      });
    }
    for (std::thread& t : threads) {
      t.join();
    }
    ASSERT_EQ(admitted.load(), 100) << "round " << round << ": " << lost.load() << " lost";
    lost_in_all += lost.load();
  }
  EXPECT_GT(lost_in_all, 0) << "no call lost a cas in " << round << " rounds";
  const MemcachedStoreStats sa = a->Stats();
  const MemcachedStoreStats sb = b->Stats();
  EXPECT_EQ(sa.fallbacks + sb.fallbacks, 0u);
  EXPECT_EQ(sa.failures + sb.failures, 0u);  // Lost races are not failures.
  // Each lost call is one write that lost, with no retry left.
  EXPECT_EQ(sa.cas_exhausted + sb.cas_exhausted, static_cast<uint64_t>(lost_in_all));
  std::cout << "[ cas      ] lost to contention: " << lost_in_all << " in " << round
            << " round(s)\n";
}

// Threads of two stores asking a global limit and a user's limit together: all six ask the
// same users in the same order, so that their requests race for each user's two units. A
// request that passed the dry run but whose user's limit was taken by another thread before
// its charge gives its global charge back. Rounds (fresh keys) until a give-back has been
// made; in every round, each user admits exactly its limit, and what each limit holds
// afterwards is exactly what was admitted: every give-back was made.
TEST(MemcachedStoreTest, RacingRequestsOfTwoLimitsGiveBackWhatTheyDoNotUse) {
  MemcachedServer server;
  MemcachedStoreOptions options = MemcachedOptionsFor({&server});
  options.cas_retries = 10'000;
  auto a = MustMemcached(options);
  auto b = MustMemcached(options);
  const Limit global = MustLimit({.limit = 1000, .period = 1h});  // Never the one that denies.
  constexpr int kUserLimit = 2;
  const Limit user = MustLimit(
      {.algorithm = Algorithm::kGcra, .limit = kUserLimit, .period = 1h, .burst = kUserLimit});
  constexpr int kThreads = 6;
  constexpr int kUsers = 20;
  uint64_t given_back = 0;
  int round = 0;
  for (; round < kMaxRounds && given_back == 0; ++round) {
    const uint64_t before = a->Stats().give_backs + b->Stats().give_backs;
    const std::string global_key = fmt::format("g.{}", round);
    std::vector<std::atomic<int>> admitted(kUsers);
    std::atomic<int> errors{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        MemcachedStore& store = t % 2 == 0 ? *a : *b;
        for (int u = 0; u < kUsers; ++u) {
          const std::string name = fmt::format("u{}.{}", u, round);
          const LimitedKey requests[] = {{&global, global_key}, {&user, name}};
          Decision each[2];
          absl::StatusOr<Decision> d = store.DecideAll(requests, 1, At(kEpoch), each);
          if (!d.ok()) {
            errors.fetch_add(1);
          } else if (d->allowed) {
            admitted[static_cast<size_t>(u)].fetch_add(1);
          }
        }
      });
    }
    for (std::thread& t : threads) {
      t.join();
    }
    ASSERT_EQ(errors.load(), 0) << "round " << round;
    int total = 0;
    for (int u = 0; u < kUsers; ++u) {
      const int mine = admitted[static_cast<size_t>(u)].load();
      // Six asked: a request is denied only by the user's limit once it is spent, and a user's
      // charge is never given back (it is the last), so exactly the limit.
      EXPECT_EQ(mine, kUserLimit) << "round " << round << " user " << u;
      total += mine;
      absl::StatusOr<Decision> left =
          a->Decide(user, fmt::format("u{}.{}", u, round), 0, At(kEpoch));
      ASSERT_TRUE(left.ok()) << left.status();
      EXPECT_EQ(left->remaining, kUserLimit - mine) << "round " << round << " user " << u;
    }
    absl::StatusOr<Decision> left = a->Decide(global, global_key, 0, At(kEpoch));
    ASSERT_TRUE(left.ok()) << left.status();
    // Every global charge of a denied request is back.
    ASSERT_EQ(left->remaining, 1000 - total) << "round " << round;
    given_back = a->Stats().give_backs + b->Stats().give_backs - before;
  }
  EXPECT_GT(given_back, 0u) << "no request gave a charge back in " << round << " rounds";
  EXPECT_EQ(a->Stats().give_backs_failed + b->Stats().give_backs_failed, 0u);
  std::cout << "[ give-back ] " << given_back << " in " << round << " round(s)\n";
}

// Whose clock: each store decides at its caller's time. A server 2 ms ahead opens the next
// window 2 ms early, where a fresh window's quota is admitted; the server behind then sees
// time that ran backwards, which counts as no time passed: it is denied until the window the
// other opened ends, and the state stays whole.
TEST(MemcachedStoreTest, ASkewedClockMovesAWindowsEdgeAndNoMore) {
  MemcachedServer server;
  auto behind = MustMemcached(MemcachedOptionsFor({&server}));
  auto ahead = MustMemcached(MemcachedOptionsFor({&server}));
  const Limit l = MustLimit({.limit = 5, .period = 1s});
  const int64_t edge = kEpoch / 1'000'000 * 1'000'000 + 1'000'000;  // A window's end.
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(behind->Decide(l, "skew", 1, At(edge - 1'000))->allowed);
  }
  EXPECT_FALSE(behind->Decide(l, "skew", 1, At(edge - 999))->allowed);
  for (int i = 0; i < 5; ++i) {  // 2 ms ahead: the next window, its own quota.
    ASSERT_TRUE(ahead->Decide(l, "skew", 1, At(edge + 1'000))->allowed);
  }
  absl::StatusOr<Decision> late = behind->Decide(l, "skew", 1, At(edge - 500));
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_FALSE(late->allowed);
  EXPECT_EQ(late->retry_after, 999'000us);  // Until the window the other clock opened ends.
}

TEST(MemcachedStoreTest, ACostZeroQueryAndADenialWriteNothing) {
  MemcachedServer server;
  auto store = MustMemcached(MemcachedOptionsFor({&server}));
  const Limit l = MustLimit({.limit = 1, .period = 1s});
  ASSERT_TRUE(store->Decide(l, "q", 0, At(kEpoch)).ok());
  ASSERT_TRUE(store->Decide(l, "q", 2, At(kEpoch)).ok());
  EXPECT_FALSE(testing::Holds(server, store->ItemKey(l, "q")));
  ASSERT_TRUE(store->Decide(l, "q", 1, At(kEpoch)).ok());
  EXPECT_TRUE(testing::Holds(server, store->ItemKey(l, "q")));
}

TEST(MemcachedStoreTest, AnItemThatIsNotAStateIsAnErrorNoPolicyDecides) {
  MemcachedServer server;
  MemcachedStoreOptions options = MemcachedOptionsFor({&server});
  options.on_failure = FailurePolicy::kAllow;
  auto store = MustMemcached(options);
  const Limit l = MustLimit({.limit = 5, .period = 1s});
  internal::ServerHealth health({});
  auto raw = internal::MemcachedConnection::MakePrototype(options, health);
  ASSERT_TRUE(raw.ok());
  for (const std::string& value :
       {std::string("garbage"), std::string("\x01\x00", 2), std::string(40, '\xff')}) {
    const std::string item = store->ItemKey(l, "evil");
    absl::StatusOr<std::optional<internal::MemcachedItem>> old = (*raw)->Gets(item);
    ASSERT_TRUE(old.ok());
    if (old->has_value()) {
      ASSERT_TRUE(*(*raw)->Cas(item, value, 60, (*old)->cas));
    } else {
      ASSERT_TRUE(*(*raw)->Add(item, value, 60));
    }
    absl::StatusOr<Decision> d = store->Decide(l, "evil", 1, At(kEpoch));
    EXPECT_TRUE(absl::IsInternal(d.status())) << d.status();
    EXPECT_NE(d.status().message().find("does not hold a state"), std::string_view::npos);
  }
  EXPECT_EQ(store->Stats().fallbacks, 0u);
}

TEST(MemcachedStoreTest, LeasesAreUnimplementedAndSayWhy) {
  MemcachedServer server;
  auto store = MustMemcached(MemcachedOptionsFor({&server}));
  const LeasedKey keys[] = {{.key = "k", .capacity = 1}};
  Decision each[1];
  absl::StatusOr<Decision> d = store->LeaseAll(LeaseOp::kTake, keys, "id", 1s, At(kEpoch), each);
  EXPECT_TRUE(absl::IsUnimplemented(d.status())) << d.status();
  EXPECT_NE(d.status().message().find("Memcached"), std::string_view::npos);
}

TEST(MemcachedStoreTest, RefusesOptionsAndLimitsItCannotKeep) {
  MemcachedStoreOptions none;
  EXPECT_TRUE(absl::IsInvalidArgument(MemcachedStore::Create(none).status()));
  MemcachedStoreOptions spaced;
  spaced.servers.push_back({.host = "127.0.0.1"});
  spaced.key_prefix = "a b";
  EXPECT_TRUE(absl::IsInvalidArgument(MemcachedStore::Create(spaced).status()));
  // Memcached's clock may stand a second behind: a smaller margin could end a state early.
  MemcachedStoreOptions tight;
  tight.servers.push_back({.host = "127.0.0.1"});
  tight.expiry_margin = std::chrono::milliseconds(999);
  EXPECT_TRUE(absl::IsInvalidArgument(MemcachedStore::Create(tight).status()));
  const Limit buckets = MustLimit(
      {.algorithm = Algorithm::kSlidingBuckets, .limit = 10, .period = 20000s, .buckets = 20000});
  EXPECT_TRUE(absl::IsInvalidArgument(MemcachedStore::Supports(buckets)));
  const Limit log = MustLimit({.algorithm = Algorithm::kSlidingLog, .limit = 20000, .period = 1s});
  EXPECT_TRUE(absl::IsInvalidArgument(MemcachedStore::Supports(log)));
}

}  // namespace
}  // namespace sluice
