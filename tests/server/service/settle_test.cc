// Receipts, settles and resets through the service (server/service/settle.cc), on the memory
// store and a manual clock: what a settle gives back or charges, once, and only for a receipt
// this fleet's secret signed.

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

constexpr int64_t kMinute = 60'000'000;
constexpr int64_t kStart = kEpoch + kMinute - kEpoch % kMinute;  // A minute's first µs.

constexpr char kRules[] = R"(
domain: api
pools:
  spare: {requests_per_unit: 2, unit: minute}
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: plan
    limits:
      - {requests_per_unit: 2, unit: second}
      - {requests_per_unit: 3, unit: minute, name: plan_minute}
  - key: llm
    rate_limit: {unit: minute, requests_per_unit: 100, max_debt: 20}
  - key: tokens
    rate_limit: {algorithm: gcra, period: 1s, requests_per_unit: 10}
  - key: soft
    mode: soft
    soft_percent: 50
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: job
    mode: elastic
    pool: spare
    rate_limit: {unit: minute, requests_per_unit: 1}
)";

std::string Secret(char fill) { return std::string(kMinSecretBytes, fill); }

class SettleTest : public ::testing::Test {
 protected:
  SettleTest() : clock_(At(kStart)), service_(store_, clock_, metrics_) {
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
    service_.SetReceiptSigner(ReceiptSigner::Create(Secret('a')).value());
  }

  static CheckRequest Request(std::vector<std::pair<std::string, std::string>> descriptors,
                              int64_t cost = 1, bool receipt = true) {
    CheckRequest request{.domain = "api", .cost = cost, .receipt = receipt};
    for (auto& [key, value] : descriptors) {
      request.descriptors.push_back({.entries = {{key, value}}});
    }
    return request;
  }

  CheckResult Check(std::vector<std::pair<std::string, std::string>> descriptors, int64_t cost = 1,
                    bool receipt = true) {
    absl::StatusOr<CheckResult> result =
        service_.Check(Request(std::move(descriptors), cost, receipt));
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *std::move(result) : CheckResult{};
  }

  // What a cost-0 check of `descriptors` has left.
  int64_t Remaining(std::vector<std::pair<std::string, std::string>> descriptors) {
    return Check(std::move(descriptors), 0, false).combined.remaining;
  }

  MemoryStore store_;
  ManualClock clock_;
  Metrics metrics_;
  RateLimitService service_;
};

TEST_F(SettleTest, AReceiptOnlyWhenAskedForAndSomethingWasCharged) {
  EXPECT_TRUE(Check({{"user", "a"}}, 1, /*receipt=*/false).receipt.empty());
  EXPECT_TRUE(Check({{"user", "a"}}, 0).receipt.empty());  // A query charges nothing.
  const CheckResult charged = Check({{"user", "a"}});
  ASSERT_FALSE(charged.receipt.empty());
  EXPECT_GE(charged.receipt_ttl, kMinReceiptLife);
  EXPECT_LE(charged.receipt_ttl, kMaxReceiptLife);
  Check({{"user", "a"}});
  const CheckResult denied = Check({{"user", "a"}});
  ASSERT_FALSE(denied.combined.allowed);
  EXPECT_TRUE(denied.receipt.empty());  // Nothing was charged: nothing to settle.
}

TEST_F(SettleTest, ARefundGivesBackOnEveryLimitTheCheckCharged) {
  const CheckResult first = Check({{"plan", "p"}});
  Check({{"plan", "p"}});
  ASSERT_FALSE(Check({{"plan", "p"}}).combined.allowed);  // 2 per second used up.
  absl::StatusOr<SettleResult> settled = service_.Settle({.receipt = first.receipt, .cost = 0});
  ASSERT_TRUE(settled.ok()) << settled.status();
  EXPECT_EQ(settled->given_back, 1);
  EXPECT_EQ(settled->charged, 0);
  ASSERT_EQ(settled->limits.size(), 2U);
  EXPECT_EQ(settled->limits[1].name, "plan_minute");
  EXPECT_EQ(settled->limits[1].settled.after.remaining, 2);  // 3 a minute, 1 charged now.
  EXPECT_TRUE(Check({{"plan", "p"}}).combined.allowed);
  EXPECT_EQ(metrics_.settles(), 1U);
}

TEST_F(SettleTest, AnExtraIsChargedPastTheLimitUpToMaxDebtAndDeniesUntilTimePaysIt) {
  const CheckResult call = Check({{"llm", "u"}}, 10);
  absl::StatusOr<SettleResult> settled = service_.Settle({.receipt = call.receipt, .cost = 500});
  ASSERT_TRUE(settled.ok()) << settled.status();
  // 100 a minute and max_debt 20: at most 120 in the window, 10 of them charged already.
  EXPECT_EQ(settled->charged, 110);
  EXPECT_EQ(settled->given_back, 0);
  EXPECT_EQ(settled->limits[0].settled.after.remaining, 0);
  EXPECT_FALSE(Check({{"llm", "u"}}, 1, false).combined.allowed);
  clock_.Set(At(kStart + kMinute));  // A fixed window's debt ends with its window.
  EXPECT_TRUE(Check({{"llm", "u"}}, 1, false).combined.allowed);
}

