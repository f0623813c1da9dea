// RateLimitService::AcquireAsync on a manual clock and manual timers: waits play out in
// order on the test's thread, so every answer's time is exact.

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "server/service/service.h"
#include "sluice/memory_store.h"
#include "tests/testing/rules.h"
#include "tests/testing/timers.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

using ::sluice::testing::At;
using ::sluice::testing::kEpoch;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

constexpr char kRules[] = R"(
domain: jobs
descriptors:
  - key: api
    rate_limit: {algorithm: leaky_bucket, requests_per_unit: 5, period: 1s, burst: 1}
  - key: mailer
    concurrency: 2
    lease_ttl: 10s
  - key: export
    concurrency: 1
    lease_ttl: 10s
    rate_limit: {unit: second, requests_per_unit: 1}
)";

class AcquireTest : public ::testing::Test {
 protected:
  AcquireTest() : clock_(At(kEpoch)), service_(store_, clock_, metrics_, &timers_) {
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
  }
  // As a server stops: every wait ends, and every timer runs, so no coroutine is left.
  ~AcquireTest() override {
    service_.StopWaiting();
    timers_.RunUntil(clock_, clock_.Now() + kMaxAcquireWait + 1s);
    EXPECT_EQ(service_.waiting(), 0U);
    EXPECT_EQ(timers_.pending(), 0U);
  }

  // One acquire in flight: its answer, once there is one, and when it came.
  struct Pending {
    std::optional<absl::StatusOr<AcquireResult>> answer;
    Micros answered_at{-1};  // Since kEpoch.
    RateLimitService::CancelWait cancel;
  };

  static AdHocRequest AdHoc(const std::string& key, Algorithm algorithm, int64_t limit,
                            Micros period) {
    return {.key = key, .spec = {.algorithm = algorithm, .limit = limit, .period = period}};
  }

  // Starts an acquire; the returned Pending fills in when it is answered.
  std::shared_ptr<Pending> Start(std::variant<AdHocRequest, CheckRequest> check, Micros max_wait) {
    auto pending = std::make_shared<Pending>();
    pending->cancel = service_.AcquireAsync({.check = std::move(check), .max_wait = max_wait},
                                            [this, pending](absl::StatusOr<AcquireResult> result) {
                                              pending->answer = std::move(result);
                                              pending->answered_at = clock_.Now() - At(kEpoch);
                                            });
    return pending;
  }

  void RunUntil(Micros since_epoch) { timers_.RunUntil(clock_, At(kEpoch) + since_epoch); }

  MemoryStore store_;
  ManualClock clock_;
  Metrics metrics_;
  testing::ManualTimers timers_;
  RateLimitService service_;
};

TEST_F(AcquireTest, LeakyBucketWaitersGoInOrderOneDrainApart) {
  const CheckRequest api{.domain = "jobs", .descriptors = {{.entries = {{"api", "mail"}}}}};
  std::vector<std::shared_ptr<Pending>> waiters;
  for (int i = 0; i < 6; ++i) {
    waiters.push_back(Start(api, 900ms));
  }
  RunUntil(2s);
  // 5 per second, one at a time: 0, 200, 400, 600 and 800 ms. The sixth would go at 1 s,
  // past its max_wait: it is told so when its turn comes, at 800 ms, with how much longer
  // a wait it would need (100 ms).
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(waiters[i]->answer.has_value()) << i;
    ASSERT_TRUE(waiters[i]->answer->ok()) << waiters[i]->answer->status();
    EXPECT_TRUE((*waiters[i]->answer)->check.combined.allowed) << i;
    EXPECT_EQ((*waiters[i]->answer)->check.combined.delay, 0us) << i;
    EXPECT_EQ(waiters[i]->answered_at, i * 200ms) << i;
    EXPECT_EQ((*waiters[i]->answer)->waited, i * 200ms) << i;
  }
  ASSERT_TRUE(waiters[5]->answer.has_value());
  ASSERT_TRUE(waiters[5]->answer->ok());
  EXPECT_FALSE((*waiters[5]->answer)->check.combined.allowed);
  EXPECT_EQ((*waiters[5]->answer)->check.combined.retry_after, 100ms);
  EXPECT_EQ(waiters[5]->answered_at, 800ms);
  EXPECT_EQ(service_.waiting(), 0U);
  // Nothing is left reserved: at 2 s the queue is empty.
  const CheckResult next = *service_.Check(api);
  EXPECT_TRUE(next.combined.allowed);
  EXPECT_EQ(next.combined.delay, 0us);
}

