#include "server/grpc/metadata.h"

#include <string>
#include <utility>

#include "fmt/format.h"
#include "google/protobuf/util/json_util.h"
#include "spdlog/spdlog.h"

namespace sluice::server {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

// `from` into `into`: keys `into` lacks are added; objects under a key both have are merged.
void Merge(const Struct& from, Struct& into) {
  for (const auto& [key, value] : from.fields()) {
    auto& fields = *into.mutable_fields();
    const auto found = fields.find(key);
    if (found == fields.end()) {
      fields[key] = value;
    } else if (found->second.has_struct_value() && value.has_struct_value()) {
      Merge(value.struct_value(), *found->second.mutable_struct_value());
    }
  }
}

Value Text(std::string text) {
  Value value;
  value.set_string_value(std::move(text));
  return value;
}

Value Number(double number) {
  Value value;
  value.set_number_value(number);
  return value;
}

// A limit override as their Go server prints it (prototext, whose spacing its authors keep
// unstable on purpose; this is the form of their build at the commit we compare with).
std::string LimitText(
    const envoy::extensions::common::ratelimit::v3::RateLimitDescriptor::RateLimitOverride& limit) {
  std::string text;
  if (limit.requests_per_unit() != 0) {
    text = fmt::format("requests_per_unit:{}", limit.requests_per_unit());
  }
  if (limit.unit() != envoy::type::v3::UNKNOWN) {
    text += fmt::format("{}unit:{}", text.empty() ? "" : "  ",
                        envoy::type::v3::RateLimitUnit_Name(limit.unit()));
  }
  return text;
}

Value Descriptor(const envoy::extensions::common::ratelimit::v3::RateLimitDescriptor& descriptor) {
  Value value;
  auto& fields = *value.mutable_struct_value()->mutable_fields();
  auto& entries = *fields["entries"].mutable_list_value();
  for (const auto& entry : descriptor.entries()) {
    *entries.add_values() = Text(entry.key() + "=" + entry.value());
  }
  if (descriptor.has_limit()) {
    fields["limit"] = Text(LimitText(descriptor.limit()));
  }
  if (descriptor.has_hits_addend()) {
    fields["hitsAddend"] = Number(static_cast<double>(descriptor.hits_addend().value()));
  }
  return value;
}

}  // namespace

Struct DynamicMetadata(const envoy::service::ratelimit::v3::RateLimitRequest& request,
                       const std::vector<DescriptorResult>& results) {
  Struct metadata;
  auto& fields = *metadata.mutable_fields();
  fields["domain"] = Text(request.domain());
  auto& descriptors = *fields["descriptors"].mutable_list_value();
  for (const auto& descriptor : request.descriptors()) {
    *descriptors.add_values() = Descriptor(descriptor);
  }
  if (request.hits_addend() != 0) {
    fields["hitsAddend"] = Number(request.hits_addend());
  }
  Struct passed;
  for (const DescriptorResult& result : results) {
    if (result.unlimited || result.over_limit || result.metadata_json.empty()) {
      continue;
    }
    Struct rule;
    // The rules loader wrote it from YAML; a failure here is a bug of ours, not the caller's.
    if (const auto status =
            google::protobuf::util::JsonStringToMessage(result.metadata_json, &rule);
        !status.ok()) {
      spdlog::error("a rule's metadata is not a JSON object: {}", status.ToString());
      continue;
    }
    Merge(rule, passed);
  }
  if (passed.fields_size() > 0) {
    *fields["metadata"].mutable_struct_value() = std::move(passed);
  }
  return metadata;
}

}  // namespace sluice::server
