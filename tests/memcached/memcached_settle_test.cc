// MemcachedStore's settles (sluice/store.h, sluice/settle.h) against a real memcached: below,
// equal to and above the charge for every algorithm as the memory store settles them; `once`
// claims replayed on one store and on a second store sharing the memcached; the claim's
// exptime; resets seen by a second store; a server killed (the settle fails, the units stay
// charged; under `local` the extra is charged there); and seeded random traces of charges,
// settles and resets (the seed is printed; replay with SLUICE_SEED=...) decided figure for
// figure as by a MemoryStore.

#include <future>
#include <optional>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "sluice/memcached_store.h"
#include "sluice/memory_store.h"
#include "sluice/settle.h"
#include "src/memcached/item.h"
#include "tests/memcached/fixtures.h"
#include "tests/testing/random.h"
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

struct Charged {
  absl::StatusOr<Decision> decision;
  std::vector<Charge> charges;
};

// One request of `cost` on `key` under every limit of `limits`, with its charges.
Charged ChargeOn(Store& store, const std::vector<Limit>& limits, std::string_view key, int64_t cost,
                 int64_t t) {
  std::vector<LimitedKey> requests;
  for (const Limit& limit : limits) {
    requests.push_back({.limit = &limit, .key = key});
  }
  std::vector<Decision> each(limits.size());
  Charged c;
  c.charges.resize(limits.size());
  c.decision = store.ChargeAll(requests, cost, At(t), each, c.charges);
  return c;
}

struct SettleResult {
  absl::Status status;
  std::vector<Settled> settled;
  friend bool operator==(const SettleResult&, const SettleResult&) = default;
};

SettleResult SettleOn(Store& store, const std::vector<Limit>& limits, std::string_view key,
                      const std::vector<Settlement>& settlements, int64_t t,
                      std::string_view once = "", int64_t once_until = 0) {
  std::vector<LimitedKey> requests;
  for (const Limit& limit : limits) {
    requests.push_back({.limit = &limit, .key = key});
  }
  SettleResult r{.status = {}, .settled = std::vector<Settled>(limits.size())};
  r.status = store.SettleAll(requests, settlements, once, At(once_until), At(t), r.settled);
  return r;
}

absl::Status ResetOn(Store& store, const std::vector<Limit>& limits, std::string_view key,
                     int64_t t) {
  std::vector<LimitedKey> requests;
  for (const Limit& limit : limits) {
    requests.push_back({.limit = &limit, .key = key});
  }
  return store.ResetAll(requests, At(t));
}

Decision Query(Store& store, const Limit& limit, std::string_view key, int64_t t) {
  absl::StatusOr<Decision> d = store.Decide(limit, key, 0, At(t));
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : Decision{};
}

class MemcachedSettleTest : public ::testing::TestWithParam<Algorithm> {};

// 10 per second (burst 10): a charge of 4 settled at 2 (2 back), at 4 (nothing), at 9 (5
// more, within the limit), and after 6 more at 9 with a max_debt of 3 (3 of the 5 fit: the key
// in debt), each figure as the memory store's.
TEST_P(MemcachedSettleTest, BelowEqualAndAboveSettleAsTheMemoryStore) {
  MemcachedServer server;
  auto store = MustMemcached(MemcachedOptionsFor({&server}));
  MemoryStore memory;
  const std::vector<Limit> limit = {
      MustLimit({.algorithm = GetParam(), .limit = 10, .period = 1s, .buckets = 10})};
  struct Case {
    const char* key;
    int64_t before;  // Charged first and kept.
    int64_t units;
    int64_t max_debt;
    int64_t given_back;
    int64_t charged;
    int64_t remaining;  // After.
  };
  for (const Case& c : {Case{"below", 0, 2, 0, 2, 0, 8}, Case{"equal", 0, 4, 0, 0, 0, 6},
                        Case{"above", 0, 9, 0, 0, 5, 1}, Case{"debt", 6, 9, 3, 0, 3, 0}}) {
    SCOPED_TRACE(c.key);
    ASSERT_TRUE(ChargeOn(*store, limit, c.key, c.before, kEpoch).decision->allowed);
    ASSERT_TRUE(ChargeOn(memory, limit, c.key, c.before, kEpoch).decision->allowed);
    const Charged got = ChargeOn(*store, limit, c.key, 4, kEpoch + 1000);
    const Charged want = ChargeOn(memory, limit, c.key, 4, kEpoch + 1000);
    ASSERT_TRUE(got.decision.ok()) << got.decision.status();
    ASSERT_EQ(*got.decision, *want.decision);
    ASSERT_EQ(got.charges, want.charges);
    ASSERT_EQ(got.charges[0].units, 4);
    const std::vector<Settlement> s = {
        {.charge = got.charges[0], .units = c.units, .max_debt = c.max_debt}};
    const SettleResult settled = SettleOn(*store, limit, c.key, s, kEpoch + 2000);
    ASSERT_TRUE(settled.status.ok()) << settled.status;
    EXPECT_EQ(settled, SettleOn(memory, limit, c.key, s, kEpoch + 2000));
    const Settled& one = settled.settled[0];
    EXPECT_EQ(one.given_back, c.given_back);
    EXPECT_EQ(one.charged, c.charged);
    EXPECT_EQ(one.after.remaining, c.remaining);
    EXPECT_EQ(one.after.allowed, c.max_debt == 0) << "a key in debt denies a query too";
    const Decision later = Query(*store, limit[0], c.key, kEpoch + 3000);
    EXPECT_EQ(later, Query(memory, limit[0], c.key, kEpoch + 3000));
  }
  EXPECT_EQ(store->Stats().failures, 0u);
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, MemcachedSettleTest,
                         ::testing::ValuesIn(testing::AllAlgorithms()), testing::AlgorithmTestName);

