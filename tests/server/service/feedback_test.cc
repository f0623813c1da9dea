// A partner's feedback (server/service/feedback.h): a 429's pause denies the key until its end,
// pauses combine as a maximum, a bucket is left empty at the pause's end so that what follows
// is spaced at the limit's rate, a lower `remaining` brings ours down and never up, every time
// is bounded by max_pause, limits without `feedback` are left alone. On the memory store and a
// manual clock.

#include "server/service/feedback.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

#include "server/service/service.h"
#include "sluice/memory_store.h"
#include "tests/testing/rules.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

using ::sluice::testing::At;
using ::sluice::testing::kEpoch;

constexpr int64_t kMs = 1'000;
constexpr int64_t kSecond = 1'000'000;
constexpr int64_t kStart = kEpoch + 60 * kSecond - kEpoch % (60 * kSecond);

constexpr char kRules[] = R"(
domain: partner
descriptors:
  - key: api
    value: acme
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 5,
                 feedback: {max_pause: 1m, pause: 2s}}
  - key: api
    value: daily
    rate_limit: {unit: minute, requests_per_unit: 100, feedback: true}
  - key: api
    value: plain
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: api
    value: both
    limits:
      - {name: both_second, unit: second, requests_per_unit: 10, feedback: {max_pause: 1m}}
      - {name: both_hour, unit: hour, requests_per_unit: 1000, feedback: {max_pause: 2h}}
  - key: api
    value: adaptive
    rate_limit: {unit: second, requests_per_unit: 100, algorithm: gcra, burst: 10,
                 feedback: {pause: 0s, adaptive: {floor: 10, cut: 0.5, recover: 90s,
                                                  cooldown: 1s}}}
)";

class FeedbackTest : public ::testing::Test {
 protected:
  FeedbackTest() : clock_(At(kStart)), service_(store_, clock_, metrics_) {
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
  }

  static CheckRequest Request(const std::string& value, int64_t cost = 1) {
    return CheckRequest{
        .domain = "partner", .descriptors = {{.entries = {{"api", value}}}}, .cost = cost};
  }

  CheckResult Check(const std::string& value, int64_t cost = 1) {
    absl::StatusOr<CheckResult> result = service_.Check(Request(value, cost));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *std::move(result) : CheckResult{};
  }

  FeedbackResult Tell(const std::string& value, PartnerAnswer answer) {
    absl::StatusOr<FeedbackResult> result =
        service_.Feedback({.target = Request(value), .answer = std::move(answer)});
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *std::move(result) : FeedbackResult{};
  }

  void Go(int64_t offset_us) { clock_.Set(At(kStart + offset_us)); }

  MemoryStore store_;
  ManualClock clock_;
  Metrics metrics_;
  RateLimitService service_;
};

TEST_F(FeedbackTest, A429WithRetryAfterPausesTheKeyUntilThen) {
  ASSERT_TRUE(Check("acme").combined.allowed);
  const FeedbackResult told = Tell("acme", {.status = 429, .retry_after = Micros{3 * kSecond}});
  ASSERT_EQ(told.limits.size(), 1u);
  EXPECT_TRUE(told.limits[0].paused);
  EXPECT_EQ(told.limits[0].pause, Micros{3 * kSecond});
  EXPECT_EQ(told.limits[0].pause_left, Micros{3 * kSecond});

  Go(2999 * kMs);
  const CheckResult paused = Check("acme");
  EXPECT_FALSE(paused.combined.allowed);
  EXPECT_TRUE(paused.limits[0].paused);
  EXPECT_EQ(paused.combined.retry_after, Micros{1 * kMs});
  // Another value of the rule is another key: not paused.
  EXPECT_TRUE(Check("daily").combined.allowed);
}

