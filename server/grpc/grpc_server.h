#pragma once

// StartGrpcServer: Envoy's rate limit service and gRPC's health service on a gRPC listener,
// served by one of two engines (--grpc-engine):
//
//   grpcpp  grpc++'s own server (Debian's libgrpc++), on its threads. The default while the
//           other proves itself.
//   h2      HTTP/2 by libnghttp2 on sluiced's own event loops (h2_connection.h), as the HTTP
//           API runs: calls read, decided and answered in one pass of the loop, with no
//           thread hops. h2c (prior knowledge), or TLS with ALPN h2 (h2_tls.h).
//
// Both answer the same calls with the same messages (EnvoyGrpcService::Decide).

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"

#include "server/grpc/certificate_watch.h"
#include "server/grpc/envoy_service.h"
#include "server/grpc/h2_connection.h"
#include "server/grpc/listener.h"
#include "sluice/clock.h"

namespace sluice::server {

class HttpServer;
class H2GrpcService;
class H2Tls;

enum class GrpcEngine { kGrpcpp, kH2 };

// "grpcpp" or "h2"; nullopt for anything else.
std::optional<GrpcEngine> ParseGrpcEngine(std::string_view name);
std::string_view GrpcEngineName(GrpcEngine engine);

struct GrpcEngineOptions {
  GrpcEngine engine = GrpcEngine::kGrpcpp;
  int threads = 1;  // h2: its event loops.
  H2Options h2;
};

// A running gRPC server, of either engine.
class GrpcServer {
 public:
  GrpcServer();
  GrpcServer(GrpcServer&&) noexcept;
  GrpcServer& operator=(GrpcServer&&) noexcept;
  ~GrpcServer();

  explicit operator bool() const { return grpcpp_ != nullptr || h2_ != nullptr; }

  // Takes no new calls, answers those begun for up to `drain` (h2: GOAWAY), then stops.
  void Shutdown(Micros drain);
  // What the health service says of the service "".
  void SetServing(bool serving);

 private:
  friend absl::StatusOr<GrpcServer> StartGrpcServer(const std::string&, EnvoyGrpcService&, int&,
                                                    const GrpcTlsOptions&,
                                                    const GrpcEngineOptions&);
  // grpc++ over TLS: the watch of the certificate files, which outlives the server it feeds.
  std::unique_ptr<CertificateWatch> certificates_;
  std::unique_ptr<grpc::Server> grpcpp_;
  // h2: the options its connections read, its TLS, the service and the loops, destroyed last
  // first.
  std::unique_ptr<H2Options> h2_options_;
  std::unique_ptr<H2Tls> h2_tls_;
  std::unique_ptr<H2GrpcService> h2_service_;
  std::unique_ptr<HttpServer> h2_;
};

// A gRPC server on `address` (HOST:PORT) with `service` and the standard health service, over
// TLS when `tls` says so (listener.h), on `engine`'s engine. `port` receives the port bound
// (for HOST:0). The port is this process's alone (no SO_REUSEPORT). InvalidArgument naming a
// TLS file that is wrong; Unavailable when it cannot listen,
// saying why ("cannot serve gRPC on 127.0.0.1:8081: Address already in use").
absl::StatusOr<GrpcServer> StartGrpcServer(const std::string& address, EnvoyGrpcService& service,
                                           int& port, const GrpcTlsOptions& tls = {},
                                           const GrpcEngineOptions& engine = {});

}  // namespace sluice::server
