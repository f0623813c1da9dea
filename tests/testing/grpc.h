#pragma once

// The Envoy rate limit API in-process for tests: a gRPC server on a free loopback port and a
// stub that talks to it. The server's engine is TestGrpcEngine(): ctest runs each gRPC test
// binary once per engine, naming it in SLUICE_TEST_GRPC_ENGINE (tests/CMakeLists.txt).

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "fmt/format.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

#include "server/grpc/envoy_service.h"
#include "server/grpc/grpc_server.h"

namespace sluice::testing {

// The engine SLUICE_TEST_GRPC_ENGINE names ("grpcpp" or "h2"); grpc++'s when it is not set.
inline server::GrpcEngineOptions TestGrpcEngine() {
  const char* name = std::getenv("SLUICE_TEST_GRPC_ENGINE");
  const std::optional<server::GrpcEngine> engine =
      server::ParseGrpcEngine(name == nullptr ? "grpcpp" : name);
  if (!engine) {
    std::fprintf(stderr, "SLUICE_TEST_GRPC_ENGINE=%s is not grpcpp or h2\n", name);
    std::abort();
  }
  return {.engine = *engine, .threads = 2};
}

inline bool TestingH2() { return TestGrpcEngine().engine == server::GrpcEngine::kH2; }

struct LocalGrpc {
  LocalGrpc() = default;
  LocalGrpc(LocalGrpc&&) = default;
  LocalGrpc& operator=(LocalGrpc&&) = default;

  server::GrpcServer server;
  std::unique_ptr<envoy::service::ratelimit::v3::RateLimitService::Stub> stub;
};

// Serves `envoy` on 127.0.0.1 and connects a stub to it.
inline absl::StatusOr<LocalGrpc> StartLocalGrpc(server::EnvoyGrpcService& envoy) {
  int port = 0;
  absl::StatusOr<server::GrpcServer> server =
      server::StartGrpcServer("127.0.0.1:0", envoy, port, {}, TestGrpcEngine());
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