TEST(MemcachedSettleOnceTest, AReplayOnOneStoreOrAnotherIsRefusedAndChangesNothing) {
  MemcachedServer server;
  auto first = MustMemcached(MemcachedOptionsFor({&server}));
  auto second = MustMemcached(MemcachedOptionsFor({&server}));
  const std::vector<Limit> limit = {MustLimit({.limit = 10, .period = 1h})};
  const Charged c = ChargeOn(*first, limit, "k", 6, kEpoch);
  const std::vector<Settlement> refund = {{.charge = c.charges[0], .units = 1}};
  const SettleResult settled =
      SettleOn(*first, limit, "k", refund, kEpoch + 1, "r1", kEpoch + 60'000'000);
  ASSERT_TRUE(settled.status.ok()) << settled.status;
  EXPECT_EQ(settled.settled[0].given_back, 5);
  EXPECT_TRUE(testing::Holds(server, "sluice:once:r1")) << "the claim is an item of its own";
  for (MemcachedStore* store : {first.get(), second.get()}) {
    const SettleResult replay =
        SettleOn(*store, limit, "k", refund, kEpoch + 2, "r1", kEpoch + 60'000'000);
    EXPECT_EQ(replay.status.code(), absl::StatusCode::kAlreadyExists) << replay.status;
    EXPECT_EQ(replay.status.message(), "receipt was settled already");
    EXPECT_EQ(Query(*store, limit[0], "k", kEpoch + 3).remaining, 9) << "a replay gave back";
  }
  // Another id settles; an id whose once_until has passed claims nothing (as MemoryStore).
  EXPECT_TRUE(SettleOn(*second, limit, "k", {{.units = 1}}, kEpoch + 4, "r2", kEpoch + 60'000'000)
                  .status.ok());
  EXPECT_TRUE(
      SettleOn(*second, limit, "k", {{.units = 1}}, kEpoch + 5, "r3", kEpoch + 5).status.ok());
  EXPECT_FALSE(testing::Holds(server, "sluice:once:r3"));
  EXPECT_EQ(Query(*first, limit[0], "k", kEpoch + 6).remaining, 7);
}

TEST(MemcachedSettleOnceTest, TwoStoresRacingOneReceiptSettleItOnce) {
  MemcachedServer server;
  auto first = MustMemcached(MemcachedOptionsFor({&server}));
  auto second = MustMemcached(MemcachedOptionsFor({&server}));
  const std::vector<Limit> limit = {MustLimit({.limit = 100, .period = 1h})};
  for (int round = 0; round < 20; ++round) {
    const std::string key = fmt::format("k{}", round);
    const Charged c = ChargeOn(*first, limit, key, 10, kEpoch);
    const std::vector<Settlement> refund = {{.charge = c.charges[0], .units = 0}};
    const std::string once = fmt::format("race{}", round);
    std::future<SettleResult> a = std::async(std::launch::async, [&] {
      return SettleOn(*first, limit, key, refund, kEpoch + 1, once, kEpoch + 60'000'000);
    });
    const SettleResult b =
        SettleOn(*second, limit, key, refund, kEpoch + 1, once, kEpoch + 60'000'000);
    const SettleResult other = a.get();
    EXPECT_NE(b.status.ok(), other.status.ok()) << b.status << " / " << other.status;
    EXPECT_TRUE(b.status.ok() || absl::IsAlreadyExists(b.status)) << b.status;
    EXPECT_TRUE(other.status.ok() || absl::IsAlreadyExists(other.status)) << other.status;
    EXPECT_EQ(Query(*second, limit[0], key, kEpoch + 2).remaining, 100) << "given back once";
  }
}

