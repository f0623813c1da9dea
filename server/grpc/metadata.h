#pragma once

// The dynamic metadata envoyproxy/ratelimit returns with RESPONSE_DYNAMIC_METADATA: the
// request (domain, each descriptor's entries as "key=value", its limit override and
// hits_addend, the request's hits_addend) and, under "metadata", the `metadata` of the rules of
// the descriptors within their limits, merged (a key given twice keeps its first value; two
// objects under one key are merged the same way, key by key).
//
// Pure functions: thread-safe.

#include <vector>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "google/protobuf/struct.pb.h"

#include "server/service/service.h"

namespace sluice::server {

google::protobuf::Struct DynamicMetadata(
    const envoy::service::ratelimit::v3::RateLimitRequest& request,
    const std::vector<DescriptorResult>& results);

}  // namespace sluice::server
