#include "server/grpc/metadata.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::server {
namespace {

namespace rls = envoy::service::ratelimit::v3;

rls::RateLimitRequest Request() {
  rls::RateLimitRequest request;
  request.set_domain("rl");
  request.set_hits_addend(2);
  auto* first = request.add_descriptors();
  auto* entry = first->add_entries();
  entry->set_key("user");
  entry->set_value("alice");
  auto* second = request.add_descriptors();
  entry = second->add_entries();
  entry->set_key("path");
  entry->set_value("/a");
  second->mutable_hits_addend()->set_value(3);
  second->mutable_limit()->set_requests_per_unit(5);
  second->mutable_limit()->set_unit(envoy::type::v3::MINUTE);
  return request;
}

TEST(DynamicMetadataTest, DescribesTheRequest) {
  const google::protobuf::Struct metadata = DynamicMetadata(Request(), {{}, {}});
  EXPECT_EQ(metadata.fields().at("domain").string_value(), "rl");
  EXPECT_EQ(metadata.fields().at("hitsAddend").number_value(), 2);
  const auto& descriptors = metadata.fields().at("descriptors").list_value();
  ASSERT_EQ(descriptors.values_size(), 2);
  const auto& first = descriptors.values(0).struct_value().fields();
  EXPECT_EQ(first.at("entries").list_value().values(0).string_value(), "user=alice");
  EXPECT_FALSE(first.contains("limit"));
  EXPECT_FALSE(first.contains("hitsAddend"));
  const auto& second = descriptors.values(1).struct_value().fields();
  EXPECT_EQ(second.at("hitsAddend").number_value(), 3);
  EXPECT_EQ(second.at("limit").string_value(), "requests_per_unit:5  unit:MINUTE");  // As theirs.
  EXPECT_FALSE(metadata.fields().contains("metadata"));  // No rule had any.
}

TEST(DynamicMetadataTest, MergesTheMetadataOfDescriptorsWithinTheirLimits) {
  DescriptorResult first{.metadata_json = R"({"team": "a", "tags": {"x": 1}, "n": 1})"};
  DescriptorResult second{.metadata_json = R"({"team": "b", "tags": {"y": true}, "m": [1]})"};
  DescriptorResult over{.over_limit = true, .metadata_json = R"({"over": 1})"};
  DescriptorResult unlimited{.unlimited = true, .metadata_json = R"({"unlimited": 1})"};
  const google::protobuf::Struct metadata =
      DynamicMetadata(Request(), {first, second, over, unlimited});
  const auto& merged = metadata.fields().at("metadata").struct_value().fields();
  EXPECT_EQ(merged.at("team").string_value(), "a");  // The first one's value stays.
  EXPECT_EQ(merged.at("n").number_value(), 1);
  EXPECT_EQ(merged.at("m").list_value().values(0).number_value(), 1);
  const auto& tags = merged.at("tags").struct_value().fields();
  EXPECT_EQ(tags.at("x").number_value(), 1);  // Objects merged key by key.
  EXPECT_TRUE(tags.at("y").bool_value());
  EXPECT_FALSE(merged.contains("over"));       // Only descriptors within their limits.
  EXPECT_FALSE(merged.contains("unlimited"));  // Theirs leaves unlimited ones out too.
}

}  // namespace
}  // namespace sluice::server
