#include "server/grpc/listener.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "fmt/format.h"

#include "src/tls/pem_files.h"

namespace sluice::server {
namespace {

struct AddrInfoFree {
  void operator()(addrinfo* a) const { freeaddrinfo(a); }
};

// "host:port" or "[v6]:port" split; a host of "" stays "".
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

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> GrpcServerCredentials(
    const GrpcTlsOptions& tls) {
  if (!tls.enabled()) {
    if (!tls.client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "gRPC TLS: a client CA (--grpc-tls-client-ca) verifies clients over TLS, which needs "
          "the server's own certificate and key (--grpc-tls-cert, --grpc-tls-key)");
    }
    return grpc::InsecureServerCredentials();
  }
  absl::StatusOr<tls::Pem> pem = tls::ReadPemFiles(
      {.cert_file = tls.cert_file, .key_file = tls.key_file, .ca_file = tls.client_ca_file},
      "gRPC TLS");
  if (!pem.ok()) {
    return pem.status();
  }
  grpc::SslServerCredentialsOptions options(
      pem->ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                      : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = std::move(pem->ca);
  options.pem_key_cert_pairs.push_back(
      {.private_key = std::move(pem->key), .cert_chain = std::move(pem->cert_chain)});
  return grpc::SslServerCredentials(options);
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
