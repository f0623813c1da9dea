#include "server/grpc/h2_service.h"

#include <memory>
#include <string>
#include <utility>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

#include "src/core/status.h"

namespace sluice::server {
namespace {

namespace rls = envoy::service::ratelimit::v3;
using google::protobuf::internal::WireFormatLite;

constexpr std::string_view kShouldRateLimit =
    "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
constexpr std::string_view kHealthCheck = "/grpc.health.v1.Health/Check";

// grpc.health.v1's messages are two fields, read and written here rather than generated: a
// grpc/health/v1 package of our own protos would shadow Python's grpc package on the tests'
// PYTHONPATH. HealthCheckRequest {string service = 1;}; HealthCheckResponse {ServingStatus
// status = 1;}, SERVING 1, NOT_SERVING 2.
std::optional<std::string> HealthService(std::string_view request) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(request.data()),
                                            static_cast<int>(request.size()));
  std::string service;
  while (const uint32_t tag = in.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) == 1 &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::ReadString(&in, &service)) {
        return std::nullopt;
      }
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return std::nullopt;
    }
  }
  if (!in.ConsumedEntireMessage()) {
    return std::nullopt;
  }
  return service;
}

}  // namespace

void H2GrpcService::Call(std::string_view path, std::string_view request, Done done) {
  if (path == kShouldRateLimit) {
    ShouldRateLimit(request, std::move(done));
  } else if (path == kHealthCheck) {
    HealthCheck(request, std::move(done));
  } else {
    std::move(done)({GrpcCode::kUnimplemented, "unknown method " + std::string(path)});
  }
}

void H2GrpcService::ShouldRateLimit(std::string_view request, Done done) {
  // Held until the decision is written into the response (Decide's contract).
  struct Call {
    rls::RateLimitRequest request;
    rls::RateLimitResponse response;
  };
  auto call = std::make_unique<Call>();
  if (!call->request.ParseFromArray(request.data(), static_cast<int>(request.size()))) {
    std::move(done)({GrpcCode::kInternal, "the request is not a RateLimitRequest"});
    return;
  }
  Call& held = *call;
  envoy_.Decide(
      held.request, held.response,
      [call = std::move(call), done = std::move(done)](const absl::Status& status) mutable {
        GrpcReply reply{.code = GrpcCodeOf(status)};
        if (status.ok()) {
          call->response.SerializeToString(&reply.body);
        } else {
          reply.message = std::string(internal::Message(status));
        }
        std::move(done)(std::move(reply));
      });
}

void H2GrpcService::HealthCheck(std::string_view request, Done done) const {
  const std::optional<std::string> service = HealthService(request);
  if (!service) {
    std::move(done)({GrpcCode::kInternal, "the request is not a HealthCheckRequest"});
    return;
  }
  if (!service->empty()) {
    std::move(done)({GrpcCode::kNotFound, "unknown service"});
    return;
  }
  const bool serving = serving_.load(std::memory_order_relaxed);
  // Field 1, varint: the tag byte 0x08, then 1 or 2.
  std::move(done)({.body = std::string{'\x08', serving ? '\x01' : '\x02'}});
}

}  // namespace sluice::server
