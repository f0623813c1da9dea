#pragma once

// The Envoy rate limit API in-process for tests: a gRPC server on a free loopback port and a
// stub that talks to it.

#include <memory>

#include "absl/status/statusor.h"
#include "fmt/format.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

#include "server/grpc/envoy_service.h"

namespace sluice::testing {

struct LocalGrpc {
  LocalGrpc() = default;
  LocalGrpc(LocalGrpc&&) = default;
  LocalGrpc& operator=(LocalGrpc&&) = default;
  ~LocalGrpc() {
    if (server) {
      server->Shutdown();
    }
  }

  server::GrpcServer server;
  std::unique_ptr<envoy::service::ratelimit::v3::RateLimitService::Stub> stub;
};

// Serves `envoy` on 127.0.0.1 and connects a stub to it.
inline absl::StatusOr<LocalGrpc> StartLocalGrpc(server::EnvoyGrpcService& envoy) {
  int port = 0;
  absl::StatusOr<server::GrpcServer> server = server::StartGrpcServer("127.0.0.1:0", envoy, port);
  if (!server.ok()) {
    return server.status();
  }
  LocalGrpc local;
  local.server = *std::move(server);
  local.stub = envoy::service::ratelimit::v3::RateLimitService::NewStub(
      grpc::CreateChannel(fmt::format("127.0.0.1:{}", port), grpc::InsecureChannelCredentials()));
  return local;
}

}  // namespace sluice::testing
