// The configuration examples of envoyproxy/ratelimit's README (Configuration > Examples), in
// tests/server/envoy_examples/ byte for byte as published, load unchanged through the loader
// sluiced uses for --config, and are decided as that README says: through the service's
// Envoy path (each descriptor on its own, as gRPC and POST /json answer), on a memory store
// and a manual clock, so that every figure is exact.

#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "server/grpc/envoy_service.h"
#include "server/rules/rules.h"
#include "server/service.h"
#include "sluice/memory_store.h"
#include "tests/testing/grpc.h"
#include "tests/testing/util.h"

#ifndef SLUICE_ENVOY_EXAMPLES_DIR
#error "SLUICE_ENVOY_EXAMPLES_DIR must name tests/server/envoy_examples (set by CMake)"
#endif

namespace sluice::server {
namespace {

namespace rls = envoy::service::ratelimit::v3;
using ::sluice::testing::At;

constexpr int64_t kSecond = 1'000'000;
constexpr int64_t kMinute = 60 * kSecond;
constexpr int64_t kDay = 86'400 * kSecond;
// 2023-11-15T00:00:00Z: aligned to every unit up to a day, as envoyproxy/ratelimit's windows
// are (they count from the epoch).
constexpr int64_t kMidnight = 1'700'006'400 * kSecond;
static_assert(kMidnight % kDay == 0);
// The tests start at noon and a quarter of a second: 750 ms are left in the second, 59.75 s
// in the minute and 43,199.75 s in the day.
constexpr int64_t kStart = kMidnight + kDay / 2 + 250'000;

constexpr uint32_t kMaxUint32 = std::numeric_limits<uint32_t>::max();

std::string ExamplePath(const std::string& file) {
  return std::string(SLUICE_ENVOY_EXAMPLES_DIR) + "/" + file;
}

// One request descriptor: its entries in order.
using Descriptor = std::vector<Entry>;

std::string Describe(const DescriptorResult& r) {
  std::string text = fmt::format(
      "{{matched {}, unlimited {}, over_limit {}, limit_remaining {}, unit {}, "
      "until_reset {} us",
      r.matched, r.unlimited, r.over_limit, r.limit_remaining, UnitName(r.unit),
      r.until_reset.count());
  if (r.closest) {
    text += fmt::format(", current limit {} per {} named '{}'", r.closest->nominal,
                        UnitName(r.closest->unit), r.closest->name);
  }
  return text + "}";
}

// OK with a current limit of `requests_per_unit` per `unit` and `remaining` left.
::testing::AssertionResult IsOk(const DescriptorResult& r, int64_t requests_per_unit, Unit unit,
                                uint32_t remaining) {
  if (r.matched && !r.over_limit && !r.unlimited && r.closest &&
      r.closest->nominal == requests_per_unit && r.unit == unit && r.limit_remaining == remaining) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "expected OK, " << requests_per_unit << " per " << UnitName(unit) << ", " << remaining
         << " remaining; got " << Describe(r);
}

// OVER_LIMIT with a current limit of `requests_per_unit` per `unit` and nothing left.
::testing::AssertionResult IsOverLimit(const DescriptorResult& r, int64_t requests_per_unit,
                                       Unit unit) {
  if (r.matched && r.over_limit && r.closest && r.closest->nominal == requests_per_unit &&
      r.unit == unit && r.limit_remaining == 0) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "expected OVER_LIMIT, " << requests_per_unit << " per "
                                       << UnitName(unit) << "; got " << Describe(r);
}

// No rule applies: OK, no current limit, nothing remaining (envoyproxy/ratelimit's empty
// cache key).
::testing::AssertionResult HasNoLimit(const DescriptorResult& r) {
  if (!r.matched && !r.over_limit && !r.unlimited && !r.closest && r.limit_remaining == 0) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "expected no limit; got " << Describe(r);
}

// An unlimited rule: OK, no current limit, limit_remaining MaxUint32.
::testing::AssertionResult IsUnlimited(const DescriptorResult& r) {
  if (r.matched && r.unlimited && !r.over_limit && !r.closest && r.limit_remaining == kMaxUint32) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "expected unlimited; got " << Describe(r);
}

class EnvoyExamplesTest : public ::testing::Test {
 protected:
  EnvoyExamplesTest() : service_(store_, clock_, metrics_) {}

