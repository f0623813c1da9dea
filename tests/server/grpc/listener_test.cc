// StartGrpcServer's listener: TLS and mutual TLS with certificates the test makes (a client
// with the CA is served; one without a certificate, or with one of another CA, is refused
// when client certificates are required; plaintext to a TLS port fails), TLS files that are
// wrong refused at start naming the file, renewed files served without a restart (broken ones
// never), and a port in use refused rather than shared.

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/ssl.hpp"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"

#include "server/grpc/envoy_service.h"
#include "server/grpc/grpc_server.h"
#include "sluice/memory_store.h"
#include "tests/testing/grpc.h"
#include "tests/testing/rules.h"
#include "tests/testing/tls.h"

namespace sluice::server {
namespace {

namespace rls = envoy::service::ratelimit::v3;
using ::testing::HasSubstr;

constexpr char kRules[] = R"(
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
)";

class GrpcListenerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(certs_.ok());
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
  }

  // A server on 127.0.0.1 (`port` 0: any free one) with `tls`; its port in port_.
  absl::StatusOr<GrpcServer> Start(const GrpcTlsOptions& tls, int port = 0) {
    return StartGrpcServer(fmt::format("127.0.0.1:{}", port), envoy_, port_, tls,
                           testing::TestGrpcEngine());
  }

  GrpcTlsOptions ServerTls(bool client_certificates) const {
    return {.cert_file = certs_.Cert("server"),
            .key_file = certs_.Key("server"),
            .client_ca_file = client_certificates ? certs_.Cert("ca") : ""};
  }

  // Client credentials that trust the test's CA, showing `client`'s certificate unless empty.
  std::shared_ptr<grpc::ChannelCredentials> Tls(const std::string& client = "") const {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = testing::TestCertificates::Read(certs_.Cert("ca"));
    if (!client.empty()) {
      options.pem_cert_chain = testing::TestCertificates::Read(certs_.Cert(client));
      options.pem_private_key = testing::TestCertificates::Read(certs_.Key(client));
    }
    return grpc::SslCredentials(options);
  }

  // One ShouldRateLimit on a fresh channel and connection to port_, checking the server's
  // certificate names `host`.
  grpc::Status Ask(const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                   const std::string& host = "localhost") const {
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride(host);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // Never a connection of an earlier Ask.
    const auto stub = rls::RateLimitService::NewStub(
        grpc::CreateCustomChannel(fmt::format("127.0.0.1:{}", port_), credentials, args));
    rls::RateLimitRequest request;
    request.set_domain("api");
    auto* entry = request.add_descriptors()->add_entries();
    entry->set_key("user");
    entry->set_value("alice");
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    rls::RateLimitResponse response;
    grpc::Status status = stub->ShouldRateLimit(&context, request, &response);
    if (status.ok()) {
      EXPECT_EQ(response.overall_code(), rls::RateLimitResponse::OK);
      EXPECT_EQ(response.statuses(0).current_limit().requests_per_unit(), 100U);
    }
    return status;
  }

  // StartGrpcServer's error for `tls`, failing the test if it starts.
  std::string Refusal(const GrpcTlsOptions& tls) {
    absl::StatusOr<GrpcServer> server = Start(tls);
    EXPECT_TRUE(absl::IsInvalidArgument(server.status())) << server.status();
    return std::string(server.status().message());
  }

  testing::TestCertificates certs_;
  MemoryStore store_;
  Metrics metrics_;
  RateLimitService service_{store_, SystemClock(), metrics_};
  EnvoyGrpcService envoy_{service_, EnvoyOptions{}};
  int port_ = 0;
};

TEST_F(GrpcListenerTest, ServesOverTlsAndRefusesPlaintext) {
  absl::StatusOr<GrpcServer> server = Start(ServerTls(false));
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(Ask(Tls()).ok());
  EXPECT_TRUE(Ask(Tls("client")).ok());  // A certificate nobody asked for changes nothing.
  const grpc::Status plaintext = Ask(grpc::InsecureChannelCredentials());
  EXPECT_EQ(plaintext.error_code(), grpc::StatusCode::UNAVAILABLE) << plaintext.error_message();
  server->Shutdown(Micros{0});
}

