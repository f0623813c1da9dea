// Daemon's gRPC listener: Envoy's rate limit service on the engine --grpc-engine names
// (server/grpc/grpc_server.h).

#include <utility>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

#include "server/daemon/daemon.h"
#include "server/daemon/environment_values.h"

namespace sluice::server {

absl::Status Daemon::StartGrpc(const Settings& settings, HeaderOptions envoy_headers, int threads) {
  envoy_ = std::make_unique<EnvoyGrpcService>(
      *service_, EnvoyOptions{.response_headers = flags_.response_headers,
                              .headers = std::move(envoy_headers),
                              .dynamic_metadata = flags_.dynamic_metadata,
                              .metrics = &metrics_});
  const std::optional<GrpcEngine> engine = ParseGrpcEngine(flags_.grpc_engine);
  if (!engine) {  // CLI11 checks it; the environment's value is checked here.
    return absl::InvalidArgumentError(
        fmt::format("--grpc-engine: '{}' is not grpcpp or h2", flags_.grpc_engine));
  }
  int port = 0;
  absl::StatusOr<GrpcServer> grpc_server =
      StartGrpcServer(env::JoinHostPort(settings.grpc.host, settings.grpc.port), *envoy_, port,
                      flags_.grpc_tls, GrpcEngineOptions{.engine = *engine, .threads = threads});
  if (!grpc_server.ok()) {  // Taken since it was tried, or refused for its TLS files.
    return grpc_server.status();
  }
  grpc_server_ = *std::move(grpc_server);
  spdlog::info("sluiced serving Envoy's rate limit API on grpc://{}:{}{}{}{}", settings.grpc.host,
               port,
               !flags_.grpc_tls.enabled()               ? ""
               : flags_.grpc_tls.client_ca_file.empty() ? " over TLS"
                                                        : " over TLS, client certificates required",
               flags_.shadow_mode ? " in shadow mode (never OVER_LIMIT overall)" : "",
               *engine == GrpcEngine::kH2
                   ? fmt::format(" (engine h2: HTTP/2 on {} event loop(s) of its own)", threads)
                   : std::string());
  return absl::OkStatus();
}

}  // namespace sluice::server