  // Loads tests/server/envoy_examples/`file` as sluiced loads --config FILE, and puts it in
  // force.
  ::testing::AssertionResult Load(const std::string& file) {
    absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
        RuleSet::Load(ExamplePath(file), metrics_.rules(),
                      [this](const Limit& limit) { return store_.CheckLimit(limit); });
    if (!rules.ok()) {
      return ::testing::AssertionFailure() << file << " does not load: " << rules.status();
    }
    service_.SetRules(*std::move(rules));
    return ::testing::AssertionSuccess();
  }

  // Envoy's ShouldRateLimit with these descriptors and hits_addend 1: one result each.
  std::vector<DescriptorResult> Ask(const std::string& domain,
                                    const std::vector<Descriptor>& descriptors) {
    CheckRequest request{.domain = domain};
    for (const Descriptor& entries : descriptors) {
      request.descriptors.push_back({.entries = entries});
    }
    absl::StatusOr<std::vector<DescriptorResult>> results = service_.ShouldRateLimit(request);
    EXPECT_TRUE(results.ok()) << results.status();
    if (!results.ok() || results->size() != descriptors.size()) {
      ADD_FAILURE() << "no result for each descriptor";
      return std::vector<DescriptorResult>(descriptors.size());
    }
    return *std::move(results);
  }

  DescriptorResult AskOne(const std::string& domain, const Descriptor& descriptor) {
    return Ask(domain, {descriptor}).front();
  }

  // The counters named `name`, or nullptr when no rule limit has that name.
  const RuleCounters* FindCounters(const std::string& name) {
    for (const auto& [counter_name, counters] : metrics_.rules().All()) {
      if (counter_name == name) {
        return counters;
      }
    }
    return nullptr;
  }

