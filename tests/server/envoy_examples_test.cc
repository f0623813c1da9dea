// The configuration examples of envoyproxy/ratelimit's README (Configuration > Examples), in
// tests/server/envoy_examples/ byte for byte as published, load unchanged through the loader
// sluiced uses for --config, and are decided as that README says: through the service's
// Envoy path (each descriptor on its own, as gRPC and POST /json answer), on a memory store
// and a manual clock, so that every figure is exact.

#include "tests/server/envoy_examples.h"

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "server/rules/rules.h"
#include "server/service/service.h"

namespace sluice::server {
namespace {

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
  // The end of the window, in whole seconds as theirs (750 ms is 1 s, as 1 us is).
  const DescriptorResult first = AskOne("mongo_cps", {{"database", "users"}});
  EXPECT_EQ(first.until_reset, Micros{kSecond});
  for (int i = 1; i < 500; ++i) {
    AskOne("mongo_cps", {{"database", "users"}});
  }
  clock_.Advance(Micros{750'000 - 1});  // The last microsecond of the second.
  const DescriptorResult last = AskOne("mongo_cps", {{"database", "users"}});
  EXPECT_TRUE(IsOverLimit(last, 500, Unit::kSecond));
  EXPECT_EQ(last.until_reset, Micros{kSecond});
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
    EXPECT_EQ(r.until_reset, Micros{kDay / 2});  // 250 ms less, in whole seconds.
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
    ASSERT_EQ(r.until_reset, Micros{kMinute});  // 250 ms less, in whole seconds.
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

}  // namespace
}  // namespace sluice::server
