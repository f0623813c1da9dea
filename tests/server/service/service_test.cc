#include "server/service/service.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "tests/testing/rules.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

using ::sluice::testing::At;
using ::sluice::testing::kEpoch;

// kEpoch moved to a minute boundary, so that windows of a minute start with the test.
constexpr int64_t kMinute = 60'000'000;
constexpr int64_t kStart = kEpoch + kMinute - kEpoch % kMinute;

constexpr char kRules[] = R"(
domain: api
ipv6_prefix: 64
pools:
  spare: {requests_per_unit: 2, unit: minute}
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: team
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: plan
    limits:
      - {requests_per_unit: 2, unit: second}
      - {requests_per_unit: 3, unit: minute, name: plan_minute}
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
  - key: free
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: premium
    rate_limit: {unit: minute, requests_per_unit: 100, replaces: [{name: api.user}]}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: remote_address
    value: "2001:db8:0:9::1"
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: export
    concurrency: 2
)";

class ServiceTest : public ::testing::Test {
 protected:
  ServiceTest() : clock_(At(kStart)), service_(store_, clock_, metrics_) {
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
  }

  // A rules-mode check of one descriptor per (key, value).
  CheckResult Check(std::vector<std::pair<std::string, std::string>> descriptors,
                    int64_t cost = 1) {
    CheckRequest request{.domain = "api", .cost = cost};
    for (auto& [key, value] : descriptors) {
      request.descriptors.push_back({.entries = {{key, value}}});
    }
    absl::StatusOr<CheckResult> result = service_.Check(request);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : CheckResult{};
  }

  const RuleCounters& Counters(const std::string& name) { return *metrics_.rules().Get(name); }

  MemoryStore store_;
  ManualClock clock_;
  Metrics metrics_;
  RateLimitService service_;
};

// "unmatched" (CheckResult::unmatched) says that no rule matched, not that no limit applied:
// an unlimited rule and a concurrency limit asked without leases (GET /v1/auth) match.
TEST_F(ServiceTest, UnmatchedOnlyWhenNoRuleMatchedAnyDescriptor) {
  EXPECT_TRUE(Check({{"usr", "a"}}).unmatched);  // A misspelt key.
  EXPECT_TRUE(Check({{"usr", "a"}, {"tema", "b"}}).unmatched);
  EXPECT_FALSE(Check({{"usr", "a"}, {"user", "a"}}).unmatched);
  EXPECT_FALSE(Check({{"free", "a"}}).unmatched);
  CheckRequest no_leases{
      .domain = "api", .descriptors = {{.entries = {{"export", "csv"}}}}, .leases = false};
  absl::StatusOr<CheckResult> matched = service_.Check(no_leases);
  ASSERT_TRUE(matched.ok()) << matched.status();
  EXPECT_TRUE(matched->limits.empty());
  EXPECT_FALSE(matched->unmatched);
  no_leases.domain = "apj";
  absl::StatusOr<CheckResult> unknown = service_.Check(no_leases);
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_TRUE(unknown->unmatched);
}

TEST_F(ServiceTest, HardLimitAdmitsUpToItAndThenDenies) {
  for (int i = 0; i < 3; ++i) {
    const CheckResult r = Check({{"user", "bob"}});
    EXPECT_TRUE(r.combined.allowed);
    EXPECT_EQ(r.combined.remaining, 2 - i);
  }
  const CheckResult denied = Check({{"user", "bob"}});
  EXPECT_FALSE(denied.combined.allowed);
  EXPECT_EQ(denied.combined.retry_after, Micros{60'000'000});  // kStart is minute-aligned.
  EXPECT_TRUE(Check({{"user", "carol"}}).combined.allowed);    // Each value its own count.
  clock_.Advance(Micros{60'000'000});
  EXPECT_TRUE(Check({{"user", "bob"}}).combined.allowed);
  EXPECT_EQ(Counters("api.user").checks.load(), 6U);
  EXPECT_EQ(Counters("api.user").denied.load(), 1U);
  EXPECT_EQ(Counters("api.user").admitted.load(), 5U);
}

