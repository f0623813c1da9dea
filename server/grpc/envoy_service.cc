#include "server/grpc/envoy_service.h"

#include <limits>
#include <utility>

#include "fmt/format.h"

#include "server/grpc/grpc_wire.h"
#include "server/grpc/metadata.h"
#include "server/service/envoy_headers.h"
#include "sluice/duration.h"
#include "src/core/status.h"

namespace sluice::server {
namespace {

namespace rls = envoy::service::ratelimit::v3;

constexpr int64_t kMicrosPerSecond = 1'000'000;

// A decision's error as grpc++'s status (grpc_wire.h's GrpcCodeOf: a store too slow is
// UNAVAILABLE).
grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) {
    return grpc::Status::OK;
  }
  return {static_cast<grpc::StatusCode>(GrpcCodeOf(status)),
          std::string(internal::Message(status))};
}

// envoy.type.v3.RateLimitUnit (no WEEK) as sluice's Unit.
Unit FromEnvoyUnit(envoy::type::v3::RateLimitUnit unit) {
  const int value = static_cast<int>(unit);
  return value >= 1 && value <= 6 ? static_cast<Unit>(value) : Unit::kUnknown;
}

CheckRequest FromProto(const rls::RateLimitRequest& request) {
  CheckRequest check{.domain = request.domain(),
                     .cost = request.hits_addend() == 0 ? 1 : request.hits_addend()};
  check.descriptors.reserve(static_cast<size_t>(request.descriptors_size()));
  for (const auto& descriptor : request.descriptors()) {
    RequestDescriptor& out = check.descriptors.emplace_back();
    out.entries.reserve(static_cast<size_t>(descriptor.entries_size()));
    for (const auto& entry : descriptor.entries()) {
      out.entries.push_back({.key = entry.key(), .value = entry.value()});
    }
    if (descriptor.has_limit()) {
      out.limit = LimitOverride{.requests_per_unit = descriptor.limit().requests_per_unit(),
                                .unit = FromEnvoyUnit(descriptor.limit().unit())};
    }
    if (descriptor.has_hits_addend()) {
      // Beyond what any limit holds it is denied anyway: bounded, it is denied the same way.
      out.cost = static_cast<int64_t>(
          std::min<uint64_t>(descriptor.hits_addend().value(), Limit::kMaxCount));
    }
  }
  return check;
}

}  // namespace

EnvoyGrpcService::EnvoyGrpcService(RateLimitService& service, EnvoyOptions options)
    : service_(service), options_(options) {}

Clock& EnvoyGrpcService::WallClock() const {
  return options_.clock != nullptr ? *options_.clock : SystemClock();
}

grpc::ServerUnaryReactor* EnvoyGrpcService::ShouldRateLimit(grpc::CallbackServerContext* context,
                                                            const rls::RateLimitRequest* request,
                                                            rls::RateLimitResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // gRPC keeps `request` and `response` until Finish.
  Decide(*request, *response,
         [reactor](const absl::Status& status) { reactor->Finish(ToGrpc(status)); });
  return reactor;
}

void EnvoyGrpcService::Decide(const rls::RateLimitRequest& request,
                              rls::RateLimitResponse& response, Done done) {
  // The answer may come after this returns: the clock is held by pointer (it outlives the
  // service), the start by value.
  Clock* clock = &WallClock();
  const Timestamp start = clock->Now();
  service_.ShouldRateLimitAsync(FromProto(request),
                                [this, &request, &response, clock, start, done = std::move(done)](
                                    absl::StatusOr<std::vector<DescriptorResult>> results) mutable {
                                  if (results.ok()) {
                                    Fill(request, *results, response);
                                  }
                                  if (options_.metrics != nullptr) {
                                    options_.metrics->grpc_calls().Record(clock->Now() - start);
                                  }
                                  std::move(done)(results.status());
                                });
}

void EnvoyGrpcService::Fill(const rls::RateLimitRequest& request,
                            const std::vector<DescriptorResult>& results,
                            rls::RateLimitResponse& response) const {
  for (const DescriptorResult& result : results) {
    rls::RateLimitResponse::DescriptorStatus& status = *response.add_statuses();
    status.set_code(result.over_limit ? rls::RateLimitResponse::OVER_LIMIT
                                      : rls::RateLimitResponse::OK);
    status.set_limit_remaining(result.limit_remaining);
    if (!result.closest) {
      continue;
    }
    rls::RateLimitResponse::RateLimit& current = *status.mutable_current_limit();
    if (result.closest->named) {  // As envoyproxy/ratelimit: rate_limit.name, when given.
      current.set_name(result.closest->name);
    }
    current.set_requests_per_unit(static_cast<uint32_t>(
        std::min<int64_t>(result.closest->nominal, std::numeric_limits<uint32_t>::max())));
    current.set_unit(static_cast<rls::RateLimitResponse::RateLimit::Unit>(result.unit));
    status.mutable_duration_until_reset()->set_seconds(result.until_reset.count() /
                                                       kMicrosPerSecond);
    status.mutable_duration_until_reset()->set_nanos(
        static_cast<int32_t>(result.until_reset.count() % kMicrosPerSecond * 1000));
  }
  if (options_.response_headers) {
    AddEnvoyHeaders(results, options_.headers, WallClock().Now(),
                    [&response](std::string_view name, std::string_view value) {
                      auto& header = *response.add_response_headers_to_add();
                      header.set_key(std::string(name));
                      header.set_value(std::string(value));
                    });
  }
  if (options_.dynamic_metadata) {
    *response.mutable_dynamic_metadata() = DynamicMetadata(request, results);
  }
  response.set_overall_code(service_.OverallOverLimit(results) ? rls::RateLimitResponse::OVER_LIMIT
                                                               : rls::RateLimitResponse::OK);
}

}  // namespace sluice::server
