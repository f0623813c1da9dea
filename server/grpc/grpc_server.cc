#include "server/grpc/grpc_server.h"

#include <charconv>
#include <chrono>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "boost/asio/ip/address.hpp"
#include "fmt/format.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

#include "server/grpc/h2_service.h"
#include "server/grpc/h2_tls.h"
#include "server/http/server.h"

namespace sluice::server {
namespace {

// grpc++'s own server.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcpp(
    const std::string& address, EnvoyGrpcService& service, int& port,
    const std::shared_ptr<grpc::ServerCredentials>& credentials) {
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
  builder.AddListeningPort(address, credentials, &port);
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
  return server;
}

// HOST:PORT or [IPv6]:PORT, with an IP address for HOST (the h2 engine resolves no names).
absl::StatusOr<std::pair<std::string, uint16_t>> IpAndPort(const std::string& address) {
  const auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(fmt::format("gRPC address '{}': {}", address, why));
  };
  const auto [host, port_text] = SplitAddress(address);
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  if (ec) {
    return bad("the h2 engine needs an IP address, not a name");
  }
  unsigned port = 0;
  const char* end = port_text.data() + port_text.size();
  if (const auto [at, error] = std::from_chars(port_text.data(), end, port);
      port_text.empty() || error != std::errc{} || at != end || port > 65535) {
    return bad("the port is not a number from 0 to 65535");
  }
  return std::pair{host, static_cast<uint16_t>(port)};
}

}  // namespace

std::optional<GrpcEngine> ParseGrpcEngine(std::string_view name) {
  if (name == "grpcpp") {
    return GrpcEngine::kGrpcpp;
  }
  if (name == "h2") {
    return GrpcEngine::kH2;
  }
  return std::nullopt;
}

std::string_view GrpcEngineName(GrpcEngine engine) {
  return engine == GrpcEngine::kH2 ? "h2" : "grpcpp";
}

GrpcServer::GrpcServer() = default;
GrpcServer::GrpcServer(GrpcServer&&) noexcept = default;
// Not the default: that would replace the members in their order, freeing the options and
// the service the running loops of h2_ read before h2_ itself is stopped and replaced.
GrpcServer& GrpcServer::operator=(GrpcServer&& other) noexcept {
  if (this != &other) {
    Shutdown(Micros{0});
    h2_.reset();  // Last first, as the destructor.
    h2_service_.reset();
    h2_tls_.reset();
    h2_options_.reset();
    grpcpp_.reset();
    certificates_ = std::move(other.certificates_);
    grpcpp_ = std::move(other.grpcpp_);
    h2_options_ = std::move(other.h2_options_);
    h2_tls_ = std::move(other.h2_tls_);
    h2_service_ = std::move(other.h2_service_);
    h2_ = std::move(other.h2_);
  }
  return *this;
}
GrpcServer::~GrpcServer() { Shutdown(Micros{0}); }

void GrpcServer::Shutdown(Micros drain) {
  if (grpcpp_ != nullptr) {
    grpcpp_->Shutdown(std::chrono::system_clock::now() + drain);
  }
  if (h2_ != nullptr) {
    h2_service_->SetServing(false);  // As grpc++'s Shutdown says.
    h2_->Stop(drain);
  }
}

void GrpcServer::SetServing(bool serving) {
  if (grpcpp_ != nullptr && grpcpp_->GetHealthCheckService() != nullptr) {
    grpcpp_->GetHealthCheckService()->SetServingStatus(serving);
  }
  if (h2_service_ != nullptr) {
    h2_service_->SetServing(serving);
  }
}

absl::StatusOr<GrpcServer> StartGrpcServer(const std::string& address, EnvoyGrpcService& service,
                                           int& port, const GrpcTlsOptions& tls,
                                           const GrpcEngineOptions& engine) {
  GrpcServer server;
  if (engine.engine == GrpcEngine::kH2) {
    absl::StatusOr<std::pair<std::string, uint16_t>> where = IpAndPort(address);
    if (!where.ok()) {
      return where.status();
    }
    if (absl::Status s = CheckGrpcTlsOptions(tls); !s.ok()) {
      return s;
    }
    if (tls.enabled()) {
      absl::StatusOr<std::unique_ptr<H2Tls>> h2_tls = H2Tls::Start(tls);
      if (!h2_tls.ok()) {
        return h2_tls.status();
      }
      server.h2_tls_ = *std::move(h2_tls);
    }
    server.h2_options_ = std::make_unique<H2Options>(engine.h2);
    server.h2_service_ = std::make_unique<H2GrpcService>(service);
    server.h2_ = std::make_unique<HttpServer>(
        H2ConnectionMaker(*server.h2_service_, *server.h2_options_, server.h2_tls_.get()),
        HttpServerOptions{.protocol = "gRPC",
                          .host = where->first,
                          .port = where->second,
                          .threads = engine.threads});
    if (absl::Status s = server.h2_->Start(); !s.ok()) {
      absl::Status why = WhyNotListening(address);  // Said as grpc++'s engine says it.
      return why.ok() ? s : why;
    }
    port = server.h2_->port();
    return server;
  }
  absl::StatusOr<GrpcCredentials> credentials = GrpcServerCredentials(tls);
  if (!credentials.ok()) {
    return credentials.status();
  }
  absl::StatusOr<std::unique_ptr<grpc::Server>> grpcpp =
      StartGrpcpp(address, service, port, credentials->credentials);
  if (!grpcpp.ok()) {
    return grpcpp.status();
  }
  server.certificates_ = std::move(credentials->certificates);
  server.grpcpp_ = *std::move(grpcpp);
  return server;
}

}  // namespace sluice::server
