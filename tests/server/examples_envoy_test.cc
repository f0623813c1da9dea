// examples/envoy: its two files agree. Debian 12 packages no Envoy, so envoy.yaml is not run
// here: it is read as YAML, and what sluiced relies on is checked against the rules file, which
// loads as `sluiced --check-config` loads it: the domain and the descriptor both rate_limits
// entries send, sluiced's gRPC address, and the late entry's hits_addend reading the metadata
// header_to_metadata writes from the response. How those late hits count:
// service/envoy_counting_test.cc (LateHitsCountAsTheReferenceCountsThem).

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

#include "server/service/service.h"
#include "sluice/memory_store.h"
#include "tests/testing/rules.h"
#include "tests/testing/util.h"

#ifndef SLUICE_EXAMPLES_DIR
#error "SLUICE_EXAMPLES_DIR must name examples/ (set by CMake)"
#endif

namespace sluice::server {
namespace {

const std::string kDir = std::string(SLUICE_EXAMPLES_DIR) + "/envoy/";

std::string Read(const std::string& name) {
  std::ifstream in(kDir + name, std::ios::binary);
  EXPECT_TRUE(in) << kDir + name;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The element of `list` whose `name` is `name` (an undefined node when none is).
YAML::Node Named(const YAML::Node& list, const std::string& name) {
  for (const YAML::Node& item : list) {
    if (item["name"].as<std::string>() == name) {
      return item;
    }
  }
  ADD_FAILURE() << "no " << name;
  return YAML::Node();
}

TEST(ExamplesEnvoyTest, TheRulesLimitEachUserTo1000AMinute) {
  MemoryStore store;
  ManualClock clock(testing::At(testing::kEpoch));
  Metrics metrics;
  RateLimitService service(store, clock, metrics);
  service.SetRules(
      testing::MustParseRules(Read("sluice.yaml"), metrics.rules(), store, "sluice.yaml"));
  absl::StatusOr<std::vector<DescriptorResult>> results = service.ShouldRateLimit(
      {.domain = "llm", .descriptors = {{.entries = {{"user", "alice"}}, .cost = 1}}});
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_TRUE(results->front().matched);
  EXPECT_EQ(results->front().closest->nominal, 1000);
  EXPECT_EQ(results->front().unit, Unit::kMinute);
}

TEST(ExamplesEnvoyTest, EnvoyAsksSluicedTwiceOnTheRulesDescriptor) {
  const YAML::Node envoy = YAML::Load(Read("envoy.yaml"));
  const YAML::Node resources = envoy["static_resources"];
  const YAML::Node manager =
      resources["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
  const YAML::Node filters = manager["http_filters"];
  // The rate limit filter asks sluice.yaml's domain of the cluster on sluiced's default --grpc.
  const YAML::Node ratelimit = Named(filters, "envoy.filters.http.ratelimit")["typed_config"];
  EXPECT_EQ(ratelimit["domain"].as<std::string>(), "llm");
  const std::string cluster =
      ratelimit["rate_limit_service"]["grpc_service"]["envoy_grpc"]["cluster_name"]
          .as<std::string>();
  const YAML::Node sluiced = Named(resources["clusters"], cluster);
  EXPECT_EQ(sluiced["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
                   ["socket_address"]["port_value"]
                       .as<int>(),
            8081);
  EXPECT_TRUE(sluiced["typed_extension_protocol_options"]
                     ["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
                     ["explicit_http_config"]["http2_protocol_options"]
                         .IsDefined());
  // Two entries of one descriptor, (user, x-user-id): at request time, 1 (no hits_addend);
  // when the stream is done, the metadata header_to_metadata copies from x-tokens-used.
  const YAML::Node limits =
      manager["route_config"]["virtual_hosts"][0]["routes"][0]["route"]["rate_limits"];
  ASSERT_EQ(limits.size(), 2U);
  const YAML::Node now = limits[0];
  const YAML::Node late = limits[1];
  EXPECT_EQ(now["actions"][0]["request_headers"]["descriptor_key"].as<std::string>(), "user");
  EXPECT_EQ(YAML::Dump(now["actions"]), YAML::Dump(late["actions"]));
  EXPECT_FALSE(now["apply_on_stream_done"].IsDefined());
  EXPECT_FALSE(now["hits_addend"].IsDefined());
  EXPECT_TRUE(late["apply_on_stream_done"].as<bool>());
  const YAML::Node rule =
      Named(filters, "envoy.filters.http.header_to_metadata")["typed_config"]["response_rules"][0];
  EXPECT_EQ(rule["header"].as<std::string>(), "x-tokens-used");
  const YAML::Node metadata = rule["on_header_present"];
  EXPECT_EQ(metadata["type"].as<std::string>(), "NUMBER");
  EXPECT_EQ(late["hits_addend"]["format"].as<std::string>(),
            "%DYNAMIC_METADATA(" + metadata["metadata_namespace"].as<std::string>() + ":" +
                metadata["key"].as<std::string>() + ")%");
}

}  // namespace
}  // namespace sluice::server
