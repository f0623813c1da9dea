// envoyproxy/ratelimit's own rules files (tests/data/envoy-ratelimit/, vendored unchanged):
// every file their server accepts loads, every file their tests refuse is refused with an
// error that names the problem, and each descriptor matches the limit their
// test/config/config_test.go says it does (path, limit, name, flags, metadata, shared
// wildcard). Their assertions on their stats objects are not ported: what concerns us of them
// is which rule matched, which the path says.

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "server/rules/rules.h"
#include "sluice/memory_store.h"
#include "src/core/status.h"

#ifndef SLUICE_ENVOY_RATELIMIT_DATA_DIR
#error "SLUICE_ENVOY_RATELIMIT_DATA_DIR must name tests/data/envoy-ratelimit (set by CMake)"
#endif

namespace sluice::server {
namespace {

using ::testing::HasSubstr;

constexpr char kData[] = SLUICE_ENVOY_RATELIMIT_DATA_DIR;

using Files = std::vector<std::pair<std::string, std::string>>;

// The vendored files `names` (paths below tests/data/envoy-ratelimit/), in order, each named by
// that path, as theirs name it in errors.
Files ReadData(const std::vector<std::string>& names) {
  Files files;
  for (const std::string& name : names) {
    std::ifstream in(fmt::format("{}/{}", kData, name), std::ios::binary);
    EXPECT_TRUE(in) << name;
    std::ostringstream text;
    text << in.rdbuf();
    files.emplace_back(name, text.str());
  }
  return files;
}

absl::StatusOr<std::shared_ptr<const RuleSet>> LoadData(const std::vector<std::string>& names,
                                                        CounterRegistry& counters,
                                                        RuleLoadOptions options = {}) {
  static const MemoryStore store;
  return RuleSet::Parse(
      ReadData(names), counters, [](const Limit& limit) { return store.CheckLimit(limit); },
      options);
}

// One configuration, loaded as one (the test fails if it does not load), asked what rule a
// request descriptor matches.
class Config {
 public:
  // Of vendored files.
  explicit Config(const std::vector<std::string>& names, RuleLoadOptions options = {}) {
    absl::StatusOr<std::shared_ptr<const RuleSet>> rules = LoadData(names, *counters_, options);
    EXPECT_TRUE(rules.ok()) << rules.status();
    rules_ = rules.ok() ? *rules : std::make_shared<const RuleSet>();
  }
  // Of one file's text: the configurations their tests write in Go.
  static Config Inline(const std::string& text) {
    Config config({});
    static const MemoryStore store;
    absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
        RuleSet::Parse({{"inline.yaml", text}}, *config.counters_,
                       [](const Limit& limit) { return store.CheckLimit(limit); });
    EXPECT_TRUE(rules.ok()) << rules.status();
    config.rules_ = rules.ok() ? *rules : std::make_shared<const RuleSet>();
    return config;
  }

  // What `entries` match in `domain`, in one line: the rule's path, then its limit (N/UNIT or
  // unlimited) and what their RateLimit carries, when set: name, replaces, shadow, quota,
  // detailed (detailed_metric or value_to_metric), metadata, and share=[...] (their
  // ShareThresholdKeyPattern: the shared pattern of each entry, empty for entries that share
  // none). "none" when nothing matches, "no domain" for an unknown domain.
  std::string Ask(const std::string& domain, const std::vector<Entry>& entries) const {
    const Domain* found = rules_->FindDomain(domain);
    if (found == nullptr) {
      return "no domain";
    }
    std::vector<const DescriptorNode*> path;
    const Rule* rule = RuleSet::Match(*found, entries, &path);
    if (rule == nullptr) {
      return "none";
    }
    const RuleLimit& limit = rule->limits.front();
    std::string line = rule->path + ": ";
    line +=
        rule->unlimited ? "unlimited" : fmt::format("{}/{}", limit.nominal, UnitName(limit.unit));
    if (limit.named) {
      line += " name=" + limit.name;
    }
    if (!limit.replaces.empty()) {
      line += fmt::format(" replaces={}", fmt::join(limit.replaces, ","));
    }
    line += rule->mode == Mode::kShadow ? " shadow" : "";
    line += rule->quota_mode ? " quota" : "";
    line += rule->detailed_metric ? " detailed" : "";
    if (!rule->metadata_json.empty()) {
      line += " metadata=" + rule->metadata_json;
    }
    std::vector<std::string> shared;
    bool any = false;
    for (const DescriptorNode* node : path) {
      shared.push_back(node->share_threshold ? node->pattern : "");
      any = any || node->share_threshold;
    }
    return any ? fmt::format("{} share=[{}]", line, fmt::join(shared, "|")) : line;
  }