  MemoryStore store_;
  ManualClock clock_{At(kStart)};
  Metrics metrics_;
  RateLimitService service_;
};

// ---------------------------------------------------------------------------------------------
// Loading.

TEST_F(EnvoyExamplesTest, EveryExampleLoadsUnchanged) {
  const std::map<std::string, std::string> expected = {
      {"example1.yaml", "mongo_cps"},         {"example2.yaml", "messaging"},
      {"example3.yaml", "edge_proxy_per_ip"}, {"example4_match.yaml", "example4"},
      {"example4_no_match.yaml", "example4"}, {"example5.yaml", "internal"},
      {"example6.yaml", "example6"},          {"example7.yaml", "example7"},
      {"example8.yaml", "example8"},          {"example9.yaml", "example9"},
  };
  std::map<std::string, std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(SLUICE_ENVOY_EXAMPLES_DIR)) {
    if (entry.path().extension() != ".yaml") {
      continue;
    }
    const std::string file = entry.path().filename().string();
    absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
        RuleSet::Load(entry.path().string(), metrics_.rules(),
                      [this](const Limit& limit) { return store_.CheckLimit(limit); });
    ASSERT_TRUE(rules.ok()) << file << ": " << rules.status();
    ASSERT_EQ((*rules)->domains().size(), 1U) << file;
    found[file] = (*rules)->domains().front()->name;
  }
  EXPECT_EQ(found, expected);
}

// ---------------------------------------------------------------------------------------------
// Example 1: database=users and database=default, 500 per second each.

TEST_F(EnvoyExamplesTest, Example1EachDatabaseGets500PerSecond) {
  ASSERT_TRUE(Load("example1.yaml"));
  for (uint32_t i = 0; i < 500; ++i) {
    ASSERT_TRUE(IsOk(AskOne("mongo_cps", {{"database", "users"}}), 500, Unit::kSecond, 499 - i))
        << "request " << i;
  }
  EXPECT_TRUE(IsOverLimit(AskOne("mongo_cps", {{"database", "users"}}), 500, Unit::kSecond));
  // The other value has a limit of its own.
  EXPECT_TRUE(IsOk(AskOne("mongo_cps", {{"database", "default"}}), 500, Unit::kSecond, 499));
  EXPECT_TRUE(IsOverLimit(AskOne("mongo_cps", {{"database", "users"}}), 500, Unit::kSecond));
}

TEST_F(EnvoyExamplesTest, Example1OtherDatabasesAreNotLimited) {
  ASSERT_TRUE(Load("example1.yaml"));
  EXPECT_TRUE(HasNoLimit(AskOne("mongo_cps", {{"database", "orders"}})));
  EXPECT_TRUE(HasNoLimit(AskOne("mongo_cps", {{"database", ""}})));
  EXPECT_TRUE(HasNoLimit(AskOne("mongo_cps", {{"table", "users"}})));
  // Deeper than the rules: no match either.
  EXPECT_TRUE(HasNoLimit(AskOne("mongo_cps", {{"database", "users"}, {"table", "t"}})));
  // Another domain: no match.
  EXPECT_TRUE(HasNoLimit(AskOne("messaging", {{"database", "users"}})));
}

TEST_F(EnvoyExamplesTest, Example1WindowIsTheSecondAndResetsAtItsEnd) {
  ASSERT_TRUE(Load("example1.yaml"));
  const DescriptorResult first = AskOne("mongo_cps", {{"database", "users"}});
  EXPECT_EQ(first.until_reset, Micros{750'000});
  for (int i = 1; i < 500; ++i) {
    AskOne("mongo_cps", {{"database", "users"}});
  }
  clock_.Advance(Micros{750'000 - 1});  // The last microsecond of the second.
  const DescriptorResult last = AskOne("mongo_cps", {{"database", "users"}});
  EXPECT_TRUE(IsOverLimit(last, 500, Unit::kSecond));
  EXPECT_EQ(last.until_reset, Micros{1});
  clock_.Advance(Micros{1});  // The next second.
  const DescriptorResult next = AskOne("mongo_cps", {{"database", "users"}});
  EXPECT_TRUE(IsOk(next, 500, Unit::kSecond, 499));
  EXPECT_EQ(next.until_reset, Micros{kSecond});
}

// ---------------------------------------------------------------------------------------------
// Example 2: nested descriptors; 5 marketing messages a day per number, 100 messages a day per
// number.

TEST_F(EnvoyExamplesTest, Example2MarketingMessagesGet5PerDayPerNumber) {
  ASSERT_TRUE(Load("example2.yaml"));
  const Descriptor marketing_1 = {{"message_type", "marketing"}, {"to_number", "2061111111"}};
  const Descriptor marketing_2 = {{"message_type", "marketing"}, {"to_number", "2062222222"}};
  for (uint32_t i = 0; i < 5; ++i) {
    const DescriptorResult r = AskOne("messaging", marketing_1);
    EXPECT_TRUE(IsOk(r, 5, Unit::kDay, 4 - i)) << "request " << i;
    EXPECT_EQ(r.until_reset, Micros{kDay / 2 - 250'000});
  }
  EXPECT_TRUE(IsOverLimit(AskOne("messaging", marketing_1), 5, Unit::kDay));
  // Each number gets its own 5.
  EXPECT_TRUE(IsOk(AskOne("messaging", marketing_2), 5, Unit::kDay, 4));
  // The day ends at midnight (UTC, from the epoch), not 24 hours after the first message.
  clock_.Advance(Micros{kDay / 2 - 250'000 - 1});
  EXPECT_TRUE(IsOverLimit(AskOne("messaging", marketing_1), 5, Unit::kDay));
  clock_.Advance(Micros{1});
  EXPECT_TRUE(IsOk(AskOne("messaging", marketing_1), 5, Unit::kDay, 4));
}

TEST_F(EnvoyExamplesTest, Example2AnyNumberGets100PerDay) {
  ASSERT_TRUE(Load("example2.yaml"));
  for (uint32_t i = 0; i < 100; ++i) {
    ASSERT_TRUE(IsOk(AskOne("messaging", {{"to_number", "2061111111"}}), 100, Unit::kDay, 99 - i))
        << "request " << i;
  }
  EXPECT_TRUE(IsOverLimit(AskOne("messaging", {{"to_number", "2061111111"}}), 100, Unit::kDay));
  EXPECT_TRUE(IsOk(AskOne("messaging", {{"to_number", "2062222222"}}), 100, Unit::kDay, 99));
}

TEST_F(EnvoyExamplesTest, Example2ThePlaceholderHasNoLimitOfItsOwn) {
  ASSERT_TRUE(Load("example2.yaml"));
  // ("message_type", "marketing") has no rate_limit: "just a placeholder".
  EXPECT_TRUE(HasNoLimit(AskOne("messaging", {{"message_type", "marketing"}})));
  // Another message type has no rule at all, nested or not.
  EXPECT_TRUE(HasNoLimit(
      AskOne("messaging", {{"message_type", "transactional"}, {"to_number", "2061111111"}})));
  // Order matters: to_number first is the top-level rule, and it has no nested descriptors.
  EXPECT_TRUE(HasNoLimit(
      AskOne("messaging", {{"to_number", "2061111111"}, {"message_type", "marketing"}})));
}

TEST_F(EnvoyExamplesTest, Example2SeveralDescriptorsAreEachDecided) {
  ASSERT_TRUE(Load("example2.yaml"));
  // The README's request: both rules apply, each to its own descriptor.
  const std::vector<Descriptor> request = {
      {{"message_type", "marketing"}, {"to_number", "2061111111"}},
      {{"to_number", "2061111111"}},
  };
  for (uint32_t i = 0; i < 5; ++i) {
    const std::vector<DescriptorResult> r = Ask("messaging", request);
    EXPECT_TRUE(IsOk(r[0], 5, Unit::kDay, 4 - i)) << "request " << i;
    EXPECT_TRUE(IsOk(r[1], 100, Unit::kDay, 99 - i)) << "request " << i;
  }
  const std::vector<DescriptorResult> sixth = Ask("messaging", request);
  EXPECT_TRUE(IsOverLimit(sixth[0], 5, Unit::kDay));
  // As envoyproxy/ratelimit, every descriptor is counted, even when another is over its limit.
  EXPECT_TRUE(IsOk(sixth[1], 100, Unit::kDay, 94));
  // The 100 per day is the number's, whatever the message type.
  EXPECT_TRUE(IsOk(AskOne("messaging", {{"to_number", "2061111111"}}), 100, Unit::kDay, 93));
}

// ---------------------------------------------------------------------------------------------
// Example 3: 10 per second per address; 50.0.0.5 never.

TEST_F(EnvoyExamplesTest, Example3EveryAddressGets10PerSecond) {
  ASSERT_TRUE(Load("example3.yaml"));
  for (uint32_t i = 0; i < 10; ++i) {
    EXPECT_TRUE(IsOk(AskOne("edge_proxy_per_ip", {{"remote_address", "50.0.0.1"}}), 10,
                     Unit::kSecond, 9 - i))
        << "request " << i;
  }
  EXPECT_TRUE(IsOverLimit(AskOne("edge_proxy_per_ip", {{"remote_address", "50.0.0.1"}}), 10,
                          Unit::kSecond));
  EXPECT_TRUE(
      IsOk(AskOne("edge_proxy_per_ip", {{"remote_address", "50.0.0.2"}}), 10, Unit::kSecond, 9));
  clock_.Advance(Micros{750'000});
  EXPECT_TRUE(
      IsOk(AskOne("edge_proxy_per_ip", {{"remote_address", "50.0.0.1"}}), 10, Unit::kSecond, 9));
}

TEST_F(EnvoyExamplesTest, Example3KeyAndValueMatchBeforeKeyAlone) {
  ASSERT_TRUE(Load("example3.yaml"));
  // Even though the rule with the key alone comes first in the file, 50.0.0.5 matches its own
  // rule: 0 per second, over the limit from its first request on, in every second.
  for (int second = 0; second < 3; ++second) {
    EXPECT_TRUE(IsOverLimit(AskOne("edge_proxy_per_ip", {{"remote_address", "50.0.0.5"}}), 0,
                            Unit::kSecond))
        << "second " << second;
    clock_.Advance(Micros{kSecond});
  }
  // Its neighbours are not affected.
  EXPECT_TRUE(
      IsOk(AskOne("edge_proxy_per_ip", {{"remote_address", "50.0.0.50"}}), 10, Unit::kSecond, 9));
}

// ---------------------------------------------------------------------------------------------
// Example 4: a request matches rules only as deep as itself.

TEST_F(EnvoyExamplesTest, Example4ARequestDeeperThanTheRuleDoesNotMatch) {
  ASSERT_TRUE(Load("example4_no_match.yaml"));
  for (int i = 0; i < 400; ++i) {  // More than the limit: none of them counted.
    ASSERT_TRUE(HasNoLimit(AskOne("example4", {{"key", "value"}, {"subkey", "subvalue"}})))
        << "request " << i;
  }
  // The rule is there, for a request of its depth.
  EXPECT_TRUE(IsOk(AskOne("example4", {{"key", "value"}}), 300, Unit::kSecond, 299));
}

TEST_F(EnvoyExamplesTest, Example4ARuleAsDeepAsTheRequestMatches) {
  ASSERT_TRUE(Load("example4_match.yaml"));
  const Descriptor request = {{"key", "value"}, {"subkey", "subvalue"}};
  for (uint32_t i = 0; i < 300; ++i) {
    ASSERT_TRUE(IsOk(AskOne("example4", request), 300, Unit::kSecond, 299 - i)) << "request " << i;
  }
  EXPECT_TRUE(IsOverLimit(AskOne("example4", request), 300, Unit::kSecond));
  // subkey has no value in the rule: every value counts on its own.
  EXPECT_TRUE(
      IsOk(AskOne("example4", {{"key", "value"}, {"subkey", "other"}}), 300, Unit::kSecond, 299));
  // Shallower than the rule, or another value at the first level: no match.
  EXPECT_TRUE(HasNoLimit(AskOne("example4", {{"key", "value"}})));
  EXPECT_TRUE(HasNoLimit(AskOne("example4", {{"key", "other"}, {"subkey", "subvalue"}})));
}

// ---------------------------------------------------------------------------------------------
// Example 5: ldap unlimited, azure 100 per minute.

TEST_F(EnvoyExamplesTest, Example5UnlimitedIsOkWithMaxUint32Remaining) {
  ASSERT_TRUE(Load("example5.yaml"));
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(IsUnlimited(AskOne("internal", {{"ldap", "lookup"}}))) << "request " << i;
  }
  // Not counted in the store: no key was created for it.
  EXPECT_EQ(store_.KeyCount(), 0U);
  // Told apart from a descriptor that does not exist.
  EXPECT_TRUE(HasNoLimit(AskOne("internal", {{"kerberos", "lookup"}})));
}

TEST_F(EnvoyExamplesTest, Example5AzureGets100PerMinute) {
  ASSERT_TRUE(Load("example5.yaml"));
  for (uint32_t i = 0; i < 100; ++i) {
    const DescriptorResult r = AskOne("internal", {{"azure", "blob"}});
    ASSERT_TRUE(IsOk(r, 100, Unit::kMinute, 99 - i)) << "request " << i;
    ASSERT_EQ(r.until_reset, Micros{kMinute - 250'000});
  }
  EXPECT_TRUE(IsOverLimit(AskOne("internal", {{"azure", "blob"}}), 100, Unit::kMinute));
  clock_.Advance(Micros{kMinute - 250'000 - 1});
  EXPECT_TRUE(IsOverLimit(AskOne("internal", {{"azure", "blob"}}), 100, Unit::kMinute));
  clock_.Advance(Micros{1});
  EXPECT_TRUE(IsOk(AskOne("internal", {{"azure", "blob"}}), 100, Unit::kMinute, 99));
}

// ---------------------------------------------------------------------------------------------
// Example 6: shadow_mode; user-a is never limited (but its breaches are counted), user-b is
// limited to 20 per second.

TEST_F(EnvoyExamplesTest, Example6ShadowModeUserIsNeverLimited) {
  ASSERT_TRUE(Load("example6.yaml"));
  const Descriptor user_a = {{"service", "auth-service"}, {"user", "user-a"}};
  for (uint32_t i = 0; i < 10; ++i) {
    EXPECT_TRUE(IsOk(AskOne("example6", user_a), 10, Unit::kSecond, 9 - i)) << "request " << i;
  }
  // Past its 10 per second: still OK, with nothing remaining (envoyproxy/ratelimit turns the
  // OVER_LIMIT status into OK and keeps its figures).
  std::string name;
  for (int i = 0; i < 20; ++i) {
    const DescriptorResult r = AskOne("example6", user_a);
    ASSERT_TRUE(IsOk(r, 10, Unit::kSecond, 0)) << "request " << 10 + i;
    name = r.closest->name;
  }
  // "There would however be statistics related to the breach."
  const RuleCounters* counters = FindCounters(name);
  ASSERT_NE(counters, nullptr) << name;
  EXPECT_EQ(counters->shadow_denied.load(), 20U);
  EXPECT_EQ(counters->denied.load(), 0U);
  EXPECT_EQ(counters->checks.load(), 30U);
}

TEST_F(EnvoyExamplesTest, Example6OtherUserIsLimitedTo20PerSecond) {
  ASSERT_TRUE(Load("example6.yaml"));
  const Descriptor user_b = {{"service", "auth-service"}, {"user", "user-b"}};
  for (uint32_t i = 0; i < 20; ++i) {
    EXPECT_TRUE(IsOk(AskOne("example6", user_b), 20, Unit::kSecond, 19 - i)) << "request " << i;
  }
  EXPECT_TRUE(IsOverLimit(AskOne("example6", user_b), 20, Unit::kSecond));
  // `service` has no value in the rules: every service counts on its own.
  EXPECT_TRUE(IsOk(AskOne("example6", {{"service", "billing"}, {"user", "user-b"}}), 20,
                   Unit::kSecond, 19));
  // A user without a rule, and the service alone: no limit.
  EXPECT_TRUE(HasNoLimit(AskOne("example6", {{"service", "auth-service"}, {"user", "user-c"}})));
  EXPECT_TRUE(HasNoLimit(AskOne("example6", {{"service", "auth-service"}})));
}

// ---------------------------------------------------------------------------------------------
// Example 7: replaces.

TEST_F(EnvoyExamplesTest, Example7EachRuleAloneHasItsOwnLimit) {
  ASSERT_TRUE(Load("example7.yaml"));
  const Descriptor first = {{"key_1", "value_1"}, {"user", "bkthomps"}};
  const Descriptor second = {{"key_2", "value_2"}, {"user", "bkthomps"}};
  for (uint32_t i = 0; i < 5; ++i) {
    EXPECT_TRUE(IsOk(AskOne("example7", first), 5, Unit::kSecond, 4 - i)) << "request " << i;
  }
  EXPECT_TRUE(IsOverLimit(AskOne("example7", first), 5, Unit::kSecond));
  for (uint32_t i = 0; i < 10; ++i) {
    EXPECT_TRUE(IsOk(AskOne("example7", second), 10, Unit::kSecond, 9 - i)) << "request " << i;
  }
  EXPECT_TRUE(IsOverLimit(AskOne("example7", second), 10, Unit::kSecond));
}

TEST_F(EnvoyExamplesTest, Example7ReplacesDropsTheNamedLimitFromTheRequest) {
  ASSERT_TRUE(Load("example7.yaml"));
  const Descriptor first = {{"key_1", "value_1"}, {"user", "bkthomps"}};
  const Descriptor second = {{"key_2", "value_2"}, {"user", "bkthomps"}};
  // Both descriptors in one request: 10 per second, the replacing limit; the replaced
  // descriptor is answered as one without a limit.
  for (uint32_t i = 0; i < 10; ++i) {
    const std::vector<DescriptorResult> r = Ask("example7", {first, second});
    EXPECT_TRUE(HasNoLimit(r[0])) << "request " << i;
    EXPECT_TRUE(IsOk(r[1], 10, Unit::kSecond, 9 - i)) << "request " << i;
  }
  const std::vector<DescriptorResult> eleventh = Ask("example7", {first, second});
  EXPECT_TRUE(HasNoLimit(eleventh[0]));
  EXPECT_TRUE(IsOverLimit(eleventh[1], 10, Unit::kSecond));
  // The order of the descriptors does not matter.
  const std::vector<DescriptorResult> reversed = Ask("example7", {second, first});
  EXPECT_TRUE(IsOverLimit(reversed[0], 10, Unit::kSecond));
  EXPECT_TRUE(HasNoLimit(reversed[1]));
  // "The limit of the original will not be changed": all of its 5 are still there.
  const DescriptorResult alone = AskOne("example7", first);
  EXPECT_TRUE(IsOk(alone, 5, Unit::kSecond, 4));
  EXPECT_EQ(alone.closest->name, "specific_limit");
}

// ---------------------------------------------------------------------------------------------
// Example 8: detailed_metric. The README's prose says 10 and 20 per second; its YAML says per
// minute, and the YAML is what is loaded.

TEST_F(EnvoyExamplesTest, Example8LimitsWorkAsNormal) {
  ASSERT_TRUE(Load("example8.yaml"));
  for (uint32_t i = 0; i < 10; ++i) {
    EXPECT_TRUE(IsOk(AskOne("example8", {{"key1", "unspecified_value"}}), 10, Unit::kMinute, 9 - i))
        << "request " << i;
  }
  EXPECT_TRUE(IsOverLimit(AskOne("example8", {{"key1", "unspecified_value"}}), 10, Unit::kMinute));
  EXPECT_TRUE(IsOk(AskOne("example8", {{"key1", "unspecified_value2"}}), 10, Unit::kMinute, 9));
  for (uint32_t i = 0; i < 20; ++i) {
    EXPECT_TRUE(IsOk(AskOne("example8", {{"key1", "value1"}}), 20, Unit::kMinute, 19 - i))
        << "request " << i;
  }
  EXPECT_TRUE(IsOverLimit(AskOne("example8", {{"key1", "value1"}}), 20, Unit::kMinute));
}

// The README: with detailed_metric the metrics keys are "key1_unspecified_value",
// "key1_unspecified_value2" and "key1_value1", rather than "key1" and "key1_value1".
TEST_F(EnvoyExamplesTest, Example8DetailedMetricCountsEachValueApart) {
  ASSERT_TRUE(Load("example8.yaml"));
  AskOne("example8", {{"key1", "unspecified_value"}});
  AskOne("example8", {{"key1", "unspecified_value2"}});
  AskOne("example8", {{"key1", "unspecified_value2"}});
  AskOne("example8", {{"key1", "value1"}});
  const RuleCounters* value = FindCounters("example8.key1_unspecified_value");
  const RuleCounters* value2 = FindCounters("example8.key1_unspecified_value2");
  const RuleCounters* value1 = FindCounters("example8.key1_value1");
  ASSERT_NE(value, nullptr);
  ASSERT_NE(value2, nullptr);
  ASSERT_NE(value1, nullptr);
  EXPECT_EQ(value->checks.load(), 1U);
  EXPECT_EQ(value2->checks.load(), 2U);
  EXPECT_EQ(value1->checks.load(), 1U);
  const RuleCounters* rolled_up = FindCounters("example8.key1");
  EXPECT_TRUE(rolled_up == nullptr || rolled_up->checks.load() == 0U);
}

// ---------------------------------------------------------------------------------------------
// Example 9: a wildcard value. The README's prose says 20 per second; its YAML says per minute.

TEST_F(EnvoyExamplesTest, Example9WildcardMatchesEveryValueWithThePrefix) {
  ASSERT_TRUE(Load("example9.yaml"));
  for (uint32_t i = 0; i < 20; ++i) {
    EXPECT_TRUE(IsOk(AskOne("example9", {{"key1", "value_1"}}), 20, Unit::kMinute, 19 - i))
        << "request " << i;
  }
  EXPECT_TRUE(IsOverLimit(AskOne("example9", {{"key1", "value_1"}}), 20, Unit::kMinute));
  // Each value that matches the wildcard counts on its own.
  EXPECT_TRUE(IsOk(AskOne("example9", {{"key1", "value_2"}}), 20, Unit::kMinute, 19));
  EXPECT_TRUE(IsOk(AskOne("example9", {{"key1", "value/nested/endpoint"}}), 20, Unit::kMinute, 19));
  EXPECT_TRUE(IsOk(AskOne("example9", {{"key1", "value"}}), 20, Unit::kMinute, 19));
  // Values without the prefix, and other keys, do not match.
  EXPECT_TRUE(HasNoLimit(AskOne("example9", {{"key1", "valu"}})));
  EXPECT_TRUE(HasNoLimit(AskOne("example9", {{"key1", "other_value_1"}})));
  EXPECT_TRUE(HasNoLimit(AskOne("example9", {{"key2", "value_1"}})));
}

// ---------------------------------------------------------------------------------------------
// The same examples over gRPC, as Envoy asks: the overall code and the current limit on the
// wire.

class EnvoyExamplesGrpcTest : public EnvoyExamplesTest {
 protected:
  void SetUp() override {
    envoy_ = std::make_unique<EnvoyGrpcService>(service_, EnvoyOptions{});
    absl::StatusOr<testing::LocalGrpc> grpc = testing::StartLocalGrpc(*envoy_);
    ASSERT_TRUE(grpc.ok()) << grpc.status();
    grpc_ = *std::move(grpc);
  }

  rls::RateLimitResponse MustAsk(const std::string& domain,
                                 const std::vector<Descriptor>& descriptors) {
    rls::RateLimitRequest request;
    request.set_domain(domain);
    for (const Descriptor& entries : descriptors) {
      auto* descriptor = request.add_descriptors();
      for (const Entry& entry : entries) {
        auto* added = descriptor->add_entries();
        added->set_key(entry.key);
        added->set_value(entry.value);
      }
    }
    rls::RateLimitResponse response;
    grpc::ClientContext context;
    const grpc::Status status = grpc_.stub->ShouldRateLimit(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.statuses_size(), static_cast<int>(descriptors.size()));
    return response;
  }

  std::unique_ptr<EnvoyGrpcService> envoy_;
  testing::LocalGrpc grpc_;
};

TEST_F(EnvoyExamplesGrpcTest, Example2OverallCodeIsTheOrOfTheDescriptors) {
  ASSERT_TRUE(Load("example2.yaml"));
  const std::vector<Descriptor> request = {
      {{"message_type", "marketing"}, {"to_number", "2061111111"}},
      {{"to_number", "2061111111"}},
  };
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(MustAsk("messaging", request).overall_code(), rls::RateLimitResponse::OK) << i;
  }
  const rls::RateLimitResponse sixth = MustAsk("messaging", request);
  ASSERT_EQ(sixth.statuses_size(), 2);
  EXPECT_EQ(sixth.overall_code(), rls::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(sixth.statuses(0).code(), rls::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(sixth.statuses(0).current_limit().requests_per_unit(), 5U);
  EXPECT_EQ(sixth.statuses(0).current_limit().unit(), rls::RateLimitResponse::RateLimit::DAY);
  EXPECT_EQ(sixth.statuses(0).limit_remaining(), 0U);
  EXPECT_EQ(sixth.statuses(1).code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(sixth.statuses(1).current_limit().requests_per_unit(), 100U);
  EXPECT_EQ(sixth.statuses(1).current_limit().unit(), rls::RateLimitResponse::RateLimit::DAY);
  EXPECT_EQ(sixth.statuses(1).limit_remaining(), 94U);
  // 43,199.75 s to midnight.
  EXPECT_EQ(sixth.statuses(1).duration_until_reset().seconds(), 43'199);
  EXPECT_EQ(sixth.statuses(1).duration_until_reset().nanos(), 750'000'000);
}

TEST_F(EnvoyExamplesGrpcTest, Example5UnlimitedIsOkWithMaxUint32AndNoCurrentLimit) {
  ASSERT_TRUE(Load("example5.yaml"));
  const rls::RateLimitResponse response =
      MustAsk("internal", {{{"ldap", "lookup"}}, {{"kerberos", "lookup"}}, {{"azure", "blob"}}});
  ASSERT_EQ(response.statuses_size(), 3);
  EXPECT_EQ(response.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(response.statuses(0).code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(response.statuses(0).limit_remaining(), kMaxUint32);
  EXPECT_FALSE(response.statuses(0).has_current_limit());
  // A descriptor that does not exist: OK too, but nothing remaining.
  EXPECT_EQ(response.statuses(1).code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(response.statuses(1).limit_remaining(), 0U);
  EXPECT_FALSE(response.statuses(1).has_current_limit());
  EXPECT_EQ(response.statuses(2).current_limit().requests_per_unit(), 100U);
  EXPECT_EQ(response.statuses(2).current_limit().unit(), rls::RateLimitResponse::RateLimit::MINUTE);
  EXPECT_EQ(response.statuses(2).limit_remaining(), 99U);
}

TEST_F(EnvoyExamplesGrpcTest, Example6ShadowModeAnswersOkOverall) {
  ASSERT_TRUE(Load("example6.yaml"));
  const Descriptor user_a = {{"service", "auth-service"}, {"user", "user-a"}};
  const Descriptor user_b = {{"service", "auth-service"}, {"user", "user-b"}};
  for (int i = 0; i < 20; ++i) {
    MustAsk("example6", {user_a, user_b});
  }
  const rls::RateLimitResponse shadow = MustAsk("example6", {user_a});
  EXPECT_EQ(shadow.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(shadow.statuses(0).code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(shadow.statuses(0).current_limit().requests_per_unit(), 10U);
  EXPECT_EQ(shadow.statuses(0).current_limit().unit(), rls::RateLimitResponse::RateLimit::SECOND);
  EXPECT_EQ(shadow.statuses(0).limit_remaining(), 0U);
  const rls::RateLimitResponse enforced = MustAsk("example6", {user_a, user_b});
  EXPECT_EQ(enforced.overall_code(), rls::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(enforced.statuses(0).code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(enforced.statuses(1).code(), rls::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(enforced.statuses(1).current_limit().requests_per_unit(), 20U);
}

TEST_F(EnvoyExamplesGrpcTest, Example7ReplacedDescriptorHasNoCurrentLimit) {
  ASSERT_TRUE(Load("example7.yaml"));
  const rls::RateLimitResponse response = MustAsk(
      "example7",
      {{{"key_1", "value_1"}, {"user", "bkthomps"}}, {{"key_2", "value_2"}, {"user", "bkthomps"}}});
  ASSERT_EQ(response.statuses_size(), 2);
  EXPECT_EQ(response.statuses(0).code(), rls::RateLimitResponse::OK);
  EXPECT_FALSE(response.statuses(0).has_current_limit());
  EXPECT_EQ(response.statuses(1).current_limit().requests_per_unit(), 10U);
  EXPECT_EQ(response.statuses(1).limit_remaining(), 9U);
}

// Not in the README's text, but in what envoyproxy/ratelimit answers: current_limit carries
// rate_limit.name, so none for a rate_limit without one (sluiced's own path name for it,
// "mongo_cps.database_users", stays in /v1/check and /metrics).
TEST_F(EnvoyExamplesGrpcTest, UnnamedLimitHasNoNameOnTheWire) {
  ASSERT_TRUE(Load("example1.yaml"));
  const rls::RateLimitResponse response = MustAsk("mongo_cps", {{{"database", "users"}}});
  ASSERT_EQ(response.statuses_size(), 1);
  EXPECT_EQ(response.statuses(0).current_limit().requests_per_unit(), 500U);
  EXPECT_EQ(response.statuses(0).current_limit().name(), "");
}

}  // namespace
}  // namespace sluice::server
