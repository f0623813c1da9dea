#include "server/grpc/listener.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"

#include "src/tls/pem_files.h"

namespace sluice::server {
namespace {

struct AddrInfoFree {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};

// 0 if `a` can be bound now as gRPC binds, else the errno of the step that failed.
int TryBind(const addrinfo& a) {
  const int fd = socket(a.ai_family, a.ai_socktype, a.ai_protocol);
  if (fd < 0) {
    return errno;
  }
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  const int error = bind(fd, a.ai_addr, a.ai_addrlen) == 0 ? 0 : errno;
  close(fd);
  return error;
}

// A client certificate, already verified against the client CAs during the handshake, is
// accepted only if it names `san` (tls::CertificateNames), as envoyproxy/ratelimit's
// GRPC_CLIENT_TLS_SAN. Called on gRPC's threads; holds only a constant.
class ClientSanVerifier final : public grpc::experimental::ExternalCertificateVerifier {
 public:
  explicit ClientSanVerifier(std::string san) : san_(std::move(san)) {}

  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)> /*callback*/, grpc::Status* sync_status) override {
    const grpc::string_ref pem = request->peer_cert();
    *sync_status =
        tls::CertificateNames(std::string_view(pem.data(), pem.size()), san_)
            ? grpc::Status::OK
            : grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                           fmt::format("the client's certificate does not name '{}'", san_));
    return true;  // Decided now: `callback` is not called.
  }
  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest*) override {}

 private:
  const std::string san_;
};

}  // namespace

absl::Status CheckGrpcTlsOptions(const GrpcTlsOptions& tls) {
  if (!tls.client_san.empty() && tls.client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "gRPC TLS: a client SAN (--grpc-tls-client-san) is checked in client certificates, "
        "which need a client CA (--grpc-tls-client-ca)");
  }
  if (!tls.enabled() && !tls.client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "gRPC TLS: a client CA (--grpc-tls-client-ca) verifies clients over TLS, which needs "
        "the server's own certificate and key (--grpc-tls-cert, --grpc-tls-key)");
  }
  return absl::OkStatus();
}

absl::StatusOr<GrpcCredentials> GrpcServerCredentials(const GrpcTlsOptions& tls) {
  if (absl::Status s = CheckGrpcTlsOptions(tls); !s.ok()) {
    return s;
  }
  if (!tls.enabled()) {
    return GrpcCredentials{.credentials = grpc::InsecureServerCredentials()};
  }
  absl::StatusOr<std::unique_ptr<CertificateWatch>> watch = CertificateWatch::Start(
      {.cert_file = tls.cert_file, .key_file = tls.key_file, .ca_file = tls.client_ca_file},
      tls.reload_seconds);
  if (!watch.ok()) {
    return watch.status();
  }
  grpc::experimental::TlsServerCredentialsOptions options((*watch)->provider());
  options.watch_identity_key_cert_pairs();
  if (tls.client_ca_file.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  if (!tls.client_san.empty()) {
    options.set_certificate_verifier(
        grpc::experimental::ExternalCertificateVerifier::Create<ClientSanVerifier>(tls.client_san));
  }
  return GrpcCredentials{.credentials = grpc::experimental::TlsServerCredentials(options),
                         .certificates = *std::move(watch)};
}

std::pair<std::string, std::string> SplitAddress(std::string_view address) {
  const size_t colon = address.rfind(':');
  std::string_view host = address.substr(0, colon);
  const std::string_view port =
      colon == std::string_view::npos ? std::string_view() : address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return {std::string(host), std::string(port)};
}

absl::Status WhyNotListening(const std::string& address) {
  const auto [host, port] = SplitAddress(address);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int error =
          getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
      error != 0) {
    return absl::UnavailableError(
        fmt::format("cannot serve gRPC on {}: {}", address, gai_strerror(error)));
  }
  const std::unique_ptr<addrinfo, AddrInfoFree> addresses(found);
  for (const addrinfo* a = addresses.get(); a != nullptr; a = a->ai_next) {
    if (const int error = TryBind(*a); error != 0) {
      return absl::UnavailableError(
          fmt::format("cannot serve gRPC on {}: {}", address, std::strerror(error)));
    }
  }
  return absl::OkStatus();
}

}  // namespace sluice::server