TEST(MemcachedSettleOnceTest, TheClaimExpiresWithTheReceiptInWholeSeconds) {
  using internal::OnceExptime;
  const Micros second = 1s;
  EXPECT_EQ(OnceExptime(At(kEpoch), At(kEpoch), second), std::nullopt);
  EXPECT_EQ(OnceExptime(At(kEpoch - 1), At(kEpoch), second), std::nullopt);
  EXPECT_EQ(OnceExptime(At(kEpoch + 1), At(kEpoch), second), 2);  // Rounded up, plus 1 s.
  EXPECT_EQ(OnceExptime(At(kEpoch + 1'000'000), At(kEpoch), second), 2);
  EXPECT_EQ(OnceExptime(At(kEpoch + 1'000'001), At(kEpoch), second), 3);
  const int64_t thirty_days = 30LL * 86'400 * 1'000'000;
  EXPECT_EQ(OnceExptime(At(kEpoch + thirty_days - 1'000'000), At(kEpoch), second), 30 * 86'400);
  // Past 30 days: an absolute Unix time, rounded up.
  EXPECT_EQ(OnceExptime(At(kEpoch + thirty_days), At(kEpoch), second),
            (kEpoch + thirty_days + 1'000'000) / 1'000'000);
  EXPECT_EQ(OnceExptime(At(kEpoch + thirty_days + 1), At(kEpoch), second),
            (kEpoch + thirty_days + 1'000'000) / 1'000'000 + 1);
}

TEST(MemcachedResetTest, AResetBySecondStoreIsSeenByTheFirst) {
  MemcachedServer server;
  auto first = MustMemcached(MemcachedOptionsFor({&server}));
  auto second = MustMemcached(MemcachedOptionsFor({&server}));
  const std::vector<Limit> limits = {
      MustLimit({.limit = 3, .period = 1h}),
      MustLimit({.algorithm = Algorithm::kGcra, .limit = 3, .period = 1h})};
  ASSERT_TRUE(ChargeOn(*first, limits, "k", 3, kEpoch).decision->allowed);
  EXPECT_FALSE(ChargeOn(*first, limits, "k", 1, kEpoch).decision->allowed);
  ASSERT_TRUE(ResetOn(*second, limits, "k", kEpoch + 1).ok());
  EXPECT_FALSE(testing::Holds(server, first->ItemKey(limits[0], "k")));
  for (const Limit& limit : limits) {
    EXPECT_EQ(Query(*first, limit, "k", kEpoch + 1).remaining, 3) << limit.ToString();
  }
  EXPECT_TRUE(ResetOn(*second, limits, "never seen", kEpoch + 1).ok()) << "a missing item is fine";
  EXPECT_EQ(second->ResetAll({}, At(kEpoch)).code(), absl::StatusCode::kInvalidArgument);
}

// Two servers: limit a's item on one, b's on the other. The second killed, a settle of both
// fails (Unavailable) and gives nothing back anywhere: a's units stay charged.
TEST(MemcachedSettleFailuresTest, AServerKilledFailsTheSettleAndTheUnitsStayCharged) {
  MemcachedServer up;
  MemcachedServer down;
  auto store = MustMemcached(MemcachedOptionsFor({&up, &down}));
  const Limit limit = MustLimit({.limit = 10, .period = 1h});
  std::string on_up;
  std::string on_down;
  for (int i = 0; on_up.empty() || on_down.empty(); ++i) {
    ASSERT_LT(i, 200);
    const std::string key = fmt::format("user{}", i);
    ASSERT_TRUE(ChargeOn(*store, {limit}, key, 1, kEpoch).decision.ok());
    (testing::Holds(up, store->ItemKey(limit, key)) ? on_up : on_down) = key;
  }
  const Charged a = ChargeOn(*store, {limit}, on_up, 5, kEpoch);
  const Charged b = ChargeOn(*store, {limit}, on_down, 5, kEpoch);
  down.Kill();
  for (const std::string& key : {on_down, on_up}) {
    // Refunds of both, settled one limit per call: the killed server's fails and gives
    // nothing back; the live one's is settled as if nothing had happened.
    const Charged& c = key == on_up ? a : b;
    const SettleResult r =
        SettleOn(*store, {limit}, key, {{.charge = c.charges[0], .units = 0}}, kEpoch + 1);
    if (key == on_down) {
      EXPECT_TRUE(absl::IsUnavailable(r.status)) << r.status;
      EXPECT_EQ(r.settled[0], Settled{}) << "nothing given back";
    } else {
      ASSERT_TRUE(r.status.ok()) << r.status;
    }
  }
  // A settle over both: the read of the killed server's item fails first, so nothing is given
  // back on the live one either (its remaining stays), and the claim is taken back.
  const Charged again = ChargeOn(*store, {limit}, on_up, 5, kEpoch + 2);
  const Limit& l = limit;
  const LimitedKey both[] = {{.limit = &l, .key = on_up}, {.limit = &l, .key = on_down}};
  const Settlement refunds[] = {{.charge = again.charges[0], .units = 0},
                                {.charge = b.charges[0], .units = 0}};
  Settled settled[2];
  const absl::Status s =
      store->SettleAll(both, refunds, "both", At(kEpoch + 60'000'000), At(kEpoch + 3), settled);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(Query(*store, limit, on_up, kEpoch + 4).remaining, 4) << "a failed settle gave back";
  EXPECT_FALSE(testing::Holds(up, "sluice:once:both") || testing::Holds(down, "sluice:once:both"));
  EXPECT_EQ(store->Stats().settle_units_lost, 0u) << "refunds lose nothing";
}

// The only server killed: under `deny` an extra charge is lost (counted); under `local` it is
// charged in the local store, which then denies the key while Memcached is away.
TEST(MemcachedSettleFailuresTest, AnExtraChargeGoesToTheLocalPolicysStore) {
  for (FailurePolicy policy : {FailurePolicy::kDeny, FailurePolicy::kLocal}) {
    SCOPED_TRACE(FailurePolicyName(policy));
    MemcachedServer server;
    MemcachedStoreOptions options = MemcachedOptionsFor({&server});
    options.on_failure = policy;
    auto store = MustMemcached(options);
    const std::vector<Limit> limit = {MustLimit({.limit = 10, .period = 1h})};
    const Charged c = ChargeOn(*store, limit, "k", 2, kEpoch);
    server.Kill();
    const SettleResult r = SettleOn(
        *store, limit, "k", {{.charge = c.charges[0], .units = 14, .max_debt = 2}}, kEpoch + 1);
    EXPECT_TRUE(absl::IsUnavailable(r.status)) << r.status;
    if (policy == FailurePolicy::kLocal) {
      EXPECT_EQ(r.settled[0].charged, 12) << "10 + 2 in the local store: all 12 fit";
      EXPECT_EQ(store->Stats().settle_units_lost, 0u);
      const absl::StatusOr<Decision> d = store->Decide(limit[0], "k", 1, At(kEpoch + 2));
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_FALSE(d->allowed) << "the local store holds the debt";
    } else {
      EXPECT_EQ(r.settled[0], Settled{});
      EXPECT_EQ(store->Stats().settle_units_lost, 12u);
    }
    // ChargeAll decided by the policy charges nothing in Memcached: units 0.
    const Charged fallback = ChargeOn(*store, limit, "other", 1, kEpoch + 3);
    if (policy == FailurePolicy::kLocal) {
      ASSERT_TRUE(fallback.decision.ok()) << fallback.decision.status();
      EXPECT_EQ(fallback.charges[0], Charge{});
    }
  }
}

// Settlements of `charges` on `limits`: equal, below, above the charge or anything up to
// twice the burst, with debts the store holds (sliding_log: N + D within its log's bound).
std::vector<Settlement> RandomSettlements(testing::Random& rnd, const std::vector<Limit>& limits,
                                          const std::vector<Charge>& charges) {
  std::vector<Settlement> settlements;
  for (size_t i = 0; i < limits.size(); ++i) {
    const int64_t charged = charges[i].units;
    const int64_t choice = rnd.Between(0, 3);
    const int64_t units = choice == 0   ? charged
                          : choice == 1 ? rnd.Between(0, std::max<int64_t>(0, charged - 1))
                          : choice == 2 ? charged + rnd.Between(1, limits[i].burst())
                                        : rnd.Between(0, 2 * std::max(limits[i].burst(), charged));
    settlements.push_back(
        {.charge = charges[i],
         .units = units,
         .max_debt = limits[i].algorithm() == Algorithm::kSlidingLog
                         ? rnd.Between(0, MemoryStore::kMaxSlidingLogLimit - limits[i].limit())
                         : rnd.Between(0, 2 * limits[i].limit())});
  }
  return settlements;
}

// Seeded random traces per algorithm: requests over two limits of the algorithm on three keys,
// charged (costs 0 to past the burst), settled below, at and above the charge (debts of every
// size the store holds), now and then with a `once` replayed at once, and reset; every figure
// (decisions, charges, what each settle did, errors) as a MemoryStore's on the same trace.
class MemcachedSettleTraceTest : public ::testing::TestWithParam<Algorithm> {};

TEST_P(MemcachedSettleTraceTest, SettlesAsTheMemoryStoreFigureForFigure) {
  MemcachedServer server;
  auto store = MustMemcached(MemcachedOptionsFor({&server}));
  testing::Random rnd(testing::Seed(3333) + static_cast<uint64_t>(GetParam()));
  int settles = 0;
  int debts = 0;
  int refunds = 0;
  for (int round = 0; round < 8; ++round) {
    MemoryStore memory;
    const std::vector<Limit> limits = {rnd.LimitFor(*store, GetParam()),
                                       rnd.LimitFor(*store, GetParam())};
    if (limits[0] == limits[1]) {
      continue;  // One state twice: refused by both stores, nothing to compare.
    }
    const std::vector<std::string> keys = {fmt::format("a{}", round), fmt::format("b{}", round),
                                           fmt::format("c{}", round)};
    std::vector<std::vector<Charge>> last(keys.size(), std::vector<Charge>(2));
    int64_t t = kEpoch + rnd.Between(0, 1'000'000'000);
    for (int row = 0; row < 60; ++row) {
      const int op = static_cast<int>(rnd.Between(0, 9));
      // A settle is often made at its charge's time, before a bucket has refilled past it.
      if (op < 5 || op == 9 || rnd.OneIn(2)) {
        t += rnd.OneIn(20) ? -rnd.Between(1, limits[0].period().count()) : rnd.Gap(limits[0]);
      }
      const size_t k = static_cast<size_t>(rnd.Between(0, 2));
      SCOPED_TRACE(fmt::format("{} and {} round {} row {} t={} key {}", limits[0].ToString(),
                               limits[1].ToString(), round, row, t, keys[k]));
      if (op < 5) {
        const int64_t cost = rnd.Cost(limits[0]);
        const Charged got = ChargeOn(*store, limits, keys[k], cost, t);
        const Charged want = ChargeOn(memory, limits, keys[k], cost, t);
        ASSERT_TRUE(got.decision.ok()) << got.decision.status();
        ASSERT_EQ(*got.decision, *want.decision);
        ASSERT_EQ(got.charges, want.charges);
        last[k] = got.charges;
      } else if (op < 9) {
        const std::vector<Settlement> settlements = RandomSettlements(rnd, limits, last[k]);
        const std::string once = rnd.OneIn(3) ? fmt::format("r{}.{}", round, row) : "";
        const int64_t until = t + rnd.Between(1, 1'000'000'000);
        const SettleResult got = SettleOn(*store, limits, keys[k], settlements, t, once, until);
        ASSERT_EQ(got, SettleOn(memory, limits, keys[k], settlements, t, once, until))
            << got.status;
        if (got.status.ok()) {
          ++settles;
          for (const Settled& one : got.settled) {
            debts += one.after.allowed ? 0 : 1;
            refunds += one.given_back > 0 ? 1 : 0;
          }
          last[k] = std::vector<Charge>(2);
        }
        if (!once.empty()) {  // Replayed at once: refused by both, changing nothing.
          const SettleResult replay =
              SettleOn(*store, limits, keys[k], settlements, t, once, until);
          ASSERT_EQ(replay, SettleOn(memory, limits, keys[k], settlements, t, once, until));
          ASSERT_TRUE(!got.status.ok() || absl::IsAlreadyExists(replay.status)) << replay.status;
        }
      } else {
        ASSERT_TRUE(ResetOn(*store, limits, keys[k], t).ok());
        ASSERT_TRUE(ResetOn(memory, limits, keys[k], t).ok());
        last[k] = std::vector<Charge>(2);
      }
    }
  }
  EXPECT_GT(settles, 20);  // The traces settle, give back and run into debt.
  EXPECT_GT(refunds, 0);
  EXPECT_GT(debts, 0);
  EXPECT_EQ(store->Stats().failures, 0u);
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, MemcachedSettleTraceTest,
                         ::testing::ValuesIn(testing::AllAlgorithms()), testing::AlgorithmTestName);

}  // namespace
}  // namespace sluice