TEST_F(FeedbackTest, PausesCombineAsTheirMaximum) {
  Tell("acme", {.status = 429, .retry_after = Micros{10 * kSecond}});
  // A shorter one, and the same one told again by another worker: the pause stays as it is.
  FeedbackResult shorter = Tell("acme", {.status = 429, .retry_after = Micros{4 * kSecond}});
  EXPECT_FALSE(shorter.limits[0].paused);
  EXPECT_EQ(shorter.limits[0].pause_left, Micros{10 * kSecond});
  FeedbackResult again = Tell("acme", {.status = 429, .retry_after = Micros{10 * kSecond}});
  EXPECT_FALSE(again.limits[0].paused);
  EXPECT_EQ(again.limits[0].pause_left, Micros{10 * kSecond});
  // A longer one, later, lengthens it to its own end.
  Go(5 * kSecond);
  FeedbackResult longer = Tell("acme", {.status = 429, .retry_after = Micros{8 * kSecond}});
  EXPECT_TRUE(longer.limits[0].paused);
  EXPECT_EQ(longer.limits[0].pause_left, Micros{8 * kSecond});
  EXPECT_EQ(metrics_.rules().Get("partner.api_acme")->partner_pauses.load(), 2u);
}

TEST_F(FeedbackTest, APauseIsBoundedByMaxPauseAndSaysSo) {
  const FeedbackResult told =
      Tell("acme", {.status = 429, .retry_after = std::chrono::hours(24 * 3650)});
  EXPECT_EQ(told.limits[0].pause, std::chrono::minutes(1));
  ASSERT_EQ(told.limits[0].notes.size(), 1u);
  EXPECT_NE(told.limits[0].notes[0].find("max_pause"), std::string::npos);
  Go(60 * kSecond);  // The pause is over; the bucket, drained for it, has its first unit at
  EXPECT_TRUE(Check("acme").limits[0].decision.retry_after <= Micros{100 * kMs});  // 60.1 s.
  EXPECT_FALSE(Check("acme").limits[0].paused);
  Go(60 * kSecond + 100 * kMs);
  EXPECT_TRUE(Check("acme").combined.allowed);
}

TEST_F(FeedbackTest, A429WithoutATimePausesForThePolicysPause) {
  EXPECT_EQ(Tell("acme", {.status = 429}).limits[0].pause, Micros{2 * kSecond});
  EXPECT_EQ(Tell("daily", {.status = 429}).limits[0].pause, Micros{1 * kSecond});  // Default.
  // A 200 or a 500 pauses nothing; a 503 only with a time.
  EXPECT_EQ(Tell("daily", {.status = 500}).limits[0].pause, Micros{0});
  EXPECT_EQ(Tell("daily", {.status = 503}).limits[0].pause, Micros{0});
  EXPECT_EQ(Tell("daily", {.status = 503, .retry_after = Micros{5 * kSecond}}).limits[0].pause,
            Micros{5 * kSecond});
}

TEST_F(FeedbackTest, AfterAPauseABucketAdmitsAtItsRateNotItsBurst) {
  Tell("acme", {.status = 429, .retry_after = Micros{2 * kSecond}});
  // 10/s with a burst of 5: without the drain, 5 would pass at once at the pause's end.
  Go(2 * kSecond);
  int admitted = 0;
  int64_t last = -1;
  for (int64_t t = 2 * kSecond; t <= 3 * kSecond; t += 10 * kMs) {
    Go(t);
    if (Check("acme").combined.allowed) {
      ++admitted;
      if (last >= 0) {
        EXPECT_GE(t - last, 100 * kMs);  // One per emission interval.
      }
      last = t;
    }
  }
  // One per 100 ms from the pause's end: 2.1 s to 3.0 s.
  EXPECT_EQ(admitted, 10);
}

TEST_F(FeedbackTest, ALowerRemainingBringsOursDownNeverUp) {
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(Check("daily").combined.allowed);
  }
  // Ours: 90 left in this minute. The partner says 30.
  const FeedbackResult lowered = Tell("daily", {.status = 200, .remaining = 30});
  EXPECT_EQ(lowered.limits[0].lowered, 60);
  EXPECT_EQ(lowered.limits[0].after.remaining, 30);
  EXPECT_FALSE(lowered.limits[0].paused);
  // A higher one changes nothing.
  const FeedbackResult higher = Tell("daily", {.status = 200, .remaining = 80});
  EXPECT_EQ(higher.limits[0].lowered, 0);
  EXPECT_EQ(higher.limits[0].after.remaining, 30);
  int admitted = 0;
  while (Check("daily").combined.allowed) {
    ++admitted;
  }
  EXPECT_EQ(admitted, 30);
  // Our window's end restores ours.
  Go(60 * kSecond);
  EXPECT_EQ(Check("daily").limits[0].decision.remaining, 99);
}

