// The Envoy API's decisions as envoyproxy/ratelimit's (EnvoySettings): every hit counted over
// the limit or not, hits charged after the fact (Envoy's apply_on_stream_done), overrides
// sharing the rule's count, requests_per_unit 0, quota mode, and
// requests no bound refuses (huge values, odd descriptors). Each is also shown with
// count_over_limit off where it differs, on a manual clock.

#include <string>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "server/service/caller_limits.h"
#include "server/service/service.h"
#include "sluice/memory_store.h"
#include "tests/testing/rules.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

using ::sluice::testing::At;
using ::sluice::testing::kEpoch;

constexpr int64_t kSecond = 1'000'000;
constexpr int64_t kMinute = 60 * kSecond;
// A minute boundary and a quarter of a second: windows end 59.75 s after the start.
constexpr int64_t kStart = kEpoch + kMinute - kEpoch % kMinute + kSecond / 4;

constexpr char kRules[] = R"(
domain: api
descriptors:
  - key: three
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: ten
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: smooth
    rate_limit: {algorithm: gcra, requests_per_unit: 3, period: 1m}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /a/*
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: top
    value: t*
    share_threshold: true
    descriptors:
      - key: leaf
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: quota_left
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: two
    limits:
      - {requests_per_unit: 3, unit: minute}
      - {requests_per_unit: 5, unit: minute, name: five}
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 1000}
)";

class EnvoyCountingTest : public ::testing::Test {
 protected:
  explicit EnvoyCountingTest(EnvoySettings settings = {})
      : clock_(At(kStart)), service_(store_, clock_, metrics_, nullptr, settings) {
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
  }

  // One descriptor (key, value) with `hits`, optionally with an override.
  DescriptorResult Hit(const std::string& key, int64_t hits, std::string value = "v",
                       std::optional<LimitOverride> limit = std::nullopt) {
    std::vector<DescriptorResult> results = Ask(
        {.domain = "api",
         .descriptors = {{.entries = {{key, std::move(value)}}, .limit = limit, .cost = hits}}});
    return results.empty() ? DescriptorResult{} : results.front();
  }

  std::vector<DescriptorResult> Ask(CheckRequest request) {
    absl::StatusOr<std::vector<DescriptorResult>> results = service_.ShouldRateLimit(request);
    EXPECT_TRUE(results.ok()) << results.status();
    return results.ok() ? *std::move(results) : std::vector<DescriptorResult>{};
  }

  MemoryStore store_;
  ManualClock clock_;
  Metrics metrics_;
  RateLimitService service_;
};

class EnvoyNotCountingTest : public EnvoyCountingTest {
 protected:
  EnvoyNotCountingTest() : EnvoyCountingTest({.count_over_limit = false}) {}
};

TEST_F(EnvoyCountingTest, HitsOverTheLimitAreCountedSoTheWindowStaysOver) {
  // Their issue's trace: limit 3 a minute; hits 5, then 1, then 0: all three over.
  const DescriptorResult five = Hit("three", 5);
  EXPECT_TRUE(five.over_limit);
  EXPECT_EQ(five.limit_remaining, 0U);
  EXPECT_EQ(five.closest->decision.retry_after, Micros{-1});  // 5 can never pass 3.
  const DescriptorResult one = Hit("three", 1);
  EXPECT_TRUE(one.over_limit);
  EXPECT_EQ(one.closest->decision.retry_after, Micros{kMinute - kSecond / 4});
  EXPECT_TRUE(Hit("three", 0).over_limit);
  // Until the window ends, then the count starts again.
  clock_.Advance(Micros{kMinute - kSecond / 4});
  const DescriptorResult next = Hit("three", 1);
  EXPECT_FALSE(next.over_limit);
  EXPECT_EQ(next.limit_remaining, 2U);
}

TEST_F(EnvoyNotCountingTest, AHitOverTheLimitCountsNothing) {
  EXPECT_TRUE(Hit("three", 5).over_limit);
  const DescriptorResult one = Hit("three", 1);
  EXPECT_FALSE(one.over_limit);
  EXPECT_EQ(one.limit_remaining, 2U);
  EXPECT_FALSE(Hit("three", 0).over_limit);
}

TEST_F(EnvoyCountingTest, ExactlyTheLimitIsNotOver) {
  EXPECT_FALSE(Hit("three", 3).over_limit);
  EXPECT_FALSE(Hit("three", 0).over_limit);  // 3 of 3: not past it.
  EXPECT_TRUE(Hit("three", 1).over_limit);
}

TEST_F(EnvoyCountingTest, AShadowRuleOverItsLimitHasNoneRemaining) {
  EXPECT_EQ(Hit("shadow", 6).limit_remaining, 4U);
  for (int64_t hits : {5, 1}) {
    const DescriptorResult r = Hit("shadow", hits);
    EXPECT_FALSE(r.over_limit) << hits;  // Shadow: never over.
    EXPECT_EQ(r.limit_remaining, 0U) << hits;
  }
}

TEST_F(EnvoyNotCountingTest, AShadowRuleCountsWhatWouldHaveBeenAdmitted) {
  EXPECT_EQ(Hit("shadow", 6).limit_remaining, 4U);
  EXPECT_EQ(Hit("shadow", 5).limit_remaining, 4U);
  EXPECT_EQ(Hit("shadow", 1).limit_remaining, 3U);
}

TEST_F(EnvoyCountingTest, AnOverrideSharesTheCountOfItsDescriptorAndUnit) {
  Hit("ten", 1);
  Hit("ten", 1);
  const LimitOverride five{.requests_per_unit = 5, .unit = Unit::kMinute};
  const DescriptorResult overridden = Hit("ten", 1, "v", five);
  EXPECT_EQ(overridden.closest->nominal, 5);
  EXPECT_EQ(overridden.limit_remaining, 2U);     // 5 less the rule's 2 and this one.
  EXPECT_EQ(Hit("ten", 1).limit_remaining, 6U);  // And the rule sees the override's hit.
  // Another unit is another window, so another count.
  const LimitOverride hourly{.requests_per_unit = 5, .unit = Unit::kHour};
  EXPECT_EQ(Hit("ten", 1, "v", hourly).limit_remaining, 4U);
}

TEST_F(EnvoyNotCountingTest, AnOverrideHasACountOfItsOwn) {
  Hit("ten", 1);
  Hit("ten", 1);
  const LimitOverride five{.requests_per_unit = 5, .unit = Unit::kMinute};
  EXPECT_EQ(Hit("ten", 1, "v", five).limit_remaining, 4U);
}

TEST_F(EnvoyCountingTest, ZeroRequestsPerUnitAdmitsAHitOfZeroAndResetsAtTheUnitsEnd) {
  const DescriptorResult none = Hit("banned", 0);
  EXPECT_FALSE(none.over_limit);
  const DescriptorResult one = Hit("banned", 1);
  EXPECT_TRUE(one.over_limit);
  EXPECT_EQ(one.unit, Unit::kMinute);
  // 59.75 s to the minute's end, in whole seconds as theirs.
  EXPECT_EQ(one.until_reset, Micros{kMinute});
  EXPECT_TRUE(Hit("banned", 0).over_limit);  // Counted: the window is over now.
}

TEST_F(EnvoyNotCountingTest, ZeroRequestsPerUnitAdmitsAHitOfZero) {
  EXPECT_FALSE(Hit("banned", 0).over_limit);
  const DescriptorResult one = Hit("banned", 1);
  EXPECT_TRUE(one.over_limit);
  EXPECT_EQ(one.until_reset, Micros{kMinute});
  EXPECT_FALSE(Hit("banned", 0).over_limit);
}

TEST_F(EnvoyCountingTest, OtherAlgorithmsKeepTheirOwnMeaning) {
  EXPECT_TRUE(Hit("smooth", 5).over_limit);
  EXPECT_FALSE(Hit("smooth", 1).over_limit);  // gcra: a denial takes nothing.
}

TEST_F(EnvoyCountingTest, LimitsOfOnePeriodOnOneDescriptorCountEachHitOnce) {
  const DescriptorResult r = Hit("two", 1);
  EXPECT_FALSE(r.over_limit);
  EXPECT_EQ(r.limit_remaining, 2U);       // The closer of 3 and 5, each less one hit.
  EXPECT_TRUE(Hit("two", 3).over_limit);  // 4 of 3.
}

TEST_F(EnvoyCountingTest, TheEnvoyAPICountsApartFromSluicesOwn) {
  // A documented difference: counting every hit needs a count the store's limit of 3 cannot
  // hold, so the Envoy API's count of a rule is not the one POST /v1/check charges.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(service_.Check({.domain = "api", .descriptors = {{.entries = {{"three", "v"}}}}})
                    ->combined.allowed);
  }
  EXPECT_EQ(Hit("three", 1).limit_remaining, 2U);
}

// Charging after the fact (examples/envoy): a route's rate_limits entry with
// apply_on_stream_done makes Envoy call again when the stream ends, the real cost as that
// descriptor's hits_addend, and ignore the answer; the late hits land on the request's count.
// Every figure is envoyproxy/ratelimit's (commit f2fb157, on Redis), measured over gRPC within
// one minute on a rule of 1000 a minute, a descriptor of its own per sequence: each answer's code
// and limit_remaining, and after each call its Redis counter (GET of the window's key), which is
// `count` here. The request-level hits_addend counted the same, but for 0, which counted 1.
struct Charge {
  int64_t hits;
  bool over;
  uint32_t remaining;
  int64_t count;
};

TEST_F(EnvoyCountingTest, LateHitsCountAsTheReferenceCountsThem) {
  auto expect = [&](const std::string& value, const std::vector<Charge>& charges) {
    for (size_t i = 0; i < charges.size(); ++i) {
      const Charge& c = charges[i];
      const DescriptorResult r = Hit("tokens", c.hits, value);
      EXPECT_EQ(r.over_limit, c.over) << value << i;
      EXPECT_EQ(r.limit_remaining, c.remaining) << value << i;
      ASSERT_TRUE(r.closest.has_value()) << value << i;
      EXPECT_EQ(r.closest->count, c.count) << value << i;
    }
  };
  expect("u", {{1, false, 999, 1},      // A request: 1.
               {400, false, 599, 401},  // Its stream done: 400 tokens.
               {1, false, 598, 402},    // The next request sees them.
               {700, true, 0, 1102},    // Past the limit: over, counted all the same.
               {1, true, 0, 1103},      // So the next request is denied (and counted).
               {50, true, 0, 1153},     // Landing when over: counted.
               {0, true, 0, 1153},      // 0 tokens: over, nothing counted.
               {1, true, 0, 1154}});
  // Up to exactly the limit is not over, and a check of 0 there still passes.
  expect("w", {{1, false, 999, 1}, {999, false, 0, 1000}, {0, false, 0, 1000}, {1, true, 0, 1001}});
}

TEST_F(EnvoyNotCountingTest, ALateHitThatWouldPassTheLimitCountsNothing) {
  Hit("tokens", 1);
  EXPECT_EQ(Hit("tokens", 400).limit_remaining, 599U);
  EXPECT_TRUE(Hit("tokens", 700).over_limit);         // The tokens were spent, yet not counted:
  EXPECT_EQ(Hit("tokens", 1).limit_remaining, 598U);  // the next request passes.
}

TEST_F(EnvoyCountingTest, QuotaModeIsOverOnlyWhenEveryQuotaDescriptorIs) {
  RateLimitService quota(store_, clock_, metrics_, nullptr, {.quota_mode = true});
  quota.SetRules(service_.rules());
  auto ask = [&](std::vector<std::string> keys) {
    CheckRequest request{.domain = "api"};
    for (const std::string& key : keys) {
      request.descriptors.push_back({.entries = {{key, "q"}}});
    }
    absl::StatusOr<std::vector<DescriptorResult>> results = quota.ShouldRateLimit(request);
    EXPECT_TRUE(results.ok());
    return results.ok() ? quota.OverallOverLimit(*results) : false;
  };
  EXPECT_FALSE(ask({"banned", "ten"}));      // One of two over: the other still has quota.
  EXPECT_TRUE(ask({"banned", "banned"}));    // Both over.
  EXPECT_FALSE(ask({"banned", "nothing"}));  // An unmatched descriptor is in quota mode too.
  // Without quota mode, one over is enough.
  EXPECT_TRUE(service_.OverallOverLimit(
      Ask({.domain = "api",
           .descriptors = {{.entries = {{"banned", "q"}}}, {.entries = {{"ten", "q"}}}}})));
}

TEST_F(EnvoyCountingTest, ShareThresholdCountsEveryMatchingValueTogether) {
  EXPECT_EQ(Hit("files", 1, "files/a").limit_remaining, 2U);
  EXPECT_EQ(Hit("files", 1, "files/b").limit_remaining, 1U);
  EXPECT_EQ(Hit("files", 1, "files/").limit_remaining, 0U);
  EXPECT_TRUE(Hit("files", 1, "files/c").over_limit);
  // Without share_threshold, each value its own count.
  EXPECT_EQ(Hit("path", 1, "/a/1").limit_remaining, 2U);
  EXPECT_EQ(Hit("path", 1, "/a/2").limit_remaining, 2U);
  // Shared at the wildcard's level, though the rule is a level deeper.
  auto nested = [&](std::string top, std::string leaf) {
    return Ask({.domain = "api",
                .descriptors = {{.entries = {{"top", std::move(top)}, {"leaf", std::move(leaf)}}}}})
        .front();
  };
  EXPECT_EQ(nested("t1", "x").limit_remaining, 1U);
  EXPECT_EQ(nested("t2", "x").limit_remaining, 0U);
  EXPECT_EQ(nested("t3", "y").limit_remaining, 1U);  // Another leaf value: its own count.
}

TEST_F(EnvoyCountingTest, QuotaRulesAreOverOnlyWhenAllAre) {
  auto overall = [&](std::vector<std::string> keys) {
    CheckRequest request{.domain = "api"};
    for (const std::string& key : keys) {
      request.descriptors.push_back({.entries = {{key, "q"}}});
    }
    const std::vector<DescriptorResult> results = Ask(request);
    EXPECT_TRUE(results.front().over_limit);  // Its status says so either way.
    return service_.OverallOverLimit(results);
  };
  EXPECT_TRUE(overall({"quota"}));
  EXPECT_FALSE(overall({"quota", "quota_left"}));  // Another quota rule still has some.
  EXPECT_TRUE(overall({"quota", "ten"}));          // Every quota rule is over: theirs says over.
  EXPECT_TRUE(overall({"quota", "quota_left", "banned"}));  // A rule outside quota mode is.
}

TEST_F(EnvoyCountingTest, ShadowModeMakesTheOverallCodeOk) {
  RateLimitService shadow(store_, clock_, metrics_, nullptr, {.shadow_mode = true});
  shadow.SetRules(service_.rules());
  absl::StatusOr<std::vector<DescriptorResult>> results =
      shadow.ShouldRateLimit({.domain = "api", .descriptors = {{.entries = {{"banned", "s"}}}}});
  ASSERT_TRUE(results.ok());
  EXPECT_TRUE(results->front().over_limit);
  EXPECT_FALSE(shadow.OverallOverLimit(*results));
}

TEST_F(EnvoyCountingTest, AHugeValueIsAnsweredAndCountedUnderItsOwnKey) {
  const std::string path(4 << 20, '/');            // 4 MiB: gRPC's default message bound.
  const std::string other = path.substr(1) + "x";  // Same size and first bytes.
  EXPECT_EQ(Hit("three", 3, path).limit_remaining, 0U);
  EXPECT_TRUE(Hit("three", 1, path).over_limit);
  EXPECT_EQ(Hit("three", 1, other).limit_remaining, 2U);
  std::string key(kMaxKeyBytes * 4, 'k');
  EXPECT_FALSE(Hit(key, 1).matched);  // A huge key matches nothing, and fails nothing.
  EXPECT_LE(RuleKey("api", {{"three", path}}).size(), kMaxStoredKeyBytes);
  EXPECT_NE(RuleKey("api", {{"three", path}}), RuleKey("api", {{"three", other}}));
}

TEST_F(EnvoyCountingTest, OddDescriptorsMatchNothingAndFailNothing) {
  const std::vector<DescriptorResult> results =
      Ask({.domain = "api",
           .descriptors = {{.entries = {}},
                           {.entries = {{"", "x"}}},
                           {.entries = {{"three", "v"}},
                            .limit = LimitOverride{.requests_per_unit = 1, .unit = Unit::kUnknown}},
                           {.entries = {{"three", "w"}}}}});
  ASSERT_EQ(results.size(), 4U);
  EXPECT_FALSE(results[0].matched);
  EXPECT_FALSE(results[1].matched);
  // An override of a unit Envoy's proto does not have falls back to the rule.
  EXPECT_EQ(results[2].closest->nominal, 3);
  EXPECT_EQ(results[3].limit_remaining, 2U);
}

// A full memory store: new keys find no room (RESOURCE_EXHAUSTED, which Envoy's default,
// failure_mode_deny: false, admits), yet a key already over its limit must stay over, beside a
// new key or with one of its own limits new. Each test fills the store, then asks.
class EnvoyFullStoreTest : public ::testing::Test {
 protected:
  EnvoyFullStoreTest() : clock_(At(kStart)), service_(store_, clock_, metrics_, nullptr, {}) {}

  void Load(const char* rules) {
    service_.SetRules(testing::MustParseRules(rules, metrics_.rules(), store_));
  }

  // One descriptor per pair, of cost 1, asked of `service` (service_ by default).
  absl::StatusOr<std::vector<DescriptorResult>> Ask(
      std::vector<std::pair<std::string, std::string>> descriptors,
      RateLimitService* service = nullptr) {
    CheckRequest request{.domain = "api"};
    for (auto& [key, value] : descriptors) {
      request.descriptors.push_back({.entries = {{key, std::move(value)}}, .cost = 1});
    }
    return (service != nullptr ? *service : service_).ShouldRateLimit(request);
  }

  // Fills the store with keys that stay inside their minute, until new keys find no room;
  // enough of them that every shard has been asked (a reset key anywhere is dropped first).
  void Fill() {
    int refused = 0;
    for (int i = 0; i < 3'000; ++i) {
      refused += Ask({{"ten", fmt::format("fill-{}", i)}}).ok() ? 0 : 1;
    }
    ASSERT_GT(refused, 0) << "the store never filled";
  }

  // Two keys per shard index: the keys of one descriptor's limits hash alike, so share one.
  MemoryStore store_{{.max_keys = 128}};
  ManualClock clock_;
  Metrics metrics_;
  RateLimitService service_;
};

TEST_F(EnvoyFullStoreTest, AKeyOverItsLimitStaysOverBesideANewKeyWithNoRoom) {
  Load(kRules);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Ask({{"three", "victim"}}).ok());
  }
  ASSERT_TRUE(Ask({{"three", "victim"}})->front().over_limit);  // 5 hits on a limit of 3.
  Fill();
  ASSERT_FALSE(Ask({{"ten", "fresh"}}).ok()) << "a new key alone found room";
  for (int i = 0; i < 20; ++i) {
    // The new key before the limited one and after it.
    const std::string fresh = fmt::format("fresh-{}", i);
    auto results = i % 2 == 0 ? Ask({{"three", "victim"}, {"ten", fresh}})
                              : Ask({{"ten", fresh}, {"three", "victim"}});
    ASSERT_TRUE(results.ok()) << i << ": " << results.status();
    EXPECT_TRUE((*results)[i % 2].over_limit) << i;
  }
}

// One descriptor, two limits: its daily count is over, its per-second key has reset and been
// dropped for room, and there is no room to make it again.
TEST_F(EnvoyFullStoreTest, AKeyOverOneLimitStaysOverWhenItsOtherLimitFindsNoRoom) {
  Load(R"(
domain: api
descriptors:
  - key: two
    limits:
      - {requests_per_unit: 100, unit: second}
      - {requests_per_unit: 3, unit: day}
  - key: ten
    rate_limit: {unit: minute, requests_per_unit: 10}
)");
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(Ask({{"two", "victim"}}).ok()) << i;
  }
  ASSERT_TRUE(Ask({{"two", "victim"}})->front().over_limit);
  clock_.Advance(Micros(2 * kSecond));  // The per-second key resets.
  Fill();
  for (int i = 0; i < 20; ++i) {
    auto results = Ask({{"two", "victim"}});
    ASSERT_TRUE(results.ok()) << i << ": " << results.status();
    EXPECT_TRUE(results->front().over_limit) << i;
  }
}

// An elastic limit over, whose pool's key is new and finds no room: the denial stands (an
// error would fail the request, and Envoy's default would admit it).
TEST_F(EnvoyFullStoreTest, AnElasticLimitThatCannotBorrowForWantOfRoomStaysDenied) {
  Load(R"(
domain: api
pools:
  spare: {requests_per_unit: 100, unit: minute}
descriptors:
  - key: job
    mode: elastic
    pool: spare
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: ten
    rate_limit: {unit: minute, requests_per_unit: 10}
)");
  ASSERT_FALSE(Ask({{"job", "victim"}})->front().over_limit);  // Its one, without the pool.
  Fill();
  for (int i = 0; i < 20; ++i) {
    auto results = Ask({{"job", "victim"}});
    ASSERT_TRUE(results.ok()) << i << ": " << results.status();
    EXPECT_TRUE(results->front().over_limit) << i;
  }
}

// A shadow limit never changes the answer, even when its key is new and finds no room: the
// request is answered by its enforced limits, the shadow one reported as allowing; counting
// every hit (Envoy's default) as well as deciding limits.
TEST_F(EnvoyFullStoreTest, AShadowLimitWithNoRoomChangesNoAnswer) {
  const char* rules = R"(
domain: api
descriptors:
  - key: three
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: watch
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: ten
    rate_limit: {unit: minute, requests_per_unit: 10}
)";
  Load(rules);
  RateLimitService limiting(store_, clock_, metrics_, nullptr, {.count_over_limit = false});
  limiting.SetRules(testing::MustParseRules(rules, metrics_.rules(), store_));
  auto ask = [&](std::vector<std::pair<std::string, std::string>> descriptors) {
    return Ask(std::move(descriptors), &limiting);
  };
  for (int i = 0; i < 3; ++i) {
    ASSERT_FALSE(ask({{"three", "victim"}})->front().over_limit);
  }
  ASSERT_FALSE(ask({{"three", "other"}})->front().over_limit);
  Fill();
  for (int i = 0; i < 20; ++i) {
    const std::string fresh = fmt::format("fresh-{}", i);
    auto over = ask({{"three", "victim"}, {"watch", fresh}});
    ASSERT_TRUE(over.ok()) << i << ": " << over.status();
    EXPECT_TRUE((*over)[0].over_limit) << i;
    EXPECT_FALSE((*over)[1].over_limit) << i;
    auto under = ask({{"three", "other"}, {"watch", fresh + "-b"}});
    ASSERT_TRUE(under.ok()) << i << ": " << under.status();
    EXPECT_EQ((*under)[0].over_limit, i >= 2) << i;  // Charged: its 2nd and 3rd, then over.
    auto alone = ask({{"watch", fresh + "-alone"}});
    ASSERT_TRUE(alone.ok()) << i << ": " << alone.status();
    EXPECT_FALSE(alone->front().over_limit) << i;
    auto counted = Ask({{"watch", fresh + "-counted"}});
    ASSERT_TRUE(counted.ok()) << i << ": " << counted.status();
    EXPECT_FALSE(counted->front().over_limit) << i;
  }
}

// Callers' overrides have taken every place CallerLimits has (server/caller_limits.h): a new
// override is refused, and fails its descriptor alone; another descriptor over its limit keeps
// the request over. (Counting every hit, an override shares its rule's count: no limit of its
// own to refuse.)
TEST(EnvoyCallerLimitsTest, ARefusedOverrideFailsItsDescriptorAlone) {
  MemoryStore store;
  ManualClock clock(At(kStart));
  Metrics metrics;
  RateLimitService service(store, clock, metrics, nullptr, {.count_over_limit = false});
  service.SetRules(testing::MustParseRules(kRules, metrics.rules(), store));
  auto ask = [&](std::vector<RequestDescriptor> descriptors) {
    return service.ShouldRateLimit({.domain = "api", .descriptors = std::move(descriptors)});
  };
  auto override = [](int64_t n) {
    return RequestDescriptor{.entries = {{"ten", "x"}},
                             .limit = LimitOverride{.requests_per_unit = n, .unit = Unit::kHour},
                             .cost = 1};
  };
  const RequestDescriptor victim{.entries = {{"three", "victim"}}, .cost = 1};
  for (int i = 0; i < 3; ++i) {
    ASSERT_FALSE(ask({victim})->front().over_limit) << i;
  }
  for (int64_t n = 1000; n < 1000 + static_cast<int64_t>(kMaxCallerLimits); ++n) {
    ASSERT_TRUE(ask({override(n)}).ok()) << n;
  }
  const auto refused = ask({override(5000)});
  ASSERT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  for (bool victim_first : {true, false}) {
    auto results = victim_first ? ask({victim, override(5000)}) : ask({override(5000), victim});
    ASSERT_TRUE(results.ok()) << results.status();
    EXPECT_TRUE((*results)[victim_first ? 0 : 1].over_limit);
  }
}

}  // namespace
}  // namespace sluice::server
