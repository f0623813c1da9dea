// DirectLimiter under threads racing at one instant: decisions land one after another, each on
// the state the one before left. With time standing still, the admissions of a burst of B are
// exactly B, whatever the threads' interleaving, and their figures are those of B requests in
// a row: each `remaining` from B-1 down to 0 exactly once (and for a leaky_bucket each place
// in the queue, its delay, once). Two decisions made on the same state would repeat a figure;
// a lost update would admit more than B. Then, the clock moved on by k units' worth, exactly k
// more. Both paths: one atomic word, and the 128-bit TAT under a lock. Runs under
// ThreadSanitizer (label "concurrent").

#include <algorithm>
#include <functional>
#include <latch>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/direct_limiter.h"
#include "src/memory/compact_state.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

constexpr int kThreads = 4;
constexpr int kTriesEach = 6'000;  // 24,000 tries for a burst of 20,000.
constexpr int64_t kBurst = 20'000;

struct Admitted {
  std::vector<int64_t> remaining;
  std::vector<int64_t> delay_us;
};

// Every admitted decision's figures (sorted), from kThreads threads each making `tries` calls.
Admitted Race(int tries, const std::function<absl::StatusOr<Decision>()>& call) {
  std::vector<Admitted> each(kThreads);
  std::vector<std::thread> threads;
  std::latch start(kThreads);  // All at once, so that their tries overlap.
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&call, &out = each[i], &start, tries] {
      start.arrive_and_wait();
      for (int n = 0; n < tries; ++n) {
        const absl::StatusOr<Decision> d = call();
        if (d.ok() && d->allowed) {
          out.remaining.push_back(d->remaining);
          out.delay_us.push_back(d->delay.count());
        }
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  Admitted all;
  for (const Admitted& a : each) {
    all.remaining.insert(all.remaining.end(), a.remaining.begin(), a.remaining.end());
    all.delay_us.insert(all.delay_us.end(), a.delay_us.begin(), a.delay_us.end());
  }
  std::sort(all.remaining.begin(), all.remaining.end());
  std::sort(all.delay_us.begin(), all.delay_us.end());
  return all;
}

// TryAcquire's yes or no as a Decision that says only whether it was allowed, for Race.
absl::StatusOr<Decision> TryAcquireAsDecision(DirectLimiter& direct, Timestamp now) {
  const absl::StatusOr<bool> admitted = direct.TryAcquireAt(1, now);
  if (!admitted.ok()) {
    return admitted.status();
  }
  return Decision{.allowed = *admitted};
}

std::vector<int64_t> CountingUp(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

class DirectLimiterRaceTest : public ::testing::TestWithParam<bool> {
 protected:
  // One an hour with a burst of kBurst; the wide path's rate has a prime count per day, so its
  // reduced N' (1,000,003) makes TAT outgrow 64 bits.
  Limit MakeLimit(Algorithm algorithm) const {
    return GetParam()
               ? MustLimit({.algorithm = algorithm, .limit = 1, .period = 1h, .burst = kBurst})
               : MustLimit(
                     {.algorithm = algorithm, .limit = 1'000'003, .period = 24h, .burst = kBurst});
  }
};

TEST_P(DirectLimiterRaceTest, AdmitsExactlyTheBurstEachFigureOnceThenExactlyTheRefill) {
  ManualClock clock;
  const Limit limit = MakeLimit(Algorithm::kGcra);
  auto direct = DirectLimiter::Create(limit, clock);
  ASSERT_TRUE(direct.ok());
  ASSERT_EQ((*direct)->lock_free(), GetParam());
  const Admitted burst = Race(kTriesEach, [&] { return (*direct)->CheckAt(1, At(kEpoch)); });
  EXPECT_EQ(burst.remaining.size(), static_cast<size_t>(kBurst));
  EXPECT_TRUE(burst.remaining == CountingUp(kBurst)) << "a figure repeated or missing";
  // TryAcquire takes the same word: with the burst spent, none.
  const Admitted none = Race(100, [&] { return TryAcquireAsDecision(**direct, At(kEpoch)); });
  EXPECT_TRUE(none.remaining.empty());
  // Later by the time 5 units take to drain (rounded up): exactly 5 more, remaining 4 to 0.
  const Micros five{(5 * limit.period().count() + limit.limit() - 1) / limit.limit()};
  const Admitted refill = Race(100, [&] { return (*direct)->CheckAt(1, At(kEpoch) + five); });
  EXPECT_EQ(refill.remaining, CountingUp(5));
}

TEST_P(DirectLimiterRaceTest, TryAcquireAdmitsExactlyTheBurst) {
  ManualClock clock;
  auto direct = DirectLimiter::Create(MakeLimit(Algorithm::kGcra), clock);
  ASSERT_TRUE(direct.ok());
  const Admitted admitted =
      Race(kTriesEach, [&] { return TryAcquireAsDecision(**direct, At(kEpoch)); });
  EXPECT_EQ(admitted.remaining.size(), static_cast<size_t>(kBurst));
  EXPECT_FALSE((*direct)->CheckAt(1, At(kEpoch))->allowed);
}

TEST_P(DirectLimiterRaceTest, QueuesALeakyBucketsAdmissionsEachInItsOwnPlace) {
  ManualClock clock;
  const Limit limit = MakeLimit(Algorithm::kLeakyBucket);
  auto direct = DirectLimiter::Create(limit, clock);
  ASSERT_TRUE(direct.ok());
  const Admitted admitted = Race(kTriesEach, [&] { return (*direct)->CheckAt(1, At(kEpoch)); });
  EXPECT_EQ(admitted.remaining.size(), static_cast<size_t>(kBurst));
  EXPECT_TRUE(admitted.remaining == CountingUp(kBurst)) << "a figure repeated or missing";
  // Place i waits ceil(i * P / N).
  std::vector<int64_t> places;
  for (int64_t i = 0; i < kBurst; ++i) {
    const int64_t p = limit.period().count();
    places.push_back((i * p + limit.limit() - 1) / limit.limit());
  }
  EXPECT_TRUE(admitted.delay_us == places) << "two admissions given one place in the queue";
}

INSTANTIATE_TEST_SUITE_P(Paths, DirectLimiterRaceTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("OneWord") : std::string("Wide");
                         });

}  // namespace
}  // namespace sluice