TEST_F(SettleTest, TheDefaultDebtIsOneLimitsWorth) {
  const CheckResult call = Check({{"user", "d"}});
  absl::StatusOr<SettleResult> settled = service_.Settle({.receipt = call.receipt, .cost = 100});
  ASSERT_TRUE(settled.ok()) << settled.status();
  EXPECT_EQ(settled->charged, 5);  // 3 + 3 in the window, 1 charged already.
}

TEST_F(SettleTest, ABucketsRefundGivesBackWhatIsStillAheadOfTheClock) {
  const CheckResult call = Check({{"tokens", "t"}}, 10);  // gcra 10 a second: drained.
  ASSERT_TRUE(call.combined.allowed);
  ASSERT_FALSE(Check({{"tokens", "t"}}, 1, false).combined.allowed);
  clock_.Set(At(kStart + 500'000));  // Half of it has dripped back by now.
  absl::StatusOr<SettleResult> settled = service_.Settle({.receipt = call.receipt, .cost = 2});
  ASSERT_TRUE(settled.ok()) << settled.status();
  EXPECT_EQ(settled->given_back, 5);  // 8 asked back; 5 of them still ahead of the clock.
  EXPECT_EQ(Remaining({{"tokens", "t"}}), 10);
}

TEST_F(SettleTest, AReceiptSettlesOnceAndASecondSettleChangesNothing) {
  const CheckResult call = Check({{"user", "o"}});
  ASSERT_TRUE(service_.Settle({.receipt = call.receipt, .cost = 0}).ok());
  Check({{"user", "o"}}, 1, false);
  const int64_t before = Remaining({{"user", "o"}});
  absl::StatusOr<SettleResult> again = service_.Settle({.receipt = call.receipt, .cost = 0});
  EXPECT_TRUE(absl::IsInvalidArgument(again.status()));
  EXPECT_EQ(again.status().message(), "receipt was settled already");
  EXPECT_EQ(Remaining({{"user", "o"}}), before);
  EXPECT_EQ(metrics_.settles_refused(), 1U);
}

TEST_F(SettleTest, AnotherServerWithTheSameSecretSettlesAndRefusesAReplay) {
  Metrics other_metrics;
  RateLimitService other(store_, clock_, other_metrics);
  other.SetRules(testing::MustParseRules(kRules, other_metrics.rules(), store_));
  other.SetReceiptSigner(ReceiptSigner::Create(Secret('a')).value());
  const CheckResult call = Check({{"user", "f"}});
  ASSERT_TRUE(other.Settle({.receipt = call.receipt, .cost = 0}).ok());
  EXPECT_EQ(Remaining({{"user", "f"}}), 3);
  EXPECT_EQ(service_.Settle({.receipt = call.receipt, .cost = 0}).status().message(),
            "receipt was settled already");
}

TEST_F(SettleTest, ForgedChangedForeignAndExpiredReceiptsAreRefusedAndChangeNothing) {
  const CheckResult call = Check({{"user", "x"}});
  const int64_t before = Remaining({{"user", "x"}});
  auto refused = [&](std::string receipt, std::string_view why) {
    absl::StatusOr<SettleResult> settled = service_.Settle({.receipt = receipt, .cost = 0});
    EXPECT_TRUE(absl::IsInvalidArgument(settled.status())) << settled.status();
    EXPECT_NE(std::string(settled.status().message()).find(why), std::string::npos)
        << settled.status() << " should say " << why;
    EXPECT_EQ(Remaining({{"user", "x"}}), before);
  };
  std::string changed = call.receipt;
  changed[changed.size() / 2] = changed[changed.size() / 2] == 'A' ? 'B' : 'A';
  refused(changed, "signature");
  refused("", "empty");
  refused("r1.bm90IGEgcmVjZWlwdA.AAAA", "receipt");
  refused(std::string(kMaxReceiptBytes + 1, 'r'), "longer than");
  // Signed with another fleet's secret.
  Metrics other_metrics;
  RateLimitService other(store_, clock_, other_metrics);
  other.SetRules(testing::MustParseRules(kRules, other_metrics.rules(), store_));
  other.SetReceiptSigner(ReceiptSigner::Create(Secret('b')).value());
  absl::StatusOr<CheckResult> foreign = other.Check(Request({{"user", "y"}}));
  ASSERT_TRUE(foreign.ok());
  refused(foreign->receipt, "signature");
  // Expired: one µs after its last.
  clock_.Set(At(kStart) + call.receipt_ttl + Micros{1});
  absl::StatusOr<SettleResult> late = service_.Settle({.receipt = call.receipt, .cost = 0});
  EXPECT_NE(std::string(late.status().message()).find("expired"), std::string::npos)
      << late.status();
  EXPECT_EQ(metrics_.settles(), 0U);
}

TEST_F(SettleTest, SoftShadowAndPoolLimitsAreSettledWhereTheyWereCharged) {
  const CheckResult soft = Check({{"soft", "s"}});
  absl::StatusOr<SettleResult> settled = service_.Settle({.receipt = soft.receipt, .cost = 0});
  ASSERT_TRUE(settled.ok()) << settled.status();
  EXPECT_EQ(settled->given_back, 1);
  EXPECT_EQ(Remaining({{"soft", "s"}}), 4);  // Told against the nominal 4.

  const CheckResult shadow = Check({{"user", "h"}, {"shadow", "h"}});
  settled = service_.Settle({.receipt = shadow.receipt, .cost = 0});
  ASSERT_TRUE(settled.ok()) << settled.status();
  EXPECT_EQ(settled->limits.size(), 2U);
  EXPECT_EQ(settled->given_back, 1);

  Check({{"job", "j"}});
  const CheckResult borrowed = Check({{"job", "j"}});  // Over its 1: the pool lends.
  ASSERT_TRUE(borrowed.combined.allowed);
  settled = service_.Settle({.receipt = borrowed.receipt, .cost = 0});
  ASSERT_TRUE(settled.ok()) << settled.status();
  ASSERT_EQ(settled->limits.size(), 1U);
  EXPECT_EQ(settled->limits[0].name, "api.pool_spare");
  EXPECT_EQ(settled->limits[0].settled.after.remaining, 2);
}

TEST_F(SettleTest, AdHocReceiptsCarryTheirOwnMaxDebt) {
  AdHocRequest request{.key = "k",
                       .spec = {.limit = 5, .period = std::chrono::minutes(1)},
                       .receipt = true,
                       .max_debt = 1};
  absl::StatusOr<CheckResult> call = service_.CheckAdHoc(request);
  ASSERT_TRUE(call.ok()) << call.status();
  absl::StatusOr<SettleResult> settled = service_.Settle({.receipt = call->receipt, .cost = 50});
  ASSERT_TRUE(settled.ok()) << settled.status();
  EXPECT_EQ(settled->charged, 5);  // 5 + 1 in the window, 1 charged already.
  request.max_debt = -1;
  EXPECT_TRUE(absl::IsInvalidArgument(service_.CheckAdHoc(request).status()));
}

TEST_F(SettleTest, ACostOutOfRangeIsRefused) {
  const CheckResult call = Check({{"user", "c"}});
  EXPECT_TRUE(
      absl::IsInvalidArgument(service_.Settle({.receipt = call.receipt, .cost = -1}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      service_.Settle({.receipt = call.receipt, .cost = Limit::kMaxCount + 1}).status()));
  EXPECT_TRUE(service_.Settle({.receipt = call.receipt, .cost = 0}).ok());  // Still unsettled.
}

TEST_F(SettleTest, AResetForgetsEveryLimitTheRequestNamesAndNothingElse) {
  for (int i = 0; i < 3; ++i) {
    Check({{"user", "r"}}, 1, false);
    Check({{"user", "other"}}, 1, false);
  }
  ASSERT_EQ(Remaining({{"user", "r"}}), 0);
  absl::StatusOr<ResetResult> reset = service_.Reset(Request({{"user", "r"}}));
  ASSERT_TRUE(reset.ok()) << reset.status();
  EXPECT_EQ(reset->limits, std::vector<std::string>{"api.user"});
  EXPECT_FALSE(reset->unmatched);
  EXPECT_EQ(Remaining({{"user", "r"}}), 3);
  EXPECT_EQ(Remaining({{"user", "other"}}), 0);

  CheckRequest unknown = Request({{"user", "r"}});
  unknown.domain = "nowhere";
  reset = service_.Reset(unknown);
  ASSERT_TRUE(reset.ok());
  EXPECT_TRUE(reset->unmatched);
  EXPECT_TRUE(reset->limits.empty());

  const AdHocRequest adhoc{.key = "k", .spec = {.limit = 1, .period = std::chrono::minutes(1)}};
  ASSERT_TRUE(service_.CheckAdHoc(adhoc).ok());
  ASSERT_FALSE(service_.CheckAdHoc(adhoc)->combined.allowed);
  ASSERT_TRUE(service_.Reset(adhoc).ok());
  EXPECT_TRUE(service_.CheckAdHoc(adhoc)->combined.allowed);
}

}  // namespace
}  // namespace sluice::server