  const RuleSet& rules() const { return *rules_; }

 private:
  std::unique_ptr<CounterRegistry> counters_ = std::make_unique<CounterRegistry>();
  std::shared_ptr<const RuleSet> rules_;
};

// --------------------------------------------------------------------------------------------
// Which files load.

// The files their tests refuse (test/config/config_test.go), with where and what our error
// says.
const std::map<std::string, std::pair<std::string, std::string>>& Invalid() {
  static const auto* const invalid = new std::map<std::string, std::pair<std::string, std::string>>{
      {"test/config/bad_limit_unit.yaml", {":6:13", "unknown unit 'foo'"}},
      // yaml-cpp reads the unterminated quote as a scalar (libyaml, theirs, fails on it).
      {"test/config/bad_yaml.yaml", {":1:1", "must be a mapping"}},
      {"test/config/duplicate_key.yaml",
       {":6:5", "duplicate descriptor 'test-domain.key1_value1'"}},
      {"test/config/empty_domain.yaml", {":1:1", "missing 'domain'"}},
      {"test/config/empty_key.yaml", {":3:5", "missing 'key'"}},
      {"test/config/misspelled_key.yaml", {":5:5", "unknown key 'ratelimit'"}},
      {"test/config/misspelled_key2.yaml", {":7:7", "unknown key 'requestsperunit'"}},
      {"test/config/non_map_list.yaml", {":3:5", "expected a mapping"}},
      {"test/config/non_string_key.yaml", {":1:1", "unknown key '0.25'"}},
      {"test/config/replaces_empty.yaml", {":10:15", "a 'replaces' entry needs a non-empty name"}},
      {"test/config/replaces_self.yaml", {":10:15", "'self' cannot replace itself"}},
      {"test/config/unlimited_with_unit.yaml", {":5:7", "an unlimited rate_limit has no unit"}},
  };
  return *invalid;
}

TEST(EnvoyConfigsTest, EveryFileTheirServerAcceptsLoadsOnItsOwn) {
  int loaded = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(kData)) {
    const std::string name = std::filesystem::relative(entry.path(), kData).string();
    if (entry.path().extension() != ".yaml" || Invalid().contains(name)) {
      continue;
    }
    CounterRegistry counters;
    absl::StatusOr<std::shared_ptr<const RuleSet>> rules = LoadData({name}, counters);
    EXPECT_TRUE(rules.ok()) << rules.status();
    ++loaded;
  }
  // 2 examples, 8 of test/config, 4 of the integration runtime, 16 of the README.
  EXPECT_EQ(loaded, 30);
}

TEST(EnvoyConfigsTest, EveryFileTheirTestsRefuseIsRefusedSayingWhy) {
  for (const auto& [name, error] : Invalid()) {
    CounterRegistry counters;
    absl::StatusOr<std::shared_ptr<const RuleSet>> rules = LoadData({name}, counters);
    ASSERT_FALSE(rules.ok()) << name;
    EXPECT_EQ(rules.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(internal::Message(rules.status()));
    EXPECT_THAT(message, HasSubstr(name + error.first)) << name;
    EXPECT_THAT(message, HasSubstr(error.second)) << name;
  }
}

TEST(EnvoyConfigsTest, TheirIntegrationRuntimeLoadsAsADirectory) {
  static const MemoryStore store;
  CounterRegistry counters;
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
      RuleSet::Load(fmt::format("{}/test/integration/runtime/current/ratelimit/config", kData),
                    counters, [](const Limit& limit) { return store.CheckLimit(limit); });
  ASSERT_TRUE(rules.ok()) << rules.status();
  std::vector<std::string> names;
  for (const auto& domain : (*rules)->domains()) {
    names.push_back(domain->name);
  }
  EXPECT_THAT(names, ::testing::ElementsAre("another", "basic", "share-threshold-test"));
}

// TestDuplicateDomain.
TEST(EnvoyConfigsTest, ASecondFileOfADomainIsRefusedUnlessMerged) {
  CounterRegistry counters;
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
      LoadData({"test/config/basic_config.yaml", "test/config/duplicate_domain.yaml"}, counters);
  ASSERT_FALSE(rules.ok());
  EXPECT_THAT(std::string(internal::Message(rules.status())),
              HasSubstr("test/config/duplicate_domain.yaml:1:1: domain 'test-domain' is already "
                        "defined in test/config/basic_config.yaml"));
}

// TestDomainMerge.
TEST(EnvoyConfigsTest, MergedDomainHasTheDescriptorsOfBothFiles) {
  const Config config({"test/config/merge_domain_key1.yaml", "test/config/merge_domain_key2.yaml"},
                      {.merge_domains = true});
  EXPECT_EQ(config.Ask("foo_domain", {}), "no domain");
  EXPECT_EQ(config.Ask("test-domain", {}), "none");
  EXPECT_EQ(config.Ask("test-domain", {{"key1", "value1"}}), "test-domain.key1_value1: 10/MINUTE");
  EXPECT_EQ(config.Ask("test-domain", {{"key2", "value2"}}), "test-domain.key2_value2: 20/MINUTE");
}

// TestDuplicateKeyDomainMerge.
TEST(EnvoyConfigsTest, MergingADescriptorTwiceIsRefused) {
  CounterRegistry counters;
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
      LoadData({"test/config/merge_domain_key1.yaml", "test/config/merge_domain_key1.yaml"},
               counters, {.merge_domains = true});
  ASSERT_FALSE(rules.ok());
  EXPECT_THAT(std::string(internal::Message(rules.status())),
              HasSubstr("test/config/merge_domain_key1.yaml:5:5: duplicate descriptor "
                        "'test-domain.key1_value1'"));
}

// --------------------------------------------------------------------------------------------
// What matches what: their config_test.go.

TEST(EnvoyConfigsTest, BasicConfig) {
  const Config config({"test/config/basic_config.yaml"});
  const std::string domain = "test-domain";
  EXPECT_EQ(config.Ask("foo_domain", {}), "no domain");
  EXPECT_EQ(config.Ask(domain, {}), "none");
  EXPECT_EQ(config.Ask(domain, {{"key1", "something"}}), "none");
  EXPECT_EQ(config.Ask(domain, {{"key1", "value1"}}), "none");
  EXPECT_EQ(config.Ask(domain, {{"key2", "value2"}, {"subkey", "subvalue"}}), "none");
  EXPECT_EQ(config.Ask(domain, {{"key5", "value5"}, {"subkey5", "subvalue"}}), "none");
  EXPECT_EQ(config.Ask(domain, {{"key1", "value1"}, {"subkey1", "something"}}),
            "test-domain.key1_value1.subkey1: 5/SECOND");
  EXPECT_EQ(config.Ask(domain, {{"key1", "value1"}, {"subkey1", "subvalue1"}}),
            "test-domain.key1_value1.subkey1_subvalue1: 10/SECOND");
  EXPECT_EQ(config.Ask(domain, {{"key2", "something"}}), "test-domain.key2: 20/MINUTE");
  EXPECT_EQ(config.Ask(domain, {{"key2", "value2"}}), "test-domain.key2_value2: 30/MINUTE");
  EXPECT_EQ(config.Ask(domain, {{"key2", "value3"}}), "none");  // Listed without a limit.
  EXPECT_EQ(config.Ask(domain, {{"key3", "foo"}}), "test-domain.key3: 1/HOUR");
  EXPECT_EQ(config.Ask(domain, {{"key4", "foo"}}), "test-domain.key4: 1/DAY name=key4_rate_limit");
  EXPECT_EQ(config.Ask(domain, {{"key6", "foo"}}), "test-domain.key6: unlimited");
  EXPECT_EQ(config.Ask(domain, {{"key7", "unspecified_value"}}),
            "test-domain.key7: 70/MINUTE detailed");
  EXPECT_EQ(config.Ask(domain, {{"key7", "another_value"}}),
            "test-domain.key7: 70/MINUTE detailed");
}

TEST(EnvoyConfigsTest, ShadowModeConfig) {
  const Config config({"test/config/shadowmode_config.yaml"});
  EXPECT_EQ(config.Ask("test-domain", {{"key1", "value1"}, {"subkey1", "something"}}),
            "test-domain.key1_value1.subkey1: 5/SECOND");
  EXPECT_EQ(config.Ask("test-domain", {{"key1", "value1"}, {"subkey1", "subvalue1"}}),
            "test-domain.key1_value1.subkey1_subvalue1: 10/SECOND shadow");
  EXPECT_EQ(config.Ask("test-domain", {{"key2", "something"}}),
            "test-domain.key2: 20/MINUTE shadow");
  EXPECT_EQ(config.Ask("test-domain", {{"key2", "value2"}}), "test-domain.key2_value2: 30/MINUTE");
}

TEST(EnvoyConfigsTest, WildcardConfig) {
  const Config config({"test/config/wildcard.yaml"});
  const auto ask = [&](const std::vector<Entry>& entries) {
    return config.Ask("test-domain", entries);
  };
  EXPECT_EQ(ask({{"noVal", "foo1"}}), "test-domain.noVal: 20/MINUTE");
  EXPECT_EQ(ask({{"noVal", "foo2"}}), "test-domain.noVal: 20/MINUTE");
  EXPECT_EQ(ask({{"wild", "foo1"}}), "test-domain.wild_foo*: 20/MINUTE");
  EXPECT_EQ(ask({{"wild", "foo2"}}), "test-domain.wild_foo*: 20/MINUTE");
  EXPECT_EQ(ask({{"nestedWild", "val1"}, {"wild", "goo2"}}),
            "test-domain.nestedWild_val1.wild_goo*: 20/MINUTE");
  EXPECT_EQ(ask({{"wild", "bar"}}), "none");
  EXPECT_EQ(ask({{"noWild", "foo1"}}), "none");  // A value without '*' is not a prefix.
  EXPECT_EQ(ask({{"midWild", "barab"}}), "test-domain.midWild_bar*b: 20/MINUTE");
  EXPECT_EQ(ask({{"midWild", "bar123b"}}), "test-domain.midWild_bar*b: 20/MINUTE");
  EXPECT_EQ(ask({{"midWild", "barb"}}), "test-domain.midWild_bar*b: 20/MINUTE");  // '*' is "".
  EXPECT_EQ(ask({{"midWild", "bara"}}), "none");                                  // No suffix.
  EXPECT_EQ(ask({{"midWild", "xbarb"}}), "none");                                 // No prefix.
  EXPECT_EQ(ask({{"multiWild", "foo123bar456baz"}}),
            "test-domain.multiWild_foo*bar*baz: 10/MINUTE");
  EXPECT_EQ(ask({{"multiWild", "foobarbaz"}}), "test-domain.multiWild_foo*bar*baz: 10/MINUTE");
  EXPECT_EQ(ask({{"multiWild", "foo123baz"}}), "none");  // No middle segment.
  EXPECT_EQ(ask({{"multiWild", "bar456baz"}}), "none");  // No prefix.
}

TEST(EnvoyConfigsTest, ShareThreshold) {
  const Config config({"test/config/share_threshold.yaml"});
  const auto ask = [&](const std::vector<Entry>& entries) {
    return config.Ask("test-domain", entries);
  };
  for (const char* value : {"files/a.pdf", "files/b.csv", "files/c.txt"}) {
    EXPECT_EQ(ask({{"files", value}}), "test-domain.files_files/*: 100/MINUTE share=[files/*]");
  }
  EXPECT_EQ(ask({{"route", "api/v1"}, {"method", "GET"}}),
            "test-domain.route_api/*.method: 60/MINUTE share=[api/*|]");
  EXPECT_EQ(ask({{"service", "svc/user"}, {"endpoint", "get"}}),
            "test-domain.service_svc/*.endpoint: 80/MINUTE detailed share=[svc/*|]");
  EXPECT_EQ(ask({{"nested", "parent"}, {"files", "nested/file1.txt"}}),
            "test-domain.nested_parent.files_nested/*: 200/MINUTE share=[|nested/*]");
  EXPECT_EQ(ask({{"files", "top/file1.txt"}, {"files", "nested/file1.txt"}}),
            "test-domain.files_top/*.files_nested/*: 300/MINUTE share=[top/*|nested/*]");
  EXPECT_EQ(ask({{"path", "path/foo"}, {"file", "file/doc1"}, {"type", "pdf"}}),
            "test-domain.path_path/*.file_file/*.type: 120/MINUTE share=[path/*||]");
  EXPECT_EQ(ask({{"user", "user/alice"}, {"resource", "res/file1"}, {"action", "read"}}),
            "test-domain.user_user/*.resource_res/*.action: 150/MINUTE share=[user/*|res/*|]");
  // An exact value before the wildcard, which shares nothing.
  EXPECT_EQ(ask({{"file", "test1"}}), "test-domain.file_test1: 50/MINUTE");
  for (const char* value : {"test2", "test23", "test123"}) {
    EXPECT_EQ(ask({{"file", value}}), "test-domain.file_test*: 100/MINUTE share=[test*]");
  }
  for (const char* value : {"/api/v1", "/api-beta-v1", "/apiXYZv1"}) {
    EXPECT_EQ(ask({{"midpath", value}}), "test-domain.midpath_/api*v1: 100/MINUTE share=[/api*v1]");
  }
  EXPECT_EQ(ask({{"midpath", "/api/v2"}}), "none");
  for (const char* value : {"svcAepBrpc", "svcXXXepYYYrpc", "svceprpc"}) {
    EXPECT_EQ(ask({{"multiroute", value}}),
              "test-domain.multiroute_svc*ep*rpc: 50/MINUTE share=[svc*ep*rpc]");
  }
  EXPECT_EQ(ask({{"multiroute", "svcABCrpc"}}), "none");
  for (const char* value : {"/api/v2", "/api-beta-v2"}) {
    EXPECT_EQ(ask({{"midroute", value}}),
              "test-domain.midroute_/api*v2: 80/MINUTE detailed share=[/api*v2]");
  }
  for (const auto& [tenant, resource] : {std::pair{"t1prod", "resAv2"}, {"t99prod", "resBBBv2"}}) {
    EXPECT_EQ(ask({{"tenant", tenant}, {"resource", resource}}),
              "test-domain.tenant_t*prod.resource_res*v2: 60/MINUTE share=[t*prod|res*v2]");
  }
}

TEST(EnvoyConfigsTest, Metadata) {
  const Config config({"test/config/metadata.yaml"});
  EXPECT_EQ(config.Ask("test-domain", {}), "none");
  EXPECT_EQ(config.Ask("test-domain", {{"key1", "value1"}, {"subkey1", "something"}}),
            R"(test-domain.key1_value1.subkey1: 5/SECOND metadata={"name":"service_1"})");
  EXPECT_EQ(config.Ask("test-domain", {{"key1", "value1"}, {"subkey1", "subvalue1"}}),
            "test-domain.key1_value1.subkey1_subvalue1: 10/SECOND");
  EXPECT_EQ(config.Ask("test-domain", {{"key2", "something"}}),
            R"(test-domain.key2: 20/MINUTE metadata={"service_with_quota":{"name":"service_2"}})");
}

// TestDetailedMetric's configurations.
TEST(EnvoyConfigsTest, DetailedMetric) {
  const Config nested = Config::Inline(R"(
domain: nested
descriptors:
  - key: key-1
    detailed_metric: true
    rate_limit: {requests_per_unit: 100, unit: minute}
    descriptors:
      - key: key-2
        detailed_metric: true
        rate_limit: {requests_per_unit: 5, unit: minute}
)");
  EXPECT_EQ(nested.Ask("nested", {{"key-1", "value-1"}}), "nested.key-1: 100/MINUTE detailed");
  EXPECT_EQ(nested.Ask("nested", {{"key-1", "value-1"}, {"key-2", "value-2"}}),
            "nested.key-1.key-2: 5/MINUTE detailed");
  const Config realistic = Config::Inline(R"(
domain: nested
descriptors:
  - key: key_1
    rate_limit: {requests_per_unit: 500, unit: minute}
    detailed_metric: true
  - key: key_1
    value: some-value-for-key-1
    rate_limit: {requests_per_unit: 500, unit: minute}
  - key: key_2
    rate_limit: {requests_per_unit: 5000, unit: minute}
    detailed_metric: true
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        rate_limit: {requests_per_unit: 5, unit: minute}
        detailed_metric: true
  - key: key_2
    value: specific-id
    rate_limit: {requests_per_unit: 50000, unit: minute}
    detailed_metric: true
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        rate_limit: {requests_per_unit: 100, unit: minute}
        detailed_metric: true
)");
  EXPECT_EQ(realistic.Ask("nested", {{"key_1", "value-for-key-1"}}),
            "nested.key_1: 500/MINUTE detailed");
  EXPECT_EQ(realistic.Ask("nested", {{"key_2", "key-2-value"}}),
            "nested.key_2: 5000/MINUTE detailed");
  EXPECT_EQ(realistic.Ask("nested", {{"key_2", "key-2-value"}, {"key_3", "requested-key3-value"}}),
            "nested.key_2.key_3_requested-key3-value: 5/MINUTE detailed");
  EXPECT_EQ(realistic.Ask("nested", {{"key_2", "specific-id"}, {"key_3", "requested-key3-value"}}),
            "nested.key_2_specific-id.key_3_requested-key3-value: 100/MINUTE detailed");
  EXPECT_EQ(realistic.Ask("nested", {{"key_2", "specific-id"}, {"key_3", "other"}}), "none");
}

// The configurations of their TestValueToMetric_* and TestWildcardStatsBehavior: which limit
// matches (the rest of those tests is about their stats keys).
TEST(EnvoyConfigsTest, ValueToMetricAndWildcardFlags) {
  const Config route = Config::Inline(R"(
domain: domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value: GET
        value_to_metric: true
        descriptors:
          - {key: subject_id, rate_limit: {requests_per_unit: 60, unit: minute}}
      - key: http_method
        value: POST
        value_to_metric: true
        descriptors:
          - {key: subject_id, rate_limit: {requests_per_unit: 30, unit: minute}}
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - {key: resource, rate_limit: {requests_per_unit: 100, unit: minute}}
)");
  EXPECT_EQ(route.Ask("domain", {{"route", "api"}, {"http_method", "GET"}, {"subject_id", "u1"}}),
            "domain.route.http_method_GET.subject_id: 60/MINUTE");
  EXPECT_EQ(route.Ask("domain", {{"route", ""}, {"http_method", "POST"}, {"subject_id", "u2"}}),
            "domain.route.http_method_POST.subject_id: 30/MINUTE");
  EXPECT_EQ(route.Ask("domain", {{"user", "bob"}, {"action", "readdata"}, {"resource", "db"}}),
            "domain.user.action_read*.resource: 100/MINUTE");
  EXPECT_EQ(route.Ask("domain", {{"user", "bob"}, {"action", "write"}, {"resource", "db"}}),
            "none");
  const Config flags = Config::Inline(R"(
domain: test-domain
descriptors:
  - {key: wild, value: foo*, share_threshold: true, value_to_metric: true,
     rate_limit: {requests_per_unit: 20, unit: minute}}
  - {key: mid, value: foo*bar*, value_to_metric: true,
     rate_limit: {requests_per_unit: 20, unit: minute}}
  - key: other
    value: foo*
    descriptors:
      - key: other
        value_to_metric: true
        descriptors:
          - {key: limit, rate_limit: {requests_per_unit: 20, unit: minute}}
)");
  EXPECT_EQ(flags.Ask("test-domain", {{"wild", "foo1"}}),
            "test-domain.wild_foo*: 20/MINUTE detailed share=[foo*]");
  EXPECT_EQ(flags.Ask("test-domain", {{"mid", "foo123bar456"}}),
            "test-domain.mid_foo*bar*: 20/MINUTE detailed");
  EXPECT_EQ(flags.Ask("test-domain", {{"other", "foo1"}, {"other", "bar"}, {"limit", "X"}}),
            "test-domain.other_foo*.other.limit: 20/MINUTE");
}

// Their example deployment: quota_mode and metadata beside replaces, shadow_mode, unlimited.
TEST(EnvoyConfigsTest, TheirMainExample) {
  const Config config({"examples/ratelimit/config/example.yaml"});
  const auto ask = [&](const std::vector<Entry>& entries) { return config.Ask("rl", entries); };
  EXPECT_EQ(ask({{"category", "account"}}),
            "rl.category_account: 4/MINUTE replaces=bkthomps,fake_name");
  EXPECT_EQ(ask({{"source_cluster", "proxy"}, {"destination_cluster", "fake"}}),
            "rl.source_cluster_proxy.destination_cluster_fake: 2/MINUTE name=fake_name");
  EXPECT_EQ(ask({{"foo", "x"}, {"bar", "banned"}}),
            "rl.foo.bar_banned: 0/MINUTE name=banned_limit");
  EXPECT_EQ(ask({{"foo", "x"}, {"baz", "shady"}}), "rl.foo.baz_shady: 3/MINUTE shadow");
  EXPECT_EQ(ask({{"foo", "x"}, {"bay", "y"}}), "rl.foo.bay: unlimited");
  EXPECT_EQ(ask({{"unspec", "x"}}), "rl.unspec: 2/MINUTE detailed");
  EXPECT_EQ(
      ask({{"service", "service_1"}}),
      R"(rl.service_service_1: 1/MINUTE quota metadata={"service_with_quota":{"name":"service_1"}})");
  EXPECT_EQ(
      ask({{"service", "service_2"}}),
      R"(rl.service_service_2: 2/MINUTE quota metadata={"service_with_quota":{"name":"service_2"}})");
  EXPECT_EQ(ask({{"service", "service_3"}}), "none");
}

// Their README's Example 9 and 11 (the wildcards and share_threshold it documents).
TEST(EnvoyConfigsTest, TheirReadmeWildcards) {
  const Config trailing({"readme/example9_trailing.yaml"});
  EXPECT_EQ(trailing.Ask("example9", {{"key1", "valueXYZ"}}), "example9.key1_value*: 20/MINUTE");
  const Config middle({"readme/example9_middle.yaml"});
  EXPECT_EQ(middle.Ask("example9", {{"path", "/api/123/action"}}),
            "example9.path_/api/*/action: 20/MINUTE");
  EXPECT_EQ(middle.Ask("example9", {{"path", "/api/user-id/action"}}),
            "example9.path_/api/*/action: 20/MINUTE");
  EXPECT_EQ(middle.Ask("example9", {{"path", "/api/123/other"}}), "none");
  const Config multiple({"readme/example9_multiple.yaml"});
  EXPECT_EQ(multiple.Ask("example9", {{"route", "/api/v2/resource/456/action"}}),
            "example9.route_/api/*/resource/*/action: 20/MINUTE");
  EXPECT_EQ(multiple.Ask("example9", {{"route", "/api/v2/resource/456"}}), "none");
  // The three blocks of Example 9 share their domain: merged, they are one configuration.
  const Config merged({"readme/example9_trailing.yaml", "readme/example9_middle.yaml",
                       "readme/example9_multiple.yaml"},
                      {.merge_domains = true});
  EXPECT_EQ(merged.Ask("example9", {{"path", "/api/1/action"}}),
            "example9.path_/api/*/action: 20/MINUTE");
  EXPECT_EQ(merged.Ask("example9", {{"key1", "value1"}}), "example9.key1_value*: 20/MINUTE");
  const Config shared({"readme/example11.yaml"});
  EXPECT_EQ(shared.Ask("example11", {{"files", "files/a.pdf"}}),
            "example11.files_files/*: 10/HOUR share=[files/*]");
  EXPECT_EQ(shared.Ask("example11", {{"files_no_share", "files_no_share/a.pdf"}}),
            "example11.files_no_share_files_no_share/*: 10/HOUR");
}

}  // namespace
}  // namespace sluice::server