// A waiter served before its max_wait ends cancels the timer of that end: waiters willing to
// wait an hour do not leave an hour's worth of timers behind them.
TEST_F(AcquireTest, TimersOfWaitersServedSoonerAreCancelled) {
  const CheckRequest api{.domain = "jobs", .descriptors = {{.entries = {{"api", "mail"}}}}};
  std::vector<std::shared_ptr<Pending>> waiters;
  for (int i = 0; i < 5; ++i) {
    waiters.push_back(Start(api, 1h));
  }
  // The first was served at once: the second's wake-up, and the ends of the max_waits of the
  // three behind it.
  EXPECT_EQ(timers_.pending(), 4U);
  RunUntil(1s);
  for (const auto& waiter : waiters) {
    ASSERT_TRUE(waiter->answer.has_value());
    EXPECT_TRUE((*waiter->answer)->check.combined.allowed);
  }
  EXPECT_EQ(timers_.pending(), 0U);  // Not four timers left to fire in an hour.
}

TEST_F(AcquireTest, ALeakyBucketWaiterWhoLeavesHoldsNoPlaceInTheQueue) {
  AdHocRequest queue = AdHoc("q", Algorithm::kLeakyBucket, 5, 1s);
  queue.spec.burst = 5;  // Room to queue: a reservation, had the waiter made one, would fit.
  const std::shared_ptr<Pending> first = Start(queue, 1s);
  const std::shared_ptr<Pending> second = Start(queue, 1s);  // Waits out the drain to 200 ms.
  RunUntil(100ms);
  EXPECT_FALSE(second->answer.has_value());
  second->cancel();
  RunUntil(100ms);
  ASSERT_TRUE(second->answer.has_value());
  // Only the first is in the queue: a request now waits out its last 100 ms, not 300.
  const CheckResult now = *service_.CheckAdHoc(queue);
  EXPECT_TRUE(now.combined.allowed);
  EXPECT_EQ(now.combined.delay, 100ms);
}

TEST_F(AcquireTest, TokenWaitersAreServedFirstComeFirstServed) {
  const AdHocRequest one_per_second = AdHoc("k", Algorithm::kGcra, 1, 1s);
  std::vector<std::shared_ptr<Pending>> waiters;
  for (int i = 0; i < 4; ++i) {
    waiters.push_back(Start(one_per_second, 10s));
  }
  RunUntil(999'999us);
  ASSERT_TRUE(waiters[0]->answer.has_value());
  EXPECT_EQ(waiters[0]->answered_at, 0us);
  EXPECT_FALSE(waiters[1]->answer.has_value());
  // A late-comer arriving just as the slot frees, before the waiter at the head has woken
  // for it, goes to the back of the line rather than taking the slot.
  clock_.Set(At(kEpoch) + 1s);
  waiters.push_back(Start(one_per_second, 10s));
  EXPECT_FALSE(waiters.back()->answer.has_value());
  RunUntil(5s);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(waiters[i]->answer.has_value()) << i;
    EXPECT_TRUE((*waiters[i]->answer)->check.combined.allowed) << i;
    EXPECT_EQ(waiters[i]->answered_at, i * 1s) << i;
  }
}

TEST_F(AcquireTest, TooFarOffIsDeniedAtOnceWithTheWait) {
  const AdHocRequest one_per_second = AdHoc("k", Algorithm::kGcra, 1, 1s);
  EXPECT_TRUE(service_.Acquire({.check = one_per_second, .max_wait = 0s})->check.combined.allowed);
  clock_.Advance(250ms);
  const std::shared_ptr<Pending> late = Start(one_per_second, 500ms);
  ASSERT_TRUE(late->answer.has_value()) << "answered without waiting";
  EXPECT_FALSE((*late->answer)->check.combined.allowed);
  EXPECT_EQ((*late->answer)->check.combined.retry_after, 750ms);
  // A request that no wait can admit (cost over the burst) is refused at once too.
  AdHocRequest too_big = one_per_second;
  too_big.cost = 2;
  const std::shared_ptr<Pending> never = Start(too_big, 1h);
  ASSERT_TRUE(never->answer.has_value());
  EXPECT_TRUE((*never->answer)->check.combined.never_allowed());
  EXPECT_EQ(timers_.pending(), 0U);
}