TEST_F(GrpcListenerTest, MutualTlsServesOnlyClientsWithACertificateOfItsCa) {
  absl::StatusOr<GrpcServer> server = Start(ServerTls(true));
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(Ask(Tls("client")).ok());
  for (const char* client : {"", "other-client"}) {
    const grpc::Status refused = Ask(Tls(client));
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE)
        << "client '" << client << "': " << refused.error_message();
  }
  EXPECT_FALSE(Ask(grpc::InsecureChannelCredentials()).ok());
  server->Shutdown(Micros{0});
}

// envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN: a certificate of the client CA must also name it.
TEST_F(GrpcListenerTest, AClientSanServesOnlyCertificatesThatNameIt) {
  GrpcTlsOptions tls = ServerTls(true);
  tls.client_san = "client.sluice.test";
  absl::StatusOr<GrpcServer> server = Start(tls);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(Ask(Tls("client")).ok());
  // Of the same CA, naming another (its common name is the SAN's: that is not looked at).
  for (const char* client : {"intruder", "other-client", ""}) {
    const grpc::Status refused = Ask(Tls(client));
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE)
        << "client '" << client << "': " << refused.error_message();
  }
  server->Shutdown(Micros{0});
  EXPECT_THAT(Refusal({.cert_file = certs_.Cert("server"),
                       .key_file = certs_.Key("server"),
                       .client_san = "client.sluice.test"}),
              HasSubstr("which need a client CA"));
}

TEST_F(GrpcListenerTest, TlsFilesThatAreWrongAreRefusedNamingTheFile) {
  const std::string missing = (certs_.dir() / "missing.crt").string();
  GrpcTlsOptions tls = ServerTls(false);
  tls.cert_file = missing;
  EXPECT_THAT(Refusal(tls), HasSubstr(fmt::format(
                                "certificate file '{}': cannot read it: No such file", missing)));

  tls = ServerTls(false);
  tls.key_file = certs_.Key("client");  // Another certificate's key.
  EXPECT_THAT(Refusal(tls),
              HasSubstr(fmt::format("key file '{}': is not the key of the certificate in '{}'",
                                    certs_.Key("client"), certs_.Cert("server"))));

  tls = ServerTls(false);
  tls.cert_file = certs_.Key("server");  // A key where the certificate should be.
  EXPECT_THAT(Refusal(tls), HasSubstr(fmt::format("certificate file '{}': holds no PEM certificate",
                                                  certs_.Key("server"))));

  tls = ServerTls(true);
  tls.client_ca_file = certs_.Key("ca");
  EXPECT_THAT(Refusal(tls),
              HasSubstr(fmt::format("CA file '{}': holds no PEM certificate", certs_.Key("ca"))));

  const std::string encrypted = (certs_.dir() / "encrypted.key").string();
  ASSERT_EQ(std::system(fmt::format("openssl ec -in '{}' -aes128 -passout pass:x -out '{}' "
                                    ">/dev/null 2>&1",
                                    certs_.Key("server"), encrypted)
                            .c_str()),
            0);
  tls = ServerTls(false);
  tls.key_file = encrypted;
  EXPECT_THAT(Refusal(tls),
              HasSubstr(fmt::format("key file '{}': the key is encrypted", encrypted)));

  EXPECT_THAT(Refusal({.cert_file = certs_.Cert("server")}),
              HasSubstr("give both or neither (the key file is missing)"));
  EXPECT_THAT(Refusal({.client_ca_file = certs_.Cert("ca")}),
              HasSubstr("needs the server's own certificate and key"));
}

