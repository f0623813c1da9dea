#pragma once

// The rules an xDS management server pushes, read as the rules files they stand for: each
// resource of type ratelimit.config.ratelimit.v3.RateLimitConfig is one YAML file, named by
// the resource's name, with the fields of envoyproxy/ratelimit's file (their
// ConfigXdsProtoToYaml), so that RuleSet::Parse reads a pushed set exactly as it reads files:
// the same checks, the same errors, the same domains merged or refused as duplicates.
//
// Pure functions: thread-safe.

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "google/protobuf/any.pb.h"
#include "google/protobuf/repeated_ptr_field.h"

namespace sluice::server::xds {

// The type URL of a rules resource.
inline constexpr char kRateLimitConfigType[] =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

// (file name, YAML text) for each resource, in the order sent. InvalidArgument naming the
// resource (by its place, and its name when it could be read) that is of another type or
// cannot be decoded.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> RulesFiles(
    const google::protobuf::RepeatedPtrField<google::protobuf::Any>& resources);

}  // namespace sluice::server::xds
