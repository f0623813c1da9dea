#pragma once

// What StartGrpcServer (envoy_service.h) needs around gRPC's own listener: the TLS settings,
// read into gRPC's server credentials with every file checked first and then watched, and,
// when gRPC cannot listen, the reason (gRPC only logs it).
//
// Functions of files and sockets: thread-safe.

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"

#include "server/grpc/certificate_watch.h"

namespace sluice::server {

// TLS on the gRPC listener, as envoyproxy/ratelimit's GRPC_SERVER_USE_TLS,
// GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY, GRPC_CLIENT_TLS_CACERT and GRPC_CLIENT_TLS_SAN.
// All empty: plaintext.
struct GrpcTlsOptions {
  std::string cert_file;  // The server's certificate chain (PEM), leaf first.
  std::string key_file;   // Its private key (PEM, unencrypted). With cert_file, or neither.
  // CAs (PEM) that sign the clients' certificates: set, every client must show a certificate
  // they signed (mutual TLS), and one without is refused at the handshake.
  std::string client_ca_file;
  // With client_ca_file: a name a client's certificate must also carry among its subject
  // alternative names, a DNS name or an IP address (their GRPC_CLIENT_TLS_SAN); empty: any
  // certificate the CAs signed is served.
  std::string client_san;
  // How often the files are looked at again for a renewed certificate (CertificateWatch).
  unsigned reload_seconds = 1;

  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

// What a gRPC listener is given: its credentials and, over TLS, the watch that keeps the
// certificate they serve current. The watch must outlive the server.
struct GrpcCredentials {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::unique_ptr<CertificateWatch> certificates;  // Null in plaintext.
};

// InvalidArgument when `tls`'s options do not go together: a client SAN without a client CA,
// a client CA without the server's own certificate and key. Both engines ask it.
absl::Status CheckGrpcTlsOptions(const GrpcTlsOptions& tls);

// Plaintext credentials for `tls` not enabled; else TLS ones from its files, read and checked
// now. InvalidArgument naming a file that is missing, unreadable or holds the wrong thing, a
// key that is not the certificate's, a client CA without a certificate of the server's, or a
// client SAN without a client CA. The files are watched while serving (CertificateWatch): a
// certificate renewed in them is served from the next handshake on, a broken or mismatched
// pair never (the last good one stays).
absl::StatusOr<GrpcCredentials> GrpcServerCredentials(const GrpcTlsOptions& tls);

// "host:port" or "[v6]:port" split into its host (brackets taken off) and port; a host of ""
// stays "", and an address with no colon is all host.
std::pair<std::string, std::string> SplitAddress(std::string_view address);

// Why `address` (HOST:PORT, [IPv6]:PORT) cannot be listened on, asked of the system by binding
// it as gRPC does (SO_REUSEADDR, no SO_REUSEPORT): "Address already in use" when another
// process listens there. Unavailable naming the address and the reason; OK if it can be bound
// now after all.
absl::Status WhyNotListening(const std::string& address);

}  // namespace sluice::server
