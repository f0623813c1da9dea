#pragma once

// H2Tls: TLS for the h2 engine (--grpc-engine h2 with --grpc-tls-*), by OpenSSL through Asio:
// the same files and checks as grpc++'s listener (listener.h's GrpcTlsOptions), ALPN "h2"
// (a client that does not offer it is refused at the handshake, as HTTP/2 over TLS requires),
// TLS 1.2 or later; with a client CA, a client certificate it signed is required; with a
// client SAN, a client whose certificate does not name it is closed after the handshake
// (tls::CertificateNames, as grpc++'s engine decides it). A renewed pair that passes the
// checks (CertificateWatch) becomes a new context, which the next handshake uses;
// connections already open keep theirs.
//
// Thread-safe: every loop asks for the context in force.

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "boost/asio/ssl/context.hpp"
#include <openssl/ssl.h>

#include "server/grpc/certificate_watch.h"
#include "server/grpc/listener.h"

namespace sluice::server {

class H2Tls {
 public:
  // Reads and checks the files and starts watching them. InvalidArgument as
  // GrpcServerCredentials (naming the file and the fault).
  static absl::StatusOr<std::unique_ptr<H2Tls>> Start(const GrpcTlsOptions& tls);

  // The context a new connection's handshake uses (the last pair that passed).
  std::shared_ptr<boost::asio::ssl::context> context() const;

  // Whether the client of a finished handshake on `ssl` may be served: it agreed to "h2" by
  // ALPN, and its certificate names the client SAN, when there is one.
  bool Admits(SSL* ssl) const;

 private:
  explicit H2Tls(std::string client_san) : client_san_(std::move(client_san)) {}
  // A context for `pem` put in force.
  absl::Status Serve(const tls::Pem& pem, bool verify_clients);

  const std::string client_san_;
  mutable std::mutex mutex_;
  std::shared_ptr<boost::asio::ssl::context> context_;  // Guarded.
  std::unique_ptr<CertificateWatch> watch_;             // Destroyed first: it calls Serve.
};

}  // namespace sluice::server