TEST_F(ServiceTest, SeveralDescriptorsAreAllOrNothing) {
  EXPECT_TRUE(Check({{"team", "red"}}).combined.allowed);  // team red is now at its limit.
  const CheckResult denied = Check({{"user", "dan"}, {"team", "red"}});
  EXPECT_FALSE(denied.combined.allowed);
  ASSERT_EQ(denied.limits.size(), 2U);
  EXPECT_TRUE(denied.limits[0].decision.allowed);     // user dan would have allowed it ...
  EXPECT_EQ(denied.limits[0].decision.remaining, 3);  // ... and was not charged.
  EXPECT_EQ(Check({{"user", "dan"}}).combined.remaining, 2);
}

TEST_F(ServiceTest, SeveralLimitsOnOneDescriptor) {
  EXPECT_TRUE(Check({{"plan", "p"}}).combined.allowed);
  const CheckResult second = Check({{"plan", "p"}});
  EXPECT_TRUE(second.combined.allowed);
  EXPECT_EQ(second.limits.size(), 2U);
  EXPECT_FALSE(Check({{"plan", "p"}}).combined.allowed);  // 2 per second.
  clock_.Advance(Micros{1'000'000});
  EXPECT_TRUE(Check({{"plan", "p"}}).combined.allowed);  // The third of the minute.
  clock_.Advance(Micros{1'000'000});
  const CheckResult minute = Check({{"plan", "p"}});
  EXPECT_FALSE(minute.combined.allowed);
  EXPECT_EQ(minute.limits[1].name, "plan_minute");
  EXPECT_FALSE(minute.limits[1].decision.allowed);
  EXPECT_TRUE(minute.limits[0].decision.allowed);
}

TEST_F(ServiceTest, SoftModeAdmitsPastTheLimitAndMarksIt) {
  for (int i = 0; i < 4; ++i) {
    const CheckResult r = Check({{"soft", "s"}});
    EXPECT_TRUE(r.combined.allowed);
    EXPECT_FALSE(r.limits[0].over_soft) << i;
    EXPECT_EQ(r.limits[0].decision.remaining, 3 - i);  // Against the nominal 4.
  }
  for (int i = 0; i < 2; ++i) {
    const CheckResult r = Check({{"soft", "s"}});
    EXPECT_TRUE(r.combined.allowed);
    EXPECT_TRUE(r.limits[0].over_soft) << i;
    EXPECT_EQ(r.limits[0].decision.remaining, 0);
  }
  EXPECT_FALSE(Check({{"soft", "s"}}).combined.allowed);  // 4 + 50% = 6.
  EXPECT_EQ(Counters("api.soft").over_soft.load(), 2U);
}

TEST_F(ServiceTest, ShadowModeCountsButNeverDenies) {
  EXPECT_TRUE(Check({{"shadow", "s"}}).combined.allowed);
  const CheckResult over = Check({{"shadow", "s"}});
  EXPECT_TRUE(over.combined.allowed);
  EXPECT_FALSE(over.limits[0].decision.allowed);
  EXPECT_EQ(over.combined.retry_after, Micros{0});
  EXPECT_EQ(Counters("api.shadow").shadow_denied.load(), 1U);
  EXPECT_EQ(Counters("api.shadow").denied.load(), 0U);
}

TEST_F(ServiceTest, ShadowLimitIsNotChargedWhenAnEnforcedOneDenies) {
  EXPECT_TRUE(Check({{"team", "blue"}}).combined.allowed);
  EXPECT_FALSE(Check({{"team", "blue"}, {"shadow", "t"}}).combined.allowed);
  const CheckResult alone = Check({{"shadow", "t"}});
  EXPECT_TRUE(alone.limits[0].decision.allowed);  // Its one request is still there.
}