TEST_F(FeedbackTest, NothingRemainingUntilAResetIsAPause) {
  const FeedbackResult told =
      Tell("daily", {.status = 200, .remaining = 0, .reset = Micros{90 * kSecond}});
  EXPECT_EQ(told.limits[0].pause, Micros{90 * kSecond});
  Go(61 * kSecond);  // Our window has reset; the partner's has not.
  EXPECT_FALSE(Check("daily").combined.allowed);
  Go(90 * kSecond);
  EXPECT_TRUE(Check("daily").combined.allowed);
}

TEST_F(FeedbackTest, ALimitWithoutFeedbackIsLeftAloneAndNamed) {
  const FeedbackResult told = Tell("plain", {.status = 429, .retry_after = Micros{kSecond}});
  EXPECT_TRUE(told.limits.empty());
  ASSERT_EQ(told.notes.size(), 1u);
  EXPECT_NE(told.notes[0].find("takes no feedback"), std::string::npos);
  EXPECT_TRUE(Check("plain").combined.allowed);
}

TEST_F(FeedbackTest, AResetForgetsThePause) {
  Tell("acme", {.status = 429, .retry_after = Micros{30 * kSecond}});
  ASSERT_FALSE(Check("acme").combined.allowed);
  ASSERT_TRUE(service_.Reset(Request("acme")).ok());
  EXPECT_TRUE(Check("acme").combined.allowed);
}

TEST_F(FeedbackTest, AnAdHocLimitTakesFeedbackOnlyWhenItSaysSo) {
  AdHocRequest adhoc{.key = "partner-x", .spec = {.limit = 5, .period = std::chrono::seconds(1)}};
  absl::StatusOr<FeedbackResult> refused =
      service_.Feedback({.target = adhoc, .answer = {.status = 429}});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);

  adhoc.feedback = FeedbackPolicy{.max_pause = std::chrono::seconds(10)};
  absl::StatusOr<FeedbackResult> told = service_.Feedback(
      {.target = adhoc, .answer = {.status = 429, .retry_after = std::chrono::seconds(60)}});
  ASSERT_TRUE(told.ok()) << told.status();
  EXPECT_EQ(told->limits[0].pause, std::chrono::seconds(10));
  absl::StatusOr<CheckResult> checked = service_.CheckAdHoc(adhoc);
  ASSERT_TRUE(checked.ok());
  EXPECT_FALSE(checked->combined.allowed);
  EXPECT_TRUE(checked->limits[0].paused);
  EXPECT_EQ(checked->combined.retry_after, std::chrono::seconds(10));
}

TEST_F(FeedbackTest, TwoLimitsOfOneKeyShareItsPause) {
  ASSERT_TRUE(Check("both").combined.allowed);
  const FeedbackResult told = Tell("both", {.status = 429, .retry_after = Micros{5 * kSecond}});
  ASSERT_EQ(told.limits.size(), 2u);
  EXPECT_EQ(told.limits[0].pause_left, Micros{5 * kSecond});
  EXPECT_EQ(told.limits[1].pause_left, Micros{5 * kSecond});
  const CheckResult paused = Check("both");
  EXPECT_FALSE(paused.combined.allowed);
  EXPECT_TRUE(paused.limits[0].paused && paused.limits[1].paused);
  Go(5 * kSecond);
  EXPECT_TRUE(Check("both").combined.allowed);
}

TEST_F(FeedbackTest, AWindowPauseEndsWithThePauseNotTheWindow) {
  // A minute's window and a 1 s pause (a 429 without a time): the window is not filled.
  ASSERT_TRUE(Check("daily").combined.allowed);
  Tell("daily", {.status = 429});
  EXPECT_FALSE(Check("daily").combined.allowed);
  Go(1 * kSecond);
  EXPECT_TRUE(Check("daily").combined.allowed);
}

