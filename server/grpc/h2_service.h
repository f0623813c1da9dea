#pragma once

// H2GrpcService: what the gRPC engine on our own loops (h2_connection.h) serves, by path:
// Envoy's rate limit service (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit,
// through EnvoyGrpcService::Decide, the same call grpc++ makes) and gRPC's health service
// (grpc.health.v1.Health/Check), as grpc++'s default health service answers it: the service
// "" SERVING or NOT_SERVING as sluiced's health says, any other name NOT_FOUND. Anything else
// is UNIMPLEMENTED.
//
// Thread-safe: every loop calls it.

#include <atomic>
#include <string_view>

#include "server/grpc/envoy_service.h"
#include "server/grpc/h2_connection.h"

namespace sluice::server {

class H2GrpcService final : public GrpcUnaryService {
 public:
  // `envoy` must outlive this.
  explicit H2GrpcService(EnvoyGrpcService& envoy) : envoy_(envoy) {}

  void Call(std::string_view path, std::string_view request, Done done) override;

  // What Health/Check answers for the service "" (grpc++'s SetServingStatus).
  void SetServing(bool serving) { serving_.store(serving, std::memory_order_relaxed); }

 private:
  void ShouldRateLimit(std::string_view request, Done done);
  void HealthCheck(std::string_view request, Done done) const;

  EnvoyGrpcService& envoy_;
  std::atomic<bool> serving_{true};
};

}  // namespace sluice::server