TEST_F(ServiceTest, ElasticBorrowsFromThePoolUntilItIsEmpty) {
  EXPECT_TRUE(Check({{"job", "a"}}).combined.allowed);
  const CheckResult borrowed = Check({{"job", "a"}});
  EXPECT_TRUE(borrowed.combined.allowed);
  ASSERT_EQ(borrowed.limits.size(), 2U);
  EXPECT_TRUE(borrowed.limits[0].borrowed);
  EXPECT_TRUE(borrowed.limits[1].pool);
  EXPECT_EQ(borrowed.limits[1].decision.remaining, 1);
  EXPECT_TRUE(Check({{"job", "b"}}).combined.allowed);   // b's own limit.
  EXPECT_TRUE(Check({{"job", "b"}}).combined.allowed);   // The pool's last unit.
  EXPECT_FALSE(Check({{"job", "a"}}).combined.allowed);  // Pool empty.
  EXPECT_EQ(Counters("api.job").borrowed.load(), 2U);
}

TEST_F(ServiceTest, ElasticDoesNotBorrowWhenAHardLimitDenies) {
  EXPECT_TRUE(Check({{"team", "green"}}).combined.allowed);
  EXPECT_TRUE(Check({{"job", "c"}}).combined.allowed);
  EXPECT_FALSE(Check({{"job", "c"}, {"team", "green"}}).combined.allowed);
  // The pool was not charged.
  EXPECT_TRUE(Check({{"job", "c"}}).combined.allowed);
  EXPECT_TRUE(Check({{"job", "c"}}).combined.allowed);
  EXPECT_FALSE(Check({{"job", "c"}}).combined.allowed);
}

TEST_F(ServiceTest, UnlimitedAndZeroLimits) {
  const CheckResult free = Check({{"free", "x"}});
  EXPECT_TRUE(free.combined.allowed);
  EXPECT_FALSE(free.limited);
  ASSERT_EQ(free.limits.size(), 1U);
  EXPECT_TRUE(free.limits[0].unlimited);

  const CheckResult banned = Check({{"banned", "x"}, {"user", "erin"}});
  EXPECT_FALSE(banned.combined.allowed);
  EXPECT_TRUE(banned.combined.never_allowed());
  EXPECT_EQ(Check({{"user", "erin"}}).combined.remaining, 2);  // erin was not charged.
}

TEST_F(ServiceTest, ReplacesDropsTheNamedLimit) {
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(Check({{"user", "frank"}, {"premium", "gold"}}).combined.allowed) << i;
  }
  const CheckResult r = Check({{"user", "frank"}, {"premium", "gold"}});
  ASSERT_EQ(r.limits.size(), 1U);
  EXPECT_EQ(r.limits[0].name, "api.premium");
}

TEST_F(ServiceTest, Ipv6AddressesShareTheirSlash64) {
  EXPECT_TRUE(Check({{"remote_address", "2001:db8:0:1::1"}}).combined.allowed);
  EXPECT_FALSE(Check({{"remote_address", "2001:db8:0:1::2"}}).combined.allowed);
  EXPECT_TRUE(Check({{"remote_address", "2001:db8:0:2::1"}}).combined.allowed);
  EXPECT_TRUE(Check({{"remote_address", "192.0.2.1"}}).combined.allowed);
  EXPECT_TRUE(Check({{"remote_address", "192.0.2.2"}}).combined.allowed);
}

TEST_F(ServiceTest, RulesMatchTheAddressAsSentAndCountItsGroup) {
  // The exact-address rule bans one address; its /64 neighbour falls to the key-only rule.
  EXPECT_TRUE(Check({{"remote_address", "2001:db8:0:9::1"}}).combined.never_allowed());
  EXPECT_TRUE(Check({{"remote_address", "2001:db8:0:9::2"}}).combined.allowed);
  EXPECT_FALSE(Check({{"remote_address", "2001:db8:0:9::3"}}).combined.allowed);
}

