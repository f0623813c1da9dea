// Threads charge and settle one key of one MemoryStore at once (run under ThreadSanitizer by
// `make test`): each checks with a receipt (ChargeAll), then settles it, at once or later,
// below or above what was charged, now and then replaying a receipt's `once`. Time stands
// still within a window and moves a whole window between rounds, so each round is one window
// of fixed_window and of sliding_log. What each window admitted (the decisions' costs, less
// what the settles gave back) never passes the limit, and with the extras the settles
// charged is exactly what the store holds: never more than the limit plus the debt reported.

#include <algorithm>
#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "sluice/settle.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

constexpr int kThreads = 4;
constexpr int kRounds = 6;
constexpr int kOpsPerThread = 200;
constexpr int64_t kLimit = 50;
constexpr int64_t kMaxDebt = 20;

// One window's sums over every thread.
struct Sums {
  std::atomic<int64_t> admitted{0};    // Costs of the admitted checks.
  std::atomic<int64_t> given_back{0};  // What the settles gave back.
  std::atomic<int64_t> charged{0};     // The extras the settles charged.
  std::atomic<int64_t> replays{0};     // Replays refused (AlreadyExists).
};

struct Receipt {
  Charge charge;
  std::string once;
};

// One thread's window: checks of cost 1 to 3; each admitted one settled at once or kept for
// later (also for a later window), at 0 to twice its cost; one in ten replayed.
void Work(MemoryStore& store, const Limit& limit, Timestamp now, int thread, int round,
          std::vector<Receipt>& kept, Sums& sums) {
  std::minstd_rand random(static_cast<unsigned>(thread * 1000 + round + 1));
  auto between = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(random);
  };
  const LimitedKey request{.limit = &limit, .key = "hot"};
  for (int op = 0; op < kOpsPerThread; ++op) {
    if (kept.empty() || between(0, 2) != 0) {
      const int64_t cost = between(1, 3);
      Decision each;
      Charge charge;
      absl::StatusOr<Decision> d =
          store.ChargeAll({&request, 1}, cost, now, {&each, 1}, {&charge, 1});
      ASSERT_TRUE(d.ok()) << d.status();
      if (d->allowed) {
        sums.admitted.fetch_add(cost, std::memory_order_relaxed);
        kept.push_back({charge, fmt::format("t{}.r{}.{}", thread, round, op)});
      }
      continue;
    }
    const size_t pick = static_cast<size_t>(between(0, static_cast<int64_t>(kept.size()) - 1));
    const Receipt receipt = kept[pick];
    kept.erase(kept.begin() + static_cast<ptrdiff_t>(pick));
    const Settlement settlement{.charge = receipt.charge,
                                .units = between(0, 2 * receipt.charge.units),
                                .max_debt = kMaxDebt};
    const Timestamp until = now + 1h;
    for (int attempt = 0; attempt < (between(0, 9) == 0 ? 2 : 1); ++attempt) {
      Settled settled;
      const absl::Status s =
          store.SettleAll({&request, 1}, {&settlement, 1}, receipt.once, until, now, {&settled, 1});
      if (attempt > 0) {
        ASSERT_TRUE(absl::IsAlreadyExists(s)) << s;
        sums.replays.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      ASSERT_TRUE(s.ok()) << s;
      ASSERT_LE(settled.given_back, std::max<int64_t>(0, receipt.charge.units - settlement.units));
      ASSERT_LE(settled.charged, std::max<int64_t>(0, settlement.units - receipt.charge.units));
      sums.given_back.fetch_add(settled.given_back, std::memory_order_relaxed);
      sums.charged.fetch_add(settled.charged, std::memory_order_relaxed);
    }
  }
}

class SettleConcurrencyTest : public ::testing::TestWithParam<Algorithm> {};

TEST_P(SettleConcurrencyTest, EachWindowAdmitsAtMostTheLimitPlusTheDebtReported) {
  MemoryStore store;
  const Limit limit = MustLimit({.algorithm = GetParam(), .limit = kLimit, .period = 1s});
  std::vector<std::vector<Receipt>> kept(kThreads);
  int64_t debts = 0;
  int64_t refunds = 0;
  for (int round = 0; round < kRounds; ++round) {
    // A whole window later: the last window's units have all left it.
    const Timestamp now = At(kEpoch + round * 1'000'000 + 500'000);
    Sums sums;
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        while (!go.load(std::memory_order_acquire)) {
        }
        Work(store, limit, now, i, round, kept[static_cast<size_t>(i)], sums);
      });
    }
    go.store(true, std::memory_order_release);
    for (std::thread& t : threads) {
      t.join();
    }
    const int64_t admitted = sums.admitted.load() - sums.given_back.load();
    const int64_t held = admitted + sums.charged.load();
    SCOPED_TRACE(fmt::format("round {}: admitted {} given back {} charged {}", round,
                             sums.admitted.load(), sums.given_back.load(), sums.charged.load()));
    EXPECT_LE(admitted, kLimit) << "checks admitted past the limit";
    EXPECT_LE(held, kLimit + sums.charged.load());
    EXPECT_LE(held, kLimit + kMaxDebt) << "a debt past max_debt";
    // Exactly what the store holds: its remaining, or a denial when in debt.
    absl::StatusOr<Decision> query = store.Decide(limit, "hot", 0, now);
    ASSERT_TRUE(query.ok()) << query.status();
    EXPECT_EQ(query->remaining, std::max<int64_t>(0, kLimit - held));
    EXPECT_EQ(query->allowed, held <= kLimit);
    debts += held > kLimit ? 1 : 0;
    refunds += sums.given_back.load() > 0 ? 1 : 0;
  }
  EXPECT_GT(debts + refunds, 0) << "the rounds neither gave back nor ran into debt";
}

INSTANTIATE_TEST_SUITE_P(Windows, SettleConcurrencyTest,
                         ::testing::Values(Algorithm::kFixedWindow, Algorithm::kSlidingLog),
                         testing::AlgorithmTestName);

}  // namespace
}  // namespace sluice
