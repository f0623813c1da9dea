// Rules from xDS without a server: a pushed resource reads as the rules file it stands for
// (the same rules, every field carried), one of another type or undecodable is refused naming
// it; the backoff between attempts; their "k=v,k2=v2" and "k:v" settings.

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb.h"
#include "yaml-cpp/yaml.h"

#include "server/rules/rules.h"
#include "server/xds/client.h"
#include "server/xds/resources.h"
#include "sluice/memory_store.h"
#include "tests/testing/rules.h"

namespace sluice::server::xds {
namespace {

namespace conf = ratelimit::config::ratelimit::v3;
using ::testing::HasSubstr;
using ::testing::Pair;

// The file the resource below stands for, written by hand.
constexpr char kFile[] = R"(
domain: "edge: api"
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10, name: per_user}
    descriptors:
      - key: path
        value: "/login # not a comment"
        shadow_mode: true
        detailed_metric: true
        rate_limit: {unit: week, requests_per_unit: 3, replaces: [{name: per_user}]}
  - key: free
    rate_limit: {unlimited: true}
  - key: quota
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 0}
    metadata: {owner: "team a", weight: 2}
)";

google::protobuf::RepeatedPtrField<google::protobuf::Any> Resources() {
  conf::RateLimitConfig config;
  config.set_name("edge");
  config.set_domain("edge: api");
  conf::RateLimitDescriptor* user = config.add_descriptors();
  user->set_key("user");
  user->mutable_rate_limit()->set_unit(conf::MINUTE);
  user->mutable_rate_limit()->set_requests_per_unit(10);
  user->mutable_rate_limit()->set_name("per_user");
  conf::RateLimitDescriptor* path = user->add_descriptors();
  path->set_key("path");
  path->set_value("/login # not a comment");
  path->set_shadow_mode(true);
  path->set_detailed_metric(true);
  path->mutable_rate_limit()->set_unit(conf::WEEK);
  path->mutable_rate_limit()->set_requests_per_unit(3);
  path->mutable_rate_limit()->add_replaces()->set_name("per_user");
  conf::RateLimitDescriptor* free = config.add_descriptors();
  free->set_key("free");
  free->mutable_rate_limit()->set_unlimited(true);
  conf::RateLimitDescriptor* quota = config.add_descriptors();
  quota->set_key("quota");
  quota->set_quota_mode(true);
  quota->mutable_rate_limit()->set_unit(conf::DAY);
  auto& fields = *quota->mutable_metadata()->mutable_fields();
  fields["owner"].set_string_value("team a");
  fields["weight"].set_number_value(2);
  google::protobuf::RepeatedPtrField<google::protobuf::Any> resources;
  resources.Add()->PackFrom(config);
  return resources;
}

TEST(XdsResourcesTest, AResourceReadsAsTheFileItStandsFor) {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> files = RulesFiles(Resources());
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 1U);
  EXPECT_EQ((*files)[0].first, "edge");
  MemoryStore store;
  CounterRegistry counters;
  const auto pushed =
      testing::MustParseRules((*files)[0].second, counters, store, (*files)[0].first);
  const auto written = testing::MustParseRules(kFile, counters, store, "edge");
  EXPECT_EQ(DumpRules(*pushed), DumpRules(*written)) << (*files)[0].second;
  ASSERT_NE(pushed->FindDomain("edge: api"), nullptr);
  // What the dump leaves out, read back from the text.
  const YAML::Node root = YAML::Load((*files)[0].second);
  const YAML::Node path = root["descriptors"][0]["descriptors"][0];
  EXPECT_EQ(path["value"].as<std::string>(), "/login # not a comment");
  EXPECT_TRUE(path["shadow_mode"].as<bool>());
  EXPECT_TRUE(path["detailed_metric"].as<bool>());
  EXPECT_EQ(path["rate_limit"]["replaces"][0]["name"].as<std::string>(), "per_user");
  const YAML::Node quota = root["descriptors"][2];
  EXPECT_TRUE(quota["quota_mode"].as<bool>());
  EXPECT_EQ(quota["metadata"]["owner"].as<std::string>(), "team a");
  EXPECT_EQ(quota["metadata"]["weight"].as<int>(), 2);
  EXPECT_FALSE(root["descriptors"][1]["rate_limit"]["unit"]);  // Unlimited: no unit.
}