TEST_F(ServiceTest, CallersMayUseOnlySoManyDistinctLimits) {
  auto adhoc = [&](int64_t limit) {
    return service_.CheckAdHoc({.key = "k", .spec = {.limit = limit, .period = Micros{1'000'000}}})
        .status();
  };
  for (int64_t n = 1; n <= static_cast<int64_t>(kMaxCallerLimits); ++n) {
    ASSERT_TRUE(adhoc(n).ok()) << n;
  }
  const absl::Status refused = adhoc(kMaxCallerLimits + 1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);  // 503, as a full store.
  EXPECT_NE(refused.ToString().find("1024 distinct limits in use"), std::string::npos);
  EXPECT_EQ(metrics_.caller_limits_refused(), 1u);
  EXPECT_TRUE(adhoc(7).ok());  // A limit already in use still works.
  // Envoy's overrides.
  auto override = [&](int64_t per_second) {
    return service_
        .ShouldRateLimit({.domain = "api",
                          .descriptors = {{.entries = {{"x", "y"}},
                                           .limit = LimitOverride{.requests_per_unit = per_second,
                                                                  .unit = Unit::kSecond}}}})
        .status();
  };
  // Counting every hit (their default), an override is a count on the unit's counter: no limit
  // of the caller's reaches the store, so any is answered.
  EXPECT_TRUE(override(kMaxCallerLimits + 2).ok());
  // Not counting, it is a limit of the store's: one in use is answered, a new one refused.
  RateLimitService not_counting(store_, clock_, metrics_, nullptr, {.count_over_limit = false});
  not_counting.SetRules(service_.rules());
  auto stopped_override = [&](int64_t per_second) {
    return not_counting
        .ShouldRateLimit({.domain = "api",
                          .descriptors = {{.entries = {{"x", "y"}},
                                           .limit = LimitOverride{.requests_per_unit = per_second,
                                                                  .unit = Unit::kSecond}}}})
        .status();
  };
  for (int64_t n = 1; n <= static_cast<int64_t>(kMaxCallerLimits); ++n) {
    ASSERT_TRUE(stopped_override(n).ok()) << n;
  }
  EXPECT_TRUE(stopped_override(5).ok());
  EXPECT_EQ(stopped_override(kMaxCallerLimits + 3).code(), absl::StatusCode::kResourceExhausted);
  // The rules are not affected.
  EXPECT_TRUE(Check({{"user", "rules-still-work"}}).combined.allowed);
}