TEST_F(AcquireTest, MaxWaitEndsInLineWhenThoseAheadTakeTooLong) {
  const AdHocRequest one_per_second = AdHoc("k", Algorithm::kGcra, 1, 1s);
  const std::shared_ptr<Pending> first = Start(one_per_second, 10s);
  const std::shared_ptr<Pending> second = Start(one_per_second, 10s);
  const std::shared_ptr<Pending> impatient = Start(one_per_second, 300ms);
  RunUntil(300ms);
  ASSERT_TRUE(impatient->answer.has_value());
  EXPECT_EQ(impatient->answered_at, 300ms);
  EXPECT_FALSE((*impatient->answer)->check.combined.allowed);
  EXPECT_EQ((*impatient->answer)->check.combined.retry_after, 300ms);
  RunUntil(1s);
  ASSERT_TRUE(second->answer.has_value());
  EXPECT_TRUE((*second->answer)->check.combined.allowed);
  EXPECT_EQ(second->answered_at, 1s);
}

TEST_F(AcquireTest, AWaiterWhoLeavesGivesUpItsPlace) {
  const AdHocRequest one_per_second = AdHoc("k", Algorithm::kGcra, 1, 1s);
  const std::shared_ptr<Pending> first = Start(one_per_second, 10s);
  const std::shared_ptr<Pending> gone = Start(one_per_second, 10s);  // Head, sleeping to 1 s.
  const std::shared_ptr<Pending> behind = Start(one_per_second, 10s);
  RunUntil(100ms);
  EXPECT_EQ(service_.waiting(), 2U);
  gone->cancel();
  RunUntil(100ms);
  ASSERT_TRUE(gone->answer.has_value());
  EXPECT_EQ(gone->answer->status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(gone->answered_at, 100ms);  // At once, not when its sleep would have ended.
  EXPECT_EQ(service_.waiting(), 1U);
  // The one behind takes its place, and the slot the leaver waited for.
  RunUntil(1s);
  ASSERT_TRUE(behind->answer.has_value());
  EXPECT_TRUE((*behind->answer)->check.combined.allowed);
  EXPECT_EQ(behind->answered_at, 1s);
  gone->cancel();  // Once answered, a cancel does nothing.
  EXPECT_EQ(timers_.RunUntil(clock_, At(kEpoch) + 2s), 0);
}

TEST_F(AcquireTest, ALineIsPerKeyOthersGoOnTheirOwn) {
  const std::shared_ptr<Pending> a1 = Start(AdHoc("a", Algorithm::kGcra, 1, 1s), 10s);
  const std::shared_ptr<Pending> a2 = Start(AdHoc("a", Algorithm::kGcra, 1, 1s), 10s);
  const std::shared_ptr<Pending> b1 = Start(AdHoc("b", Algorithm::kGcra, 1, 1s), 10s);
  RunUntil(0s);
  EXPECT_TRUE(a1->answer.has_value());
  EXPECT_FALSE(a2->answer.has_value());
  ASSERT_TRUE(b1->answer.has_value());
  EXPECT_EQ(b1->answered_at, 0us);
}

TEST_F(AcquireTest, StoppingEndsEveryWaitAsUnavailable) {
  const AdHocRequest one_per_second = AdHoc("k", Algorithm::kGcra, 1, 1s);
  const std::shared_ptr<Pending> first = Start(one_per_second, 10s);
  const std::shared_ptr<Pending> head = Start(one_per_second, 10s);
  const std::shared_ptr<Pending> behind = Start(one_per_second, 10s);
  service_.StopWaiting();
  RunUntil(0s);
  // One arriving after the stop (a keep-alive connection during the drain) goes no further.
  const std::shared_ptr<Pending> late = Start(one_per_second, 10s);
  RunUntil(0s);
  for (const auto& waiter : {head, behind, late}) {
    ASSERT_TRUE(waiter->answer.has_value());
    EXPECT_EQ(waiter->answer->status().code(), absl::StatusCode::kUnavailable);
  }
  EXPECT_EQ(service_.waiting(), 0U);
}

TEST_F(AcquireTest, BadRequestsAreRefused) {
  const AdHocRequest ok = AdHoc("k", Algorithm::kGcra, 1, 1s);
  EXPECT_EQ(service_.Acquire({.check = ok, .max_wait = -1us}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_.Acquire({.check = ok, .max_wait = kMaxAcquireWait + 1us}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_.waiting(), 0U);
  RateLimitService no_timers(store_, clock_, metrics_);
  EXPECT_EQ(no_timers.Acquire({.check = ok, .max_wait = 1s}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// ---------------------------------------------------------------------------------------------
// Concurrency limits: leases

const CheckRequest kMailer{.domain = "jobs", .descriptors = {{.entries = {{"mailer", "nightly"}}}}};

TEST_F(AcquireTest, ConcurrencyLeasesAreHeldUntilReleased) {
  const CheckResult first = *service_.Check(kMailer);
  const CheckResult second = *service_.Check(kMailer);
  EXPECT_TRUE(first.combined.allowed);
  EXPECT_TRUE(second.combined.allowed);
  EXPECT_FALSE(first.lease.empty());
  EXPECT_NE(first.lease, second.lease);
  ASSERT_EQ(second.limits.size(), 1U);
  EXPECT_EQ(second.limits[0].name, "jobs.mailer:concurrency");
  EXPECT_EQ(second.limits[0].concurrency, 2);
  EXPECT_EQ(second.limits[0].lease_ttl, 10s);
  EXPECT_EQ(second.combined.remaining, 0);
  EXPECT_EQ(second.combined.reset_after, 10s);

  clock_.Set(At(kEpoch) + 1s);
  const CheckResult third = *service_.Check(kMailer);
  EXPECT_FALSE(third.combined.allowed);
  EXPECT_EQ(third.combined.retry_after, 9s);  // Until the first lease would expire.
  EXPECT_TRUE(third.lease.empty());

  EXPECT_EQ(service_.Release(first.lease).value_or(false), true);
  EXPECT_EQ(service_.Release(first.lease).value_or(true), false);  // Once only.
  const CheckResult fourth = *service_.Check(kMailer);
  EXPECT_TRUE(fourth.combined.allowed);
  EXPECT_FALSE(fourth.lease.empty());

  // A cost-0 check asks and takes nothing.
  CheckRequest query = kMailer;
  query.cost = 0;
  const CheckResult asked = *service_.Check(query);
  EXPECT_FALSE(asked.combined.allowed);
  EXPECT_TRUE(asked.lease.empty());
  const RuleCounters& counters = *metrics_.rules().Get("jobs.mailer:concurrency");
  EXPECT_EQ(counters.checks.load(), 5U);
  EXPECT_EQ(counters.admitted.load(), 3U);
  EXPECT_EQ(counters.denied.load(), 2U);
}

TEST_F(AcquireTest, AnAcquireWaitsForAReleaseNotForTheExpiry) {
  const CheckResult first = *service_.Check(kMailer);
  ASSERT_TRUE(service_.Check(kMailer)->combined.allowed);
  const std::shared_ptr<Pending> waiter = Start(kMailer, 30s);
  // Between two of its polls of the store (every kLeasePoll): only the release can wake it.
  RunUntil(3050ms);
  EXPECT_FALSE(waiter->answer.has_value());
  ASSERT_EQ(service_.Release(first.lease).value_or(false), true);
  RunUntil(3050ms);
  ASSERT_TRUE(waiter->answer.has_value());
  ASSERT_TRUE(waiter->answer->ok()) << waiter->answer->status();
  EXPECT_TRUE((*waiter->answer)->check.combined.allowed);
  EXPECT_FALSE((*waiter->answer)->check.lease.empty());
  EXPECT_EQ(waiter->answered_at, 3050ms);
  EXPECT_EQ((*waiter->answer)->waited, 3050ms);
}

TEST_F(AcquireTest, ALeaseNobodyGivesBackExpiresAndItsSlotReturns) {
  ASSERT_TRUE(service_.Check(kMailer)->combined.allowed);
  ASSERT_TRUE(service_.Check(kMailer)->combined.allowed);  // Both holders crash: no release.
  const std::shared_ptr<Pending> waiter = Start(kMailer, 30s);
  const std::shared_ptr<Pending> impatient = Start(kMailer, 4s);
  RunUntil(20s);
  ASSERT_TRUE(waiter->answer.has_value());
  ASSERT_TRUE(waiter->answer->ok()) << waiter->answer->status();
  EXPECT_TRUE((*waiter->answer)->check.combined.allowed);
  EXPECT_EQ(waiter->answered_at, 10s);  // The leases' time to live, exactly.
  // The second waiter's max_wait ended first, behind the first: 429, to come back later.
  ASSERT_TRUE(impatient->answer.has_value());
  ASSERT_TRUE(impatient->answer->ok());
  EXPECT_FALSE((*impatient->answer)->check.combined.allowed);
  EXPECT_EQ(impatient->answered_at, 4s);
  // Each request counted once in /metrics, however often the waiters asked the store (every
  // 100 ms for 10 s): the two that took the leases, the one admitted and the one refused.
  const RuleCounters& counters = *metrics_.rules().Get("jobs.mailer:concurrency");
  EXPECT_EQ(counters.checks.load(), 4U);
  EXPECT_EQ(counters.admitted.load(), 3U);
  EXPECT_EQ(counters.denied.load(), 1U);
}

TEST_F(AcquireTest, ChecksThatCannotGiveALeaseBackLeaveConcurrencyOut) {
  CheckRequest auth = kMailer;  // As GET /v1/auth asks: nginx has no way to release.
  auth.leases = false;
  for (int i = 0; i < 3; ++i) {
    const CheckResult result = *service_.Check(auth);
    EXPECT_TRUE(result.combined.allowed);
    EXPECT_TRUE(result.lease.empty());
    EXPECT_TRUE(result.limits.empty());
  }
  EXPECT_TRUE(service_.Check(kMailer)->combined.allowed);  // No slot was taken.
  EXPECT_TRUE(service_.Check(kMailer)->combined.allowed);
}

TEST_F(AcquireTest, WaitersForASlotAreServedInOrderOfArrival) {
  const CheckResult a = *service_.Check(kMailer);
  const CheckResult b = *service_.Check(kMailer);
  std::vector<std::shared_ptr<Pending>> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.push_back(Start(kMailer, 30s));
    RunUntil((i + 1) * 10ms);
  }
  RunUntil(1055ms);  // Off the polls' beat: the releases wake the head.
  ASSERT_EQ(service_.Release(a.lease).value_or(false), true);
  RunUntil(1055ms);
  EXPECT_TRUE(waiters[0]->answer.has_value());
  EXPECT_EQ(waiters[0]->answered_at, 1055ms);
  EXPECT_FALSE(waiters[1]->answer.has_value());
  EXPECT_FALSE(waiters[2]->answer.has_value());
  RunUntil(2055ms);
  ASSERT_EQ(service_.Release(b.lease).value_or(false), true);
  RunUntil(2055ms);
  EXPECT_TRUE(waiters[1]->answer.has_value());
  EXPECT_EQ(waiters[1]->answered_at, 2055ms);
  EXPECT_FALSE(waiters[2]->answer.has_value());
  RunUntil(3055ms);
  ASSERT_EQ(service_.Release((*waiters[0]->answer)->check.lease).value_or(false), true);
  RunUntil(3055ms);
  ASSERT_TRUE(waiters[2]->answer.has_value());
  EXPECT_EQ(waiters[2]->answered_at, 3055ms);
  EXPECT_TRUE((*waiters[2]->answer)->check.combined.allowed);
}

TEST_F(AcquireTest, ARateLimitThatDeniesGivesTheLeaseBack) {
  const CheckRequest exporter{.domain = "jobs", .descriptors = {{.entries = {{"export", "csv"}}}}};
  const CheckResult first = *service_.Check(exporter);
  ASSERT_TRUE(first.combined.allowed);
  ASSERT_EQ(first.limits.size(), 2U);  // The rate limit, then the concurrency limit.
  ASSERT_EQ(service_.Release(first.lease).value_or(false), true);
  // The rate limit (1 per second) is used up: denied, and the lease taken meanwhile goes back.
  const CheckResult second = *service_.Check(exporter);
  EXPECT_FALSE(second.combined.allowed);
  EXPECT_TRUE(second.lease.empty());
  EXPECT_EQ(second.combined.retry_after, 1s);
  EXPECT_EQ(second.limits[1].decision.remaining, 1);  // The slot is free again.
  const std::string rule_key = RuleKey("jobs", {{"export", "csv"}});
  const LeasedKey key{.key = rule_key, .capacity = 1};
  Decision each;
  EXPECT_EQ(
      store_.LeaseAll(LeaseOp::kQuery, {&key, 1}, "", 1s, clock_.Now(), {&each, 1})->remaining, 1);
  // An acquire waits out the rate limit and then takes the slot.
  const std::shared_ptr<Pending> waiter = Start(exporter, 5s);
  RunUntil(2s);
  ASSERT_TRUE(waiter->answer.has_value());
  ASSERT_TRUE(waiter->answer->ok());
  EXPECT_TRUE((*waiter->answer)->check.combined.allowed);
  EXPECT_EQ(waiter->answered_at, 1s);
}

TEST_F(AcquireTest, AReleaseOfAMalformedLeaseIsRefused) {
  for (const std::string& token : {std::string(""), std::string("abc"), std::string("abc.!!"),
                                   std::string("abc.") + std::string(20000, 'A')}) {
    const absl::StatusOr<bool> released = service_.Release(token);
    EXPECT_EQ(released.status().code(), absl::StatusCode::kInvalidArgument) << token;
  }
  EXPECT_EQ(service_.Release("abc.YWJj").status().code(),
            absl::StatusCode::kInvalidArgument);  // "abc": not a key sluiced makes.
}

}  // namespace
}  // namespace sluice::server