// The adaptive limit (100/s, floor 10, cut 0.5, back to 100 in 90 s): a 429 halves its rate,
// once per cooldown, fleet-wide; the rate climbs back linearly; never above the limit.
TEST_F(FeedbackTest, A429CutsAnAdaptiveRateWhichClimbsBack) {
  const FeedbackResult first = Tell("adaptive", {.status = 429});
  ASSERT_EQ(first.limits.size(), 1u);
  EXPECT_TRUE(first.limits[0].cut);
  EXPECT_EQ(first.limits[0].rate, 50);
  // Its siblings' 429s, within the cooldown: no second cut.
  const FeedbackResult sibling = Tell("adaptive", {.status = 429});
  EXPECT_FALSE(sibling.limits[0].cut);
  EXPECT_EQ(sibling.limits[0].rate, 50);
  // At 50/s the pace admits one each 20 ms (its burst, 10 at 100/s, is 5 at 50/s).
  int admitted = 0;
  for (int64_t t = 0; t < kSecond; t += kMs) {
    Go(t);
    admitted += Check("adaptive").combined.allowed ? 1 : 0;
  }
  EXPECT_GE(admitted, 50);
  EXPECT_LE(admitted, 50 + 5);
  // Back at 1/s a second (90 from the floor to the limit in 90 s): 45 s on, 95/s.
  Go(45 * kSecond);
  EXPECT_EQ(Tell("adaptive", {.status = 200}).limits[0].rate, 95);
  // A 429 now cuts from there.
  EXPECT_EQ(Tell("adaptive", {.status = 429}).limits[0].rate, 47);
  Go(45 * kSecond + 90 * kSecond);
  EXPECT_EQ(Tell("adaptive", {.status = 200}).limits[0].rate, 100);
  EXPECT_EQ(metrics_.rules().Get("partner.api_adaptive")->partner_cuts.load(), 2u);
}

// Against a partner whose real limit is 40/s (a token bucket, burst 1), clients calling as fast
// as sluiced admits (every 2 ms) for 3 minutes: every 429 cuts, the rate climbs back. AIMD's
// sawtooth between cut x R and R averages (1 + cut)/2 of R, 3/4 here, less the start from 100/s and
// the calls refused before each cut: the partner accepts at least 0.7 of its limit (0.71 here, the
// same on any machine: the clock is manual), and sluiced never admits past its own 100/s.
TEST_F(FeedbackTest, AnAdaptiveRateConvergesBelowAPartnersRealLimit) {
  constexpr int64_t kReal = 40;
  constexpr int64_t kRun = 180 * kSecond;
  int64_t partner_tat = 0;  // The partner's gcra: one each 25 ms.
  int64_t accepted = 0, refused = 0, admitted_in_second = 0, second = -1;
  for (int64_t t = 0; t < kRun; t += 2 * kMs) {
    Go(t);
    if (t / kSecond != second) {
      second = t / kSecond;
      admitted_in_second = 0;
    }
    if (!Check("adaptive").combined.allowed) {
      continue;
    }
    ASSERT_LE(++admitted_in_second, 100 + 10);  // The limit and its burst, never more.
    if (std::max(partner_tat, t) - t <= 0) {
      partner_tat = std::max(partner_tat, t) + kSecond / kReal;
      ++accepted;
      Tell("adaptive", {.status = 200});
    } else {
      ++refused;
      Tell("adaptive", {.status = 429});
    }
  }
  const double rate = static_cast<double>(accepted) / (kRun / kSecond);
  EXPECT_GE(rate, 0.7 * kReal) << accepted << " accepted, " << refused << " refused";
  EXPECT_LE(rate, kReal);
  // A 429 a cut, at most one per cooldown: far fewer than the calls accepted.
  EXPECT_LT(refused * 20, accepted);
}