// Issue 19: one caller minting limits (limit=1, 2, 3, ...) held all the caller limits until a
// restart. A limit is in use until its keys have reset; then its place goes to a new one.
TEST_F(ServiceTest, CallerLimitsIdlePastTheirKeysResetGiveWayToNewOnes) {
  auto adhoc = [&](int64_t limit, Micros period = Micros{1'000'000}) {
    return service_.CheckAdHoc({.key = "k", .spec = {.limit = limit, .period = period}});
  };
  // One limit in use for the whole test: an hour's window, used up.
  const Micros hour{3'600'000'000};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(adhoc(3, hour)->combined.allowed);
  }
  for (int64_t n = 1; n < static_cast<int64_t>(kMaxCallerLimits); ++n) {
    ASSERT_TRUE(adhoc(n).ok()) << n;
  }
  EXPECT_EQ(adhoc(5000).status().code(), absl::StatusCode::kResourceExhausted);
  // Ten minutes on, the per-second limits' keys have long reset: their places are free, and
  // the memory store frees their tables as new ones come.
  clock_.Advance(Micros{600'000'000});
  for (int64_t n = 5000; n < 5000 + static_cast<int64_t>(kMaxCallerLimits) - 1; ++n) {
    const absl::StatusOr<CheckResult> r = adhoc(n);
    ASSERT_TRUE(r.ok()) << n << ": " << r.status();
    EXPECT_TRUE(r->combined.allowed);
  }
  // The hour's limit kept its place and its count: still denied, and still answered.
  const absl::StatusOr<CheckResult> in_use = adhoc(3, hour);
  ASSERT_TRUE(in_use.ok()) << in_use.status();
  EXPECT_FALSE(in_use->combined.allowed);
  // The cap holds again with the new ones.
  EXPECT_EQ(adhoc(9999).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_GT(store_.Stats().limits_retired, 0u);
}

// Issue 19: 1,024 ad hoc checks with a hundred years' period, even at cost 0, held every
// caller limit for two centuries. Now a limit holds its place while the store holds a key of
// it: those that stored nothing, or whose keys have reset, give way once all are taken.
TEST_F(ServiceTest, ALongPeriodHoldsACallerLimitOnlyWhileAKeyOfItHoldsState) {
  auto adhoc = [&](int64_t limit, Micros period, int64_t cost) {
    return service_.CheckAdHoc(
        {.key = "k", .spec = {.limit = limit, .period = period}, .cost = cost});
  };
  const Micros century = Limit::kMaxPeriod;
  const Micros hour{3'600'000'000};
  ASSERT_TRUE(adhoc(1, century, 1)->combined.allowed);  // Its key holds state for a century.
  ASSERT_TRUE(adhoc(2, hour, 2)->combined.allowed);     // Its key, for an hour.
  for (int64_t n = 3; n <= static_cast<int64_t>(kMaxCallerLimits); ++n) {
    ASSERT_TRUE(adhoc(n, century, 0).ok()) << n;  // Queries: nothing stored.
  }
  EXPECT_EQ(adhoc(5000, century, 0).status().code(), absl::StatusCode::kResourceExhausted);
  // A second on, the queries' places give way.
  clock_.Advance(CallerLimits::kSettle);
  ASSERT_TRUE(adhoc(5000, century, 0).ok());
  EXPECT_EQ(service_.caller_limits_in_use(), 3u);
  // An hour on, the hour's key has reset too; the century's has not, and keeps its count.
  clock_.Advance(hour);
  for (int64_t n = 6000; n < 6000 + static_cast<int64_t>(kMaxCallerLimits) - 1; ++n) {
    ASSERT_TRUE(adhoc(n, century, 0).ok()) << n;
  }
  EXPECT_EQ(service_.caller_limits_in_use(), kMaxCallerLimits);
  const absl::StatusOr<CheckResult> held = adhoc(1, century, 1);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_FALSE(held->combined.allowed);
  EXPECT_EQ(adhoc(2, hour, 0).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(ServiceTest, NoMatchAndUnknownDomainLimitNothing) {
  EXPECT_FALSE(Check({{"nothing", "x"}}).limited);
  CheckRequest other{.domain = "other", .descriptors = {{.entries = {{"user", "bob"}}}}};
  absl::StatusOr<CheckResult> result = service_.Check(other);
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->combined.allowed);
  EXPECT_FALSE(result->limited);
}

TEST_F(ServiceTest, CostZeroQueriesWithoutCharging) {
  EXPECT_EQ(Check({{"user", "gina"}}, 0).combined.remaining, 3);
  EXPECT_EQ(Check({{"user", "gina"}}, 2).combined.remaining, 1);
  EXPECT_FALSE(Check({{"user", "gina"}}, 2).combined.allowed);
  EXPECT_TRUE(Check({{"user", "gina"}}, 1).combined.allowed);
}

TEST_F(ServiceTest, MalformedRequestsAreRefusedNamingTheField) {
  auto error = [&](CheckRequest request) {
    absl::StatusOr<CheckResult> result = service_.Check(request);
    EXPECT_FALSE(result.ok());
    return result.ok() ? std::string() : std::string(result.status().ToString());
  };
  EXPECT_NE(error({.domain = ""}).find("domain"), std::string::npos);
  EXPECT_NE(error({.domain = "api"}).find("descriptors"), std::string::npos);
  EXPECT_NE(error({.domain = "api", .descriptors = {{.entries = {{"user", "x"}}}}, .cost = -1})
                .find("cost"),
            std::string::npos);
  EXPECT_NE(error({.domain = "api", .descriptors = {{.entries = {{std::string(300, 'k'), "x"}}}}})
                .find("descriptors[0].entries[0].key"),
            std::string::npos);
  EXPECT_NE(
      error({.domain = "api", .descriptors = {{.entries = {{"user", std::string(2000, 'v')}}}}})
          .find("value"),
      std::string::npos);
  CheckRequest many{.domain = "api"};
  many.descriptors.resize(kMaxDescriptors + 1, {.entries = {{"user", "x"}}});
  EXPECT_NE(error(many).find("too many descriptors"), std::string::npos);
  // Nothing was charged by any of them.
  EXPECT_EQ(Check({{"user", "x"}}).combined.remaining, 2);
}

TEST_F(ServiceTest, EnvoyDecidesEachDescriptorOnItsOwn) {
  ASSERT_TRUE(
      service_.ShouldRateLimit({.domain = "api", .descriptors = {{.entries = {{"team", "ops"}}}}})
          .ok());
  CheckRequest request{.domain = "api",
                       .descriptors = {{.entries = {{"user", "hank"}}},
                                       {.entries = {{"team", "ops"}}},
                                       {.entries = {{"unknown", "x"}}},
                                       {.entries = {{"free", "x"}}}}};
  absl::StatusOr<std::vector<DescriptorResult>> results = service_.ShouldRateLimit(request);
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 4U);
  EXPECT_FALSE((*results)[0].over_limit);
  EXPECT_EQ((*results)[0].closest->decision.remaining, 2);  // Charged, as Envoy's would be.
  EXPECT_TRUE((*results)[1].over_limit);
  EXPECT_FALSE((*results)[2].matched);
  EXPECT_TRUE((*results)[3].unlimited);
  // A fixed window resets at the end of its window: kStart is aligned, so a full minute.
  EXPECT_EQ((*results)[0].until_reset, Micros{60'000'000});
}

TEST_F(ServiceTest, EnvoyPerDescriptorCostAndOverride) {
  CheckRequest request{
      .domain = "api",
      .descriptors = {{.entries = {{"user", "ivy"}}, .cost = 0},
                      {.entries = {{"anything", "y"}},
                       .limit = LimitOverride{.requests_per_unit = 1, .unit = Unit::kHour}}}};
  absl::StatusOr<std::vector<DescriptorResult>> first = service_.ShouldRateLimit(request);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)[0].closest->decision.remaining, 3);  // hits_addend 0 charges nothing.
  EXPECT_TRUE((*first)[1].matched);
  EXPECT_FALSE((*first)[1].over_limit);
  absl::StatusOr<std::vector<DescriptorResult>> second = service_.ShouldRateLimit(request);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE((*second)[1].over_limit);  // The override's 1 per hour.
}

