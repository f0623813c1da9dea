#include "server/grpc/envoy_service.h"

#include <limits>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "fmt/format.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

#include "server/grpc/metadata.h"
#include "server/service/envoy_headers.h"
#include "sluice/duration.h"
#include "src/core/status.h"

namespace sluice::server {
namespace {

namespace rls = envoy::service::ratelimit::v3;

constexpr int64_t kMicrosPerSecond = 1'000'000;

// A store that did not answer in time (DeadlineExceeded: Redis's --redis-timeout) is the
// service unavailable, as a store that cannot be reached: UNAVAILABLE, which Envoy's
// failure_mode_deny reads. gRPC's DEADLINE_EXCEEDED would say the caller's own deadline passed.
grpc::Status ToGrpc(const absl::Status& status) {
  const std::string message(internal::Message(status));
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      return {grpc::StatusCode::INVALID_ARGUMENT, message};
    case absl::StatusCode::kResourceExhausted:
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, message};
    default:
      return {grpc::StatusCode::UNAVAILABLE, message};
  }
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
  // The answer may come after this returns: the clock is held by pointer (it outlives the
  // service), the start by value.
  Clock* clock = &WallClock();
  const Timestamp start = clock->Now();
  // gRPC keeps `request` and `response` until Finish; the answer may come on the store's thread.
  service_.ShouldRateLimitAsync(
      FromProto(*request), [this, reactor, request, response, clock,
                            start](absl::StatusOr<std::vector<DescriptorResult>> results) {
        if (results.ok()) {
          Fill(*request, *results, *response);
        }
        if (options_.metrics != nullptr) {
          options_.metrics->grpc_calls().Record(clock->Now() - start);
        }
        reactor->Finish(results.ok() ? grpc::Status::OK : ToGrpc(results.status()));
      });
  return reactor;
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

absl::StatusOr<GrpcServer> StartGrpcServer(const std::string& address, EnvoyGrpcService& service,
                                           int& port, const GrpcTlsOptions& tls) {
  absl::StatusOr<GrpcCredentials> credentials = GrpcServerCredentials(tls);
  if (!credentials.ok()) {
    return credentials.status();
  }
#ifdef NDEBUG
  // gRPC's locks are Abseil's Mutex, and Debian builds Abseil without NDEBUG: each lock and
  // unlock would keep a graph of lock order for deadlock detection, under one lock of the
  // whole process (a few percent of a call's CPU, and contention between gRPC's threads).
  // Debug builds keep the detection.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // One process per port, as for HTTP: gRPC's default SO_REUSEPORT would let a second sluiced
  // bind this port too, and the kernel would split Envoy's connections between the two, each
  // counting its share against the whole limit.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(address, credentials->credentials, &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    // gRPC only logs why; ask the system the same question.
    if (absl::Status why = WhyNotListening(address); !why.ok()) {
      return why;
    }
    return absl::UnavailableError(
        fmt::format("cannot serve gRPC on {} (gRPC's log above says why)", address));
  }
  return GrpcServer{.certificates = std::move(credentials->certificates),
                    .server = std::move(server)};
}

}  // namespace sluice::server