// LimitSettlement's arithmetic: the drain leaves a bucket empty at the pause's end; a window
// is left to the pause key; a remaining brings usage to capacity - remaining, only where that
// lasts no longer than max_pause.
TEST(LimitSettlement, DrainsBucketsLowersOnlyWithinMaxPause) {
  const Micros hour = std::chrono::hours(1);
  std::string note;
  const Limit gcra = Limit::Create({.algorithm = Algorithm::kGcra,
                                    .limit = 10,
                                    .period = std::chrono::seconds(1),
                                    .burst = 5})
                         .value();
  const std::optional<Settlement> drain =
      LimitSettlement(gcra, 5, std::chrono::milliseconds(1500), std::nullopt, hour, &note);
  ASSERT_TRUE(drain.has_value());
  EXPECT_EQ(drain->max_debt, 15);  // 1.5 s at 10/s.
  EXPECT_EQ(drain->units, 20);
  EXPECT_TRUE(note.empty());
  const Limit window = Limit::Create({.limit = 100, .period = std::chrono::minutes(1)}).value();
  EXPECT_EQ(LimitSettlement(window, 100, std::chrono::seconds(5), 40, hour, &note), std::nullopt);
  EXPECT_EQ(LimitSettlement(window, 100, Micros{0}, 40, hour, &note),
            (Settlement{.units = 100, .max_debt = -40}));
  EXPECT_EQ(LimitSettlement(window, 100, Micros{0}, 100, hour, &note), std::nullopt);
  EXPECT_EQ(LimitSettlement(window, 100, Micros{0}, std::nullopt, hour, &note), std::nullopt);
  EXPECT_TRUE(note.empty());
  // A window longer than max_pause is not lowered: it would hold for up to its period.
  EXPECT_EQ(LimitSettlement(window, 100, Micros{0}, 40, std::chrono::seconds(30), &note),
            std::nullopt);
  EXPECT_NE(note.find("past max_pause"), std::string::npos);
  EXPECT_EQ(PauseSettlement(Micros{1500}), (Settlement{.units = 2, .max_debt = 1}));
  EXPECT_EQ(PauseSettlement(Micros{0}), (Settlement{.units = 0, .max_debt = 0}));
}

TEST(LimitSettlement, ADrainPastWhatEveryStoreHoldsSaysSo) {
  std::string note;
  const Limit fast = Limit::Create({.algorithm = Algorithm::kGcra,
                                    .limit = 99999,
                                    .period = std::chrono::seconds(1),
                                    .burst = 10})
                         .value();
  const std::optional<Settlement> drain = LimitSettlement(
      fast, 10, std::chrono::hours(24), std::nullopt, std::chrono::hours(24), &note);
  ASSERT_TRUE(drain.has_value());
  EXPECT_LT(drain->max_debt, int64_t{99999} * 86400);
  EXPECT_NE(note.find("refills during the last"), std::string::npos);
}

TEST(AdaptiveRate, CutsRecoversLinearlyAndStaysWithinFloorAndLimit) {
  const AdaptivePolicy policy{.floor = 10, .cut = 0.5, .recover = std::chrono::seconds(90)};
  EXPECT_EQ(AdaptiveRate(policy, 100, Micros{0}), 100);
  EXPECT_EQ(AdaptiveRate(policy, 100, std::chrono::seconds(90)), 10);
  EXPECT_EQ(AdaptiveRate(policy, 100, std::chrono::hours(1)), 10);
  EXPECT_EQ(AdaptiveRate(policy, 100, std::chrono::seconds(45)), 55);
  EXPECT_EQ(CutRate(policy, 100), 50);
  EXPECT_EQ(CutRate(policy, 15), 10);                   // Never below the floor.
  EXPECT_EQ(CutRate({.floor = 1, .cut = 0.95}, 2), 1);  // Always cuts, by one at least.
  for (int64_t rate = 10; rate <= 100; ++rate) {
    EXPECT_EQ(AdaptiveRate(policy, 100, SlowdownFor(policy, 100, rate)), rate) << rate;
  }
  EXPECT_EQ(PacingCost(1, std::chrono::seconds(1), 50), 20'000);  // 20 ms of a second.
  EXPECT_EQ(PacingCost(3, std::chrono::seconds(1), 7), 428'572);  // Rounded up.
}

}  // namespace
}  // namespace sluice::server