// A certificate renewed in its files (as cert-manager or certbot renew it) is served from the
// next handshake on, without a restart, as envoyproxy/ratelimit's CertProvider serves it; a
// pair caught half written or a broken file is never served: the last good pair stays.
TEST_F(GrpcListenerTest, RenewedCertificateFilesAreServedAndBrokenOnesNever) {
  const std::string cert = (certs_.dir() / "live.crt").string();
  const std::string key = (certs_.dir() / "live.key").string();
  // Each file replaced whole (a rename), as renewal tools do; the pair is not replaced at once.
  const auto install = [](const std::string& text, const std::string& path) {
    std::ofstream(path + ".new") << text;
    std::filesystem::rename(path + ".new", path);
  };
  const auto file = [](const std::string& path) { return testing::TestCertificates::Read(path); };
  install(file(certs_.Cert("server")), cert);
  install(file(certs_.Key("server")), key);
  absl::StatusOr<GrpcServer> server =
      Start({.cert_file = cert, .key_file = key, .reload_seconds = 1});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(Ask(Tls(), "localhost").ok());
  EXPECT_FALSE(Ask(Tls(), "elsewhere.example").ok());  // The client checks the name.

  // Renewed: the CA's certificate for elsewhere.example, its key first (a moment where the
  // key is not the certificate's).
  install(file(certs_.Key("elsewhere")), key);
  install(file(certs_.Cert("elsewhere")), cert);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!Ask(Tls(), "elsewhere.example").ok()) {
    // sluice-timing: watchdog (the watcher reads the files every second)
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the renewed certificate never served";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_FALSE(Ask(Tls(), "localhost").ok());

  // Broken: a key that is not the certificate's, then no certificate at all. Every handshake
  // over a few of the watcher's readings still shows the last good pair.
  for (const auto& [cert_text, key_text] :
       {std::pair{file(certs_.Cert("elsewhere")), file(certs_.Key("server"))},
        std::pair{std::string("not a certificate\n"), file(certs_.Key("elsewhere"))}}) {
    install(key_text, key);
    install(cert_text, cert);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    int asked = 0;
    while (std::chrono::steady_clock::now() < until) {
      ASSERT_TRUE(Ask(Tls(), "elsewhere.example").ok()) << "after " << asked << " handshakes";
      ++asked;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  server->Shutdown(Micros{0});
}

// gRPC binds with SO_REUSEPORT unless told not to; then a second sluiced on the port would
// share it, and each would count only its share of Envoy's traffic.
TEST_F(GrpcListenerTest, ASecondServerOnThePortIsRefusedAndTheFirstKeepsServing) {
  absl::StatusOr<GrpcServer> first = Start({});
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = port_;
  absl::StatusOr<GrpcServer> second = Start({}, port);
  EXPECT_TRUE(absl::IsUnavailable(second.status())) << second.status();
  EXPECT_EQ(second.status().message(),
            fmt::format("cannot serve gRPC on 127.0.0.1:{}: Address already in use", port));
  port_ = port;
  EXPECT_TRUE(Ask(grpc::InsecureChannelCredentials()).ok());
  first->Shutdown(Micros{0});
}

// A TLS handshake with the server offering `protocols` by ALPN (in its wire form): the
// protocol agreed, or why the handshake failed.
std::string HandshakeOffering(int port, const std::string& ca_file, std::string_view protocols) {
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ssl::context context(asio::ssl::context::tls_client);
  context.load_verify_file(ca_file);
  asio::ssl::stream<asio::ip::tcp::socket> stream(io, context);
  boost::system::error_code ec;
  stream.lowest_layer().connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)},
                                ec);
  SSL_set_alpn_protos(stream.native_handle(),
                      reinterpret_cast<const unsigned char*>(protocols.data()),
                      static_cast<unsigned>(protocols.size()));
  stream.handshake(asio::ssl::stream_base::client, ec);
  if (ec) {
    return "failed: " + ec.message();
  }
  const unsigned char* agreed = nullptr;
  unsigned length = 0;
  SSL_get0_alpn_selected(stream.native_handle(), &agreed, &length);
  return std::string(reinterpret_cast<const char*>(agreed), length);
}

// HTTP/2 over TLS is agreed by ALPN: the h2 engine agrees to "h2" and refuses a client that
// offers only HTTP/1.1 at the handshake.
TEST_F(GrpcListenerTest, TheH2EngineAgreesH2ByAlpnAndNothingElse) {
  if (!testing::TestingH2()) {
    GTEST_SKIP() << "grpc++'s ALPN is grpc++'s";
  }
  absl::StatusOr<GrpcServer> server = Start(ServerTls(false));
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(HandshakeOffering(port_, certs_.Cert("ca"), "\x08http/1.1\x02h2"), "h2");
  EXPECT_THAT(HandshakeOffering(port_, certs_.Cert("ca"), "\x08http/1.1"),
              ::testing::StartsWith("failed: "));
  EXPECT_TRUE(Ask(Tls()).ok());  // And serves after.
  server->Shutdown(Micros{0});
}

}  // namespace
}  // namespace sluice::server
