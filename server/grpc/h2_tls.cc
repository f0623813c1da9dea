#include "server/grpc/h2_tls.h"

#include <string_view>
#include <utility>

#include "fmt/format.h"
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "src/tls/pem_files.h"

namespace sluice::server {
namespace {

namespace ssl = boost::asio::ssl;

// ALPN: "h2", or the handshake fails (a client that cannot speak HTTP/2 over TLS).
int SelectH2(SSL*, const unsigned char** out, unsigned char* out_length, const unsigned char* in,
             unsigned int in_length, void*) {
  static constexpr unsigned char kH2[] = {2, 'h', '2'};
  unsigned char* chosen = nullptr;
  if (SSL_select_next_proto(&chosen, out_length, kH2, sizeof kH2, in, in_length) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

// The peer's leaf certificate as PEM text; empty when it showed none.
std::string PeerPem(SSL* ssl) {
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (cert == nullptr) {
    return {};
  }
  std::string pem;
  if (BIO* bio = BIO_new(BIO_s_mem()); bio != nullptr) {
    if (PEM_write_bio_X509(bio, cert) == 1) {
      char* data = nullptr;
      const long n = BIO_get_mem_data(bio, &data);
      pem.assign(data, static_cast<size_t>(n));
    }
    BIO_free(bio);
  }
  X509_free(cert);
  return pem;
}

}  // namespace

absl::StatusOr<std::unique_ptr<H2Tls>> H2Tls::Start(const GrpcTlsOptions& tls) {
  // The same checks of the options as grpc++'s engine.
  if (absl::Status s = CheckGrpcTlsOptions(tls); !s.ok()) {
    return s;
  }
  std::unique_ptr<H2Tls> h2(new H2Tls(tls.client_san));
  const bool verify_clients = !tls.client_ca_file.empty();
  absl::StatusOr<std::unique_ptr<CertificateWatch>> watch = CertificateWatch::Start(
      {.cert_file = tls.cert_file, .key_file = tls.key_file, .ca_file = tls.client_ca_file},
      tls.reload_seconds, [raw = h2.get(), verify_clients](const tls::Pem& pem) {
        return raw->Serve(pem, verify_clients);
      });
  if (!watch.ok()) {
    return watch.status();
  }
  h2->watch_ = *std::move(watch);
  return h2;
}

absl::Status H2Tls::Serve(const tls::Pem& pem, bool verify_clients) {
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                           ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                           ssl::context::no_tlsv1_1 | ssl::context::single_dh_use,
                       ec);
  context->use_certificate_chain(boost::asio::buffer(pem.cert_chain), ec);
  if (!ec) {
    context->use_private_key(boost::asio::buffer(pem.key), ssl::context::pem, ec);
  }
  if (!ec && verify_clients) {
    context->add_certificate_authority(boost::asio::buffer(pem.ca), ec);
    if (!ec) {
      context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert, ec);
    }
  }
  if (ec) {
    return absl::InvalidArgumentError(fmt::format("OpenSSL refused them: {}", ec.message()));
  }
  SSL_CTX_set_alpn_select_cb(context->native_handle(), SelectH2, nullptr);
  // HTTP/2 forbids renegotiation. A session id context lets a TLS 1.2 client that verified
  // us resume its session when client certificates are asked (without one OpenSSL fails
  // every such resumption).
  SSL_CTX_set_options(context->native_handle(), SSL_OP_NO_RENEGOTIATION);
  static constexpr unsigned char kSessionContext[] = "sluiced-grpc";
  SSL_CTX_set_session_id_context(context->native_handle(), kSessionContext,
                                 sizeof kSessionContext - 1);
  std::lock_guard lock(mutex_);
  context_ = std::move(context);
  return absl::OkStatus();
}

std::shared_ptr<boost::asio::ssl::context> H2Tls::context() const {
  std::lock_guard lock(mutex_);
  return context_;
}

bool H2Tls::Admits(SSL* ssl) const {
  // A client that offered no ALPN at all is never asked (OpenSSL calls SelectH2 only for an
  // offer): it has agreed to nothing, and is refused here.
  const unsigned char* agreed = nullptr;
  unsigned length = 0;
  SSL_get0_alpn_selected(ssl, &agreed, &length);
  if (std::string_view(reinterpret_cast<const char*>(agreed), length) != "h2") {
    return false;
  }
  return client_san_.empty() || tls::CertificateNames(PeerPem(ssl), client_san_);
}

}  // namespace sluice::server
