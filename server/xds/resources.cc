#include "server/xds/resources.h"

#include "fmt/format.h"
#include "google/protobuf/struct.pb.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb.h"
#include "yaml-cpp/yaml.h"

namespace sluice::server::xds {
namespace {

namespace conf = ratelimit::config::ratelimit::v3;

// A google.protobuf.Value as YAML, built node by node (through JSON, protobuf's escapes of
// characters outside the basic plane are refused by yaml-cpp's reader).
YAML::Node ValueNode(const google::protobuf::Value& value) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kBoolValue:
      return YAML::Node(value.bool_value());
    case google::protobuf::Value::kNumberValue:
      return YAML::Node(value.number_value());
    case google::protobuf::Value::kStringValue:
      return YAML::Node(value.string_value());
    case google::protobuf::Value::kStructValue: {
      YAML::Node node(YAML::NodeType::Map);
      for (const auto& [key, field] : value.struct_value().fields()) {
        node[key] = ValueNode(field);
      }
      return node;
    }
    case google::protobuf::Value::kListValue: {
      YAML::Node node(YAML::NodeType::Sequence);
      for (const google::protobuf::Value& item : value.list_value().values()) {
        node.push_back(ValueNode(item));
      }
      return node;
    }
    default:  // null
      return YAML::Node(YAML::NodeType::Null);
  }
}

// A field is written only when set, as a file leaves it out: their conversion writes Go's zero
// values, which their loader reads as absent.
YAML::Node Descriptor(const conf::RateLimitDescriptor& descriptor) {
  YAML::Node node;
  node["key"] = descriptor.key();
  if (!descriptor.value().empty()) {
    node["value"] = descriptor.value();
  }
  if (descriptor.has_rate_limit()) {
    const conf::RateLimitPolicy& policy = descriptor.rate_limit();
    YAML::Node limit;
    // Unset (UNKNOWN), the unit is left out, as theirs reads UNKNOWN: refused for a limit,
    // required for an unlimited one (which takes no unit and no count).
    if (policy.unit() != conf::UNKNOWN) {
      limit["unit"] = conf::RateLimitUnit_Name(policy.unit());
    }
    if (policy.unlimited()) {
      limit["unlimited"] = true;
    } else {
      limit["requests_per_unit"] = policy.requests_per_unit();
    }
    if (!policy.name().empty()) {
      limit["name"] = policy.name();
    }
    for (const conf::RateLimitReplace& replace : policy.replaces()) {
      YAML::Node item;
      item["name"] = replace.name();
      limit["replaces"].push_back(item);
    }
    node["rate_limit"] = limit;
  }
  for (const conf::RateLimitDescriptor& child : descriptor.descriptors()) {
    node["descriptors"].push_back(Descriptor(child));
  }
  if (descriptor.shadow_mode()) {
    node["shadow_mode"] = true;
  }
  if (descriptor.detailed_metric()) {
    node["detailed_metric"] = true;
  }
  if (descriptor.quota_mode()) {
    node["quota_mode"] = true;
  }
  if (descriptor.has_metadata()) {
    google::protobuf::Value metadata;
    *metadata.mutable_struct_value() = descriptor.metadata();
    node["metadata"] = ValueNode(metadata);
  }
  return node;
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> RulesFiles(
    const google::protobuf::RepeatedPtrField<google::protobuf::Any>& resources) {
  std::vector<std::pair<std::string, std::string>> files;
  for (int i = 0; i < resources.size(); ++i) {
    const google::protobuf::Any& any = resources[i];
    if (any.type_url() != kRateLimitConfigType) {
      return absl::InvalidArgumentError(fmt::format("resource {}: of type '{}', not {}", i,
                                                    any.type_url(), kRateLimitConfigType));
    }
    conf::RateLimitConfig config;
    if (!any.UnpackTo(&config)) {
      return absl::InvalidArgumentError(
          fmt::format("resource {}: not a RateLimitConfig (it cannot be decoded)", i));
    }
    YAML::Node root;
    root["domain"] = config.domain();
    for (const conf::RateLimitDescriptor& descriptor : config.descriptors()) {
      root["descriptors"].push_back(Descriptor(descriptor));
    }
    YAML::Emitter out;
    out << root;
    files.emplace_back(config.name().empty() ? fmt::format("resource {}", i) : config.name(),
                       out.c_str());
  }
  return files;
}

}  // namespace sluice::server::xds
