#include "server/xds/resources.h"

#include "fmt/format.h"
#include "google/protobuf/util/json_util.h"
#include "ratelimit/config/ratelimit/v3/rls_conf.pb.h"
#include "yaml-cpp/yaml.h"

namespace sluice::server::xds {
namespace {

namespace conf = ratelimit::config::ratelimit::v3;

// A field is written only when set, as a file leaves it out: their conversion writes Go's zero
// values, which their loader reads as absent.
absl::StatusOr<YAML::Node> Descriptor(const conf::RateLimitDescriptor& descriptor) {
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
    absl::StatusOr<YAML::Node> inner = Descriptor(child);
    if (!inner.ok()) {
      return inner.status();
    }
    node["descriptors"].push_back(*inner);
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
    std::string json;
    if (!google::protobuf::util::MessageToJsonString(descriptor.metadata(), &json).ok()) {
      return absl::InvalidArgumentError(
          fmt::format("descriptor '{}': its metadata cannot be read", descriptor.key()));
    }
    node["metadata"] = YAML::Load(json);  // JSON is YAML; the text is protobuf's own.
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
      absl::StatusOr<YAML::Node> node = Descriptor(descriptor);
      if (!node.ok()) {
        return absl::InvalidArgumentError(
            fmt::format("resource '{}': {}", config.name(), std::string(node.status().message())));
      }
      root["descriptors"].push_back(*node);
    }
    YAML::Emitter out;
    out << root;
    files.emplace_back(config.name().empty() ? fmt::format("resource {}", i) : config.name(),
                       out.c_str());
  }
  return files;
}

}  // namespace sluice::server::xds
