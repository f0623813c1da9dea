// RedisStore reaching Redis other than by plain TCP: through a unix socket (unix://, with a
// database), and over TLS (rediss://) with certificates the test makes: the server verified
// by its CA and its name or address, a client certificate where Redis asks for one, a cluster
// over TLS; each time decisions through the transport, and a reconnection after redis-server
// restarts. And the errors: each names the file or the server that is wrong.

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sluice/redis_store.h"
#include "tests/redis/fixtures.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/tls.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using ::testing::HasSubstr;
using testing::kEpoch;
using testing::MustLimit;
using testing::MustStore;
using testing::OptionsFor;
using testing::RedisServer;
using namespace std::chrono_literals;

const Limit kLimit = MustLimit({.limit = 3, .period = 1h});

// Three decisions on a fresh key go through Redis: 2, 1, 0 remaining, and the key is there.
void ExpectDecidesThrough(RedisStore& redis, RedisServer& server, const std::string& key,
                          int database = 0) {
  for (int64_t remaining : {2, 1, 0}) {
    absl::StatusOr<Decision> d = redis.Decide(kLimit, key, 1, At(kEpoch));
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->remaining, remaining);
  }
  testing::Client client(server.port());
  client.Run({"SELECT", std::to_string(database)});
  testing::Reply exists = client.Run({"EXISTS", redis.RedisKey(kLimit, key)});
  ASSERT_TRUE(exists);
  EXPECT_EQ(exists->integer, 1);
}

// Redis restarted (empty: no persistence): decisions fail while it is gone, then the store
// connects again on its own and decides in the new one.
void ExpectReconnectsAfterRestart(RedisStore& redis, RedisServer& server) {
  ExpectDecidesThrough(redis, server, "before");
  server.Stop();
  absl::StatusOr<Decision> gone = redis.Decide(kLimit, "gone", 1, At(kEpoch));
  EXPECT_TRUE(absl::IsUnavailable(gone.status()) || absl::IsDeadlineExceeded(gone.status()))
      << gone.status();
  server.Start();
  // A watchdog, not a measure: the backoff is at most 250 ms.
  for (int i = 0; i < 12000 && redis.Stats().connections_ready == 0; ++i) {
    std::this_thread::sleep_for(5ms);
  }
  ExpectDecidesThrough(redis, server, "after");
  EXPECT_GT(redis.Stats().reconnects, 0u);
}

// ---------------------------------------------------------------------------------------------
// unix://

TEST(RedisUnixSocketTest, DecidesThroughTheSocketInItsDatabase) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = MustStore(OptionsFor(server.unix_url() + "?db=3"));
  ExpectDecidesThrough(*redis, server, "k", 3);
  testing::Client client(server.port());
  testing::Reply in_db0 = client.Run({"EXISTS", redis->RedisKey(kLimit, "k")});
  EXPECT_EQ(in_db0->integer, 0);
}

TEST(RedisUnixSocketTest, ReconnectsAfterRedisRestarts) {
  RedisServer server;
  std::unique_ptr<RedisStore> redis = MustStore(OptionsFor(server.unix_url()));
  ExpectReconnectsAfterRestart(*redis, server);
}

TEST(RedisUnixSocketTest, AuthenticatesWithThePasswordOfTheUrl) {
  RedisServer server({"--requirepass", "s3cret"});
  std::unique_ptr<RedisStore> redis =
      MustStore(OptionsFor(fmt::format("unix://:s3cret@{}", server.socket())));
  absl::StatusOr<Decision> d = redis->Decide(kLimit, "k", 1, At(kEpoch));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->remaining, 2);
}

TEST(RedisUnixSocketTest, ASocketThatIsNotThereIsNamed) {
  RedisServer server;
  const std::string missing = (server.dir() / "missing.sock").string();
  RedisStoreOptions options = OptionsFor("unix://" + missing);
  options.timeout = 300ms;
  std::unique_ptr<RedisStore> redis = MustStore(options);
  absl::StatusOr<Decision> d = redis->Decide(kLimit, "k", 1, At(kEpoch));
  EXPECT_TRUE(absl::IsUnavailable(d.status()) || absl::IsDeadlineExceeded(d.status()))
      << d.status();
  if (absl::IsUnavailable(d.status())) {
    EXPECT_THAT(d.status().message(),
                HasSubstr(fmt::format("cannot connect to unix:{}: No such file", missing)));
  }
}

// ---------------------------------------------------------------------------------------------
// rediss://

class RedisTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { certs_ = new testing::TestCertificates(); }
  static void TearDownTestSuite() {
    delete certs_;
    certs_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(certs_->ok()); }

  // A redis-server with TLS on a port of its own beside its plaintext one (which the test's
  // own client uses), showing `cert`'s certificate; asking clients for one of the CA's when
  // `client_certificates`.
  static std::unique_ptr<RedisServer> TlsServer(int tls_port, const std::string& cert = "server",
                                                bool client_certificates = false,
                                                std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--tls-port",         std::to_string(tls_port),
                                     "--tls-cert-file",    certs_->Cert(cert),
                                     "--tls-key-file",     certs_->Key(cert),
                                     "--tls-ca-cert-file", certs_->Cert("ca"),
                                     "--tls-auth-clients", client_certificates ? "yes" : "no"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<RedisServer>(args);
  }

  static RedisStoreOptions TlsOptions(const std::string& host, int tls_port) {
    RedisStoreOptions options = OptionsFor(fmt::format("rediss://{}:{}", host, tls_port));
    EXPECT_TRUE(options.tls.enabled);
    options.tls.ca_file = certs_->Cert("ca");
    return options;
  }

  // The error a store with `options` gets, once its connection has been refused.
  static std::string Refusal(RedisStoreOptions options) {
    options.timeout = 500ms;
    std::unique_ptr<RedisStore> redis = MustStore(options);
    absl::StatusOr<Decision> d = redis->Decide(kLimit, "k", 1, At(kEpoch));
    for (int i = 0; i < 20 && absl::IsDeadlineExceeded(d.status()); ++i) {
      d = redis->Decide(kLimit, "k", 1, At(kEpoch));  // Refused before the next try ends.
    }
    EXPECT_TRUE(absl::IsUnavailable(d.status())) << d.status();
    return std::string(d.status().message());
  }

  static inline testing::TestCertificates* certs_ = nullptr;
};

TEST_F(RedisTlsTest, DecidesOverTlsByAddressOrName) {
  const int port = testing::FreePort();
  std::unique_ptr<RedisServer> server = TlsServer(port);
  for (const char* host : {"127.0.0.1", "localhost"}) {
    std::unique_ptr<RedisStore> redis = MustStore(TlsOptions(host, port));
    ExpectDecidesThrough(*redis, *server, std::string("k-") + host);
  }
}

TEST_F(RedisTlsTest, ReconnectsAfterRedisRestarts) {
  const int port = testing::FreePort();
  std::unique_ptr<RedisServer> server = TlsServer(port);
  std::unique_ptr<RedisStore> redis = MustStore(TlsOptions("127.0.0.1", port));
  ExpectReconnectsAfterRestart(*redis, *server);
}

TEST_F(RedisTlsTest, AServerNamedOtherwiseIsRefusedUnlessHostnamesAreNotVerified) {
  const int port = testing::FreePort();
  std::unique_ptr<RedisServer> server = TlsServer(port, "elsewhere");
  EXPECT_THAT(Refusal(TlsOptions("127.0.0.1", port)),
              HasSubstr(fmt::format("TLS handshake with Redis at 127.0.0.1:{} failed: "
                                    "certificate verify failed",
                                    port)));
  EXPECT_THAT(Refusal(TlsOptions("127.0.0.1", port)), HasSubstr("IP address mismatch"));
  EXPECT_THAT(Refusal(TlsOptions("localhost", port)), HasSubstr("hostname mismatch"));
  RedisStoreOptions options = TlsOptions("127.0.0.1", port);
  options.tls.verify_hostname = false;
  std::unique_ptr<RedisStore> redis = MustStore(options);
  ExpectDecidesThrough(*redis, *server, "k");
}

TEST_F(RedisTlsTest, AServerOfAnotherCaIsRefusedEvenWithoutHostnames) {
  const int port = testing::FreePort();
  std::unique_ptr<RedisServer> server = TlsServer(port);
  RedisStoreOptions options = TlsOptions("127.0.0.1", port);
  options.tls.ca_file = certs_->Cert("other-ca");
  options.tls.verify_hostname = false;
  // OpenSSL's reason depends on whether Redis sends its CA with its certificate.
  EXPECT_THAT(Refusal(options),
              HasSubstr(fmt::format("TLS handshake with Redis at 127.0.0.1:{} failed: "
                                    "certificate verify failed",
                                    port)));
}

