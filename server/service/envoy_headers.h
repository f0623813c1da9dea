#pragma once

// The RateLimit headers of an answer of Envoy's API (response_headers_to_add), the same over
// gRPC and over POST /json: which descriptor's status they tell, chosen as envoyproxy/ratelimit
// chooses it, and the headers in the format of --ratelimit-headers (draft-06 under their
// LIMIT_*_HEADER names by default, as theirs with LIMIT_RESPONSE_HEADERS_ENABLED).
//
// Pure functions: thread-safe.

#include <vector>

#include "server/service/rate_limit_headers.h"
#include "server/service/service.h"

namespace sluice::server {

// As envoyproxy/ratelimit: the last OVER_LIMIT status outside quota mode, else the first with
// the fewest remaining (shadow mode and quota mode included; an unlimited descriptor never).
// nullptr when none.
const DescriptorResult* EnvoyClosest(const std::vector<DescriptorResult>& results);

// Adds the headers of `results` in `options.format`. draft-06 (theirs): the closest status's
// three figures as the response tells them (its requests_per_unit, its limit_remaining, the
// seconds to its window's end, told even where no wait helps). sluice's formats: every
// descriptor's limit, the closest's figures, shadow-mode limits left out, as the HTTP API
// tells a decision. `now`: the wall clock (x-ratelimit's epoch reset).
void AddEnvoyHeaders(const std::vector<DescriptorResult>& results, const HeaderOptions& options,
                     Timestamp now, AddHeader add);

}  // namespace sluice::server
