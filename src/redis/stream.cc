#include "src/redis/stream.h"

#include <string>

#include "boost/asio/connect.hpp"
#include "boost/asio/ip/address.hpp"
#include "fmt/format.h"
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "src/tls/pem_files.h"

namespace sluice::internal {
namespace {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;

bool IsAddress(const std::string& host) {
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ssl::context>> RedisTlsContext(const RedisTlsOptions& options) {
  if (!options.enabled) {
    if (!options.ca_file.empty() || !options.cert_file.empty() || !options.key_file.empty()) {
      return absl::InvalidArgumentError(
          "TLS files are given for Redis, but its URL is not rediss:// (or rediss+cluster://)");
    }
    return nullptr;
  }
  absl::StatusOr<tls::Pem> pem = tls::ReadPemFiles(
      {.cert_file = options.cert_file, .key_file = options.key_file, .ca_file = options.ca_file},
      "Redis TLS");
  if (!pem.ok()) {
    return pem.status();
  }
  auto context = std::make_unique<ssl::context>(ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION);
  context->set_verify_mode(ssl::verify_peer);
  boost::system::error_code ec;
  if (pem->ca.empty()) {
    // The system's CAs, read now from its bundle (/etc/ssl/certs/ca-certificates.crt on
    // Debian), rather than looked up in its directory during a handshake on the I/O thread.
    const char* bundle = X509_get_default_cert_file();
    if (SSL_CTX_load_verify_locations(context->native_handle(), bundle, nullptr) != 1) {
      return absl::InvalidArgumentError(fmt::format(
          "Redis TLS: no CA file is given and the system's CA bundle '{}' cannot be read: give "
          "the CA that signed Redis's certificate",
          bundle));
    }
  } else {
    context->add_certificate_authority(asio::buffer(pem->ca), ec);
  }
  if (!ec && !pem->cert_chain.empty()) {
    context->use_certificate_chain(asio::buffer(pem->cert_chain), ec);
    if (!ec) {
      context->use_private_key(asio::buffer(pem->key), ssl::context::pem, ec);
    }
  }
  if (ec) {  // The files were checked: this is OpenSSL refusing what it read once already.
    return absl::InvalidArgumentError(fmt::format("Redis TLS: {}", ec.message()));
  }
  return context;
}

RedisStream::RedisStream(asio::io_context& io, const RedisEndpoint& endpoint, ssl::context* tls,
                         bool verify_hostname)
    : endpoint_(endpoint),
      verify_hostname_(verify_hostname),
      socket_(MakeSocket(io, endpoint, tls)),
      resolver_(io) {}

RedisStream::Socket RedisStream::MakeSocket(asio::io_context& io, const RedisEndpoint& endpoint,
                                            ssl::context* tls) {
  if (!endpoint.socket.empty()) {
    return Socket(std::in_place_type<Unix::socket>, io);
  }
  if (tls != nullptr) {
    return Socket(std::in_place_type<Tls>, io, *tls);
  }
  return Socket(std::in_place_type<Tcp::socket>, io);
}

RedisStream::Tcp::socket& RedisStream::TcpSocket() {
  if (Tls* tls = std::get_if<Tls>(&socket_)) {
    return tls->next_layer();
  }
  return std::get<Tcp::socket>(socket_);
}

void RedisStream::Connect(absl::AnyInvocable<void(absl::Status)> done) {
  if (Unix::socket* unix_socket = std::get_if<Unix::socket>(&socket_)) {
    unix_socket->async_connect(
        Unix::endpoint(endpoint_.socket),
        [self = shared_from_this(), done = std::move(done)](boost::system::error_code ec) mutable {
          done(ec ? absl::UnavailableError(fmt::format("cannot connect to {}: {}",
                                                       RedisEndpointName(self->endpoint_),
                                                       ec.message()))
                  : absl::OkStatus());
        });
    return;
  }
  resolver_.async_resolve(
      endpoint_.host, std::to_string(endpoint_.port),
      [self = shared_from_this(), done = std::move(done)](
          boost::system::error_code ec, Tcp::resolver::results_type results) mutable {
        if (ec) {
          done(absl::UnavailableError(
              fmt::format("cannot resolve {}: {}", self->endpoint_.host, ec.message())));
          return;
        }
        asio::async_connect(
            self->TcpSocket(), results,
            [self, done = std::move(done)](boost::system::error_code ec,
                                           const Tcp::endpoint&) mutable {
              if (ec) {
                done(absl::UnavailableError(fmt::format(
                    "cannot connect to {}: {}", RedisEndpointName(self->endpoint_), ec.message())));
                return;
              }
              boost::system::error_code ignored;
              self->TcpSocket().set_option(Tcp::no_delay(true), ignored);
              if (std::holds_alternative<Tls>(self->socket_)) {
                self->Handshake(std::move(done));
              } else {
                done(absl::OkStatus());
              }
            });
      });
}

// The TLS handshake, the server verified: its chain by the context's CAs, and, unless told
// not to, its name (or address) against the host connected to.
void RedisStream::Handshake(absl::AnyInvocable<void(absl::Status)> done) {
  Tls& tls = std::get<Tls>(socket_);
  SSL* handle = tls.native_handle();
  const bool address = IsAddress(endpoint_.host);
  if (!address) {
    SSL_set_tlsext_host_name(handle, endpoint_.host.c_str());  // SNI, for names only.
  }
  if (verify_hostname_) {
    X509_VERIFY_PARAM* param = SSL_get0_param(handle);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (address) {
      X509_VERIFY_PARAM_set1_ip_asc(param, endpoint_.host.c_str());
    } else {
      X509_VERIFY_PARAM_set1_host(param, endpoint_.host.c_str(), endpoint_.host.size());
    }
  }
  tls.async_handshake(ssl::stream_base::client, [self = shared_from_this(), done = std::move(done)](
                                                    boost::system::error_code ec) mutable {
    if (!ec) {
      done(absl::OkStatus());
      return;
    }
    std::string why = ec.message();
    const long verify = SSL_get_verify_result(std::get<Tls>(self->socket_).native_handle());
    if (verify != X509_V_OK) {
      why = fmt::format("{}: {}", why, X509_verify_cert_error_string(verify));
    }
    done(absl::UnavailableError(fmt::format("TLS handshake with Redis at {} failed: {}",
                                            RedisEndpointName(self->endpoint_), why)));
  });
}

void RedisStream::Close() {
  boost::system::error_code ignored;
  resolver_.cancel();
  if (Unix::socket* unix_socket = std::get_if<Unix::socket>(&socket_)) {
    unix_socket->close(ignored);
  } else {
    TcpSocket().close(ignored);
  }
}

}  // namespace sluice::internal