TEST_F(RedisTlsTest, ShowsAClientCertificateWhereRedisAsksForOne) {
  const int port = testing::FreePort();
  std::unique_ptr<RedisServer> server = TlsServer(port, "server", /*client_certificates=*/true);
  // TLS 1.3 ends the client's handshake before the server has checked its certificate:
  // Redis's refusal arrives as the first read's error.
  EXPECT_THAT(Refusal(TlsOptions("127.0.0.1", port)),
              HasSubstr(fmt::format("Redis at 127.0.0.1:{}", port)));
  EXPECT_THAT(Refusal(TlsOptions("127.0.0.1", port)),
              HasSubstr("does Redis want a client certificate?"));
  RedisStoreOptions options = TlsOptions("127.0.0.1", port);
  options.tls.cert_file = certs_->Cert("other-client");
  options.tls.key_file = certs_->Key("other-client");
  EXPECT_THAT(Refusal(options), HasSubstr("does Redis refuse this client certificate?"));
  options.tls.cert_file = certs_->Cert("client");
  options.tls.key_file = certs_->Key("client");
  std::unique_ptr<RedisStore> redis = MustStore(options);
  ExpectDecidesThrough(*redis, *server, "k");
}

TEST_F(RedisTlsTest, FilesThatAreWrongAreRefusedByCreateNamingThem) {
  auto error = [](const RedisTlsOptions& tls) {
    RedisStoreOptions options = OptionsFor("rediss://127.0.0.1:1");
    const bool enabled = options.tls.enabled;
    options.tls = tls;
    options.tls.enabled = enabled && tls.enabled;
    absl::StatusOr<std::unique_ptr<RedisStore>> store = RedisStore::Create(options);
    EXPECT_TRUE(absl::IsInvalidArgument(store.status())) << store.status();
    return std::string(store.status().message());
  };
  const std::string missing = (certs_->dir() / "missing.pem").string();
  EXPECT_THAT(error({.enabled = true, .ca_file = missing}),
              HasSubstr(fmt::format("Redis TLS CA file '{}': cannot read it", missing)));
  EXPECT_THAT(error({.enabled = true,
                     .cert_file = certs_->Cert("client"),
                     .key_file = certs_->Key("server")}),
              HasSubstr(fmt::format("key file '{}': is not the key of the certificate in '{}'",
                                    certs_->Key("server"), certs_->Cert("client"))));
  EXPECT_THAT(error({.enabled = true, .cert_file = certs_->Cert("client")}),
              HasSubstr("give both or neither"));
  EXPECT_THAT(error({.enabled = false, .ca_file = certs_->Cert("ca")}),
              HasSubstr("its URL is not rediss://"));
}

// Redis Cluster over TLS (tls-cluster yes): the nodes speak TLS among themselves too, and
// CLUSTER SLOTS asked over TLS names their TLS ports, which the store follows.
TEST_F(RedisTlsTest, ClusterOverTlsDecidesOnEveryNode) {
  std::vector<std::unique_ptr<RedisServer>> nodes;
  std::vector<int> tls_ports;
  std::string create = "redis-cli --cluster create";
  for (int i = 0; i < 3; ++i) {
    // With tls-cluster, the bus listens 10000 above the TLS port: both must be valid and free.
    int port = testing::FreePort();
    while (port == 0 || port + 10000 > 65535 || !testing::PortIsFree(port + 10000)) {
      port = testing::FreePort();
    }
    tls_ports.push_back(port);
    nodes.push_back(TlsServer(tls_ports.back(), "server", false,
                              {"--tls-cluster", "yes", "--cluster-enabled", "yes",
                               "--cluster-config-file", "nodes.conf"}));
    create += " 127.0.0.1:" + std::to_string(nodes.back()->port());
  }
  ASSERT_EQ(std::system((create + " --cluster-replicas 0 --cluster-yes >/dev/null").c_str()), 0);
  for (auto& node : nodes) {
    testing::Client client(node->port());
    for (int tries = 0; tries < 1000; ++tries) {
      testing::Reply info = client.Run({"CLUSTER", "INFO"});
      if (info && std::string(info->str).find("cluster_state:ok") != std::string::npos) {
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
  }
  RedisStoreOptions options =
      OptionsFor(fmt::format("rediss+cluster://127.0.0.1:{}", tls_ports[0]));
  options.tls.ca_file = certs_->Cert("ca");
  std::unique_ptr<RedisStore> redis = MustStore(options);
  for (int k = 0; k < 30; ++k) {
    for (int64_t remaining : {2, 1}) {
      absl::StatusOr<Decision> d = redis->Decide(kLimit, fmt::format("key{}", k), 1, At(kEpoch));
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_EQ(d->remaining, remaining);
    }
  }
  for (auto& node : nodes) {  // 30 keys in random slots: each master holds some.
    testing::Client client(node->port());
    EXPECT_GT(client.Run({"DBSIZE"})->integer, 0);
  }
}

}  // namespace
}  // namespace sluice