// Metadata of every kind of value, a character outside the basic plane among them (a tag
// character: through protobuf's JSON, a pair of surrogate escapes that yaml-cpp refuses).
TEST(XdsResourcesTest, MetadataOfEveryKindReadsBack) {
  conf::RateLimitConfig config;
  config.set_name("m");
  config.set_domain("m");
  conf::RateLimitDescriptor* d = config.add_descriptors();
  d->set_key("k");
  d->mutable_rate_limit()->set_unit(conf::HOUR);
  d->mutable_rate_limit()->set_requests_per_unit(1);
  auto& fields = *d->mutable_metadata()->mutable_fields();
  fields["flag"].set_string_value("\xF0\x9F\x8F\xB4\xF3\xA0\x81\xA7\xF3\xA0\x81\xBF");
  fields["none"].set_null_value(google::protobuf::NULL_VALUE);
  fields["yes"].set_bool_value(true);
  auto* list = fields["list"].mutable_list_value();
  list->add_values()->set_number_value(1.5);
  (*list->add_values()->mutable_struct_value()->mutable_fields())["in"].set_string_value("~");
  google::protobuf::RepeatedPtrField<google::protobuf::Any> resources;
  resources.Add()->PackFrom(config);
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> files = RulesFiles(resources);
  ASSERT_TRUE(files.ok()) << files.status();
  const YAML::Node metadata = YAML::Load((*files)[0].second)["descriptors"][0]["metadata"];
  EXPECT_EQ(metadata["flag"].as<std::string>(), fields["flag"].string_value());
  EXPECT_TRUE(metadata["none"].IsNull());
  EXPECT_TRUE(metadata["yes"].as<bool>());
  EXPECT_EQ(metadata["list"][0].as<double>(), 1.5);
  EXPECT_EQ(metadata["list"][1]["in"].as<std::string>(), "~");  // A string, not YAML's null.
  MemoryStore store;
  CounterRegistry counters;
  EXPECT_NE(testing::MustParseRules((*files)[0].second, counters, store)->FindDomain("m"), nullptr);
}

TEST(XdsResourcesTest, AResourceOfAnotherTypeOrUndecodableIsRefusedNamingIt) {
  google::protobuf::RepeatedPtrField<google::protobuf::Any> resources = Resources();
  google::protobuf::Any* other = resources.Add();
  other->set_type_url("type.googleapis.com/envoy.config.cluster.v3.Cluster");
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> files = RulesFiles(resources);
  EXPECT_TRUE(absl::IsInvalidArgument(files.status()));
  EXPECT_THAT(
      files.status().message(),
      HasSubstr("resource 1: of type 'type.googleapis.com/envoy.config.cluster.v3.Cluster'"));
  other->set_type_url(kRateLimitConfigType);
  other->set_value("\xff\xff\xff");
  files = RulesFiles(resources);
  EXPECT_THAT(files.status().message(), HasSubstr("resource 1: not a RateLimitConfig"));
}

TEST(XdsClientTest, TheBackoffDoublesToItsLongestAndJitterTakesOffAtMostItsShare) {
  Options options;
  options.backoff_initial = std::chrono::milliseconds(100);
  options.backoff_max = std::chrono::milliseconds(700);
  options.backoff_jitter = false;
  std::mt19937_64 random(7);
  std::vector<int64_t> waits;
  for (int failures = 1; failures <= 6; ++failures) {
    waits.push_back(Client::Backoff(options, failures, random).count() / 1000);
  }
  EXPECT_EQ(waits, (std::vector<int64_t>{100, 200, 400, 700, 700, 700}));
  options.backoff_jitter = true;
  options.backoff_random_factor = 0.5;
  bool below = false;
  for (int i = 0; i < 200; ++i) {
    const int64_t wait = Client::Backoff(options, 3, random).count();
    EXPECT_GE(wait, 200'000);
    EXPECT_LE(wait, 400'000);
    below = below || wait < 399'000;
  }
  EXPECT_TRUE(below) << "jitter never took anything off";
}

TEST(XdsClientTest, TheirPairsAreReadAsTheirsReadsThem) {
  EXPECT_THAT(*ParsePairs("team=a,bad,zone=b=c,,", '=', /*skip_malformed=*/true),
              ::testing::ElementsAre(Pair("team", "a"), Pair("zone", "b=c")));
  EXPECT_THAT(*ParsePairs("x-a:1,x-b:2", ':', false),
              ::testing::ElementsAre(Pair("x-a", "1"), Pair("x-b", "2")));
  EXPECT_THAT(ParsePairs("x-a:1,broken", ':', false).status().message(),
              HasSubstr("'broken' is not KEY:VALUE"));
}

}  // namespace
}  // namespace sluice::server::xds