TEST_F(ServiceTest, EnvoyRefusesARequestWithoutRules) {
  RateLimitService empty(store_, clock_, metrics_);
  absl::StatusOr<std::vector<DescriptorResult>> results =
      empty.ShouldRateLimit({.domain = "api", .descriptors = {{.entries = {{"user", "x"}}}}});
  EXPECT_EQ(results.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(ServiceTest, AdHocLimits) {
  AdHocRequest request{
      .key = "k",
      .spec = {.algorithm = Algorithm::kGcra, .limit = 5, .period = Micros{1'000'000}, .burst = 2}};
  EXPECT_TRUE(service_.CheckAdHoc(request)->combined.allowed);
  EXPECT_TRUE(service_.CheckAdHoc(request)->combined.allowed);
  const absl::StatusOr<CheckResult> denied = service_.CheckAdHoc(request);
  EXPECT_FALSE(denied->combined.allowed);
  EXPECT_EQ(denied->combined.retry_after, Micros{200'000});
  request.key = std::string("a\nb");
  EXPECT_EQ(service_.CheckAdHoc(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.key = "k2";
  request.spec.limit = 0;
  EXPECT_EQ(service_.CheckAdHoc(request).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RuleKeyTest, NoTwoDescriptorsShareAKey) {
  const std::vector<std::vector<Entry>> distinct = {
      {{"a", "b"}},
      {{"a", "b"}, {"c", "d"}},
      {{"a",
        "b\x1e"
        "c\x1f"
        "d"}},
      {{"a\x1f"
        "b",
        ""}},
      {{"a", ""}},
      {{"a", "\x1b"}},
      {{"a", "\x1b\x1b"}},
  };
  for (size_t i = 0; i < distinct.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      EXPECT_NE(RuleKey("d", distinct[i]), RuleKey("d", distinct[j])) << i << " " << j;
    }
    EXPECT_NE(RuleKey("d", distinct[i]), RuleKey("e", distinct[i]));
    EXPECT_LT(static_cast<unsigned char>(RuleKey("d", distinct[i])[0]), 0x20);
  }
}

}  // namespace
}  // namespace sluice::server
