// The sluiced binary asked over gRPC, as Envoy asks it: Envoy's rate limit API and the
// standard health service on the --grpc port (NOT_SERVING while Redis is lost under deny),
// then a clean stop on SIGTERM.
//
//   grpc_integration_test --sluiced build/bin/sluiced   (ctest passes the flag)

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"

#include "tests/testing/redis_server.h"
#include "tests/testing/tls.h"

extern char** environ;

namespace sluice::server {
namespace {

namespace rls = envoy::service::ratelimit::v3;

std::string sluiced_path;  // From --sluiced.

constexpr char kRules[] = R"(
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 2}
)";

// A sluiced process on free ports (it picks them: --http/--grpc 127.0.0.1:0), its log in a
// file, its gRPC port read from the log. `extra`: more flags (--store redis://..., or a --grpc
// of its own).
class SluicedProcess {
 public:
  // `environment`: NAME=VALUE entries added to this process's environment for sluiced.
  explicit SluicedProcess(std::vector<std::string> extra = {},
                          std::vector<std::string> environment = {}) {
    static int started = 0;
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("sluice-grpc-test.{}.{}", static_cast<int>(getpid()), ++started);
    std::filesystem::create_directories(dir_);
    const std::string rules = (dir_ / "rules.yaml").string();
    std::ofstream(rules) << kRules;
    log_ = (dir_ / "sluiced.log").string();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<std::string> args = {sluiced_path,  "--config",  rules, "--http",
                                     "127.0.0.1:0", "--threads", "1"};
    if (std::find(extra.begin(), extra.end(), "--grpc") == extra.end()) {
      args.insert(args.end(), {"--grpc", "127.0.0.1:0"});
    }
    // ctest runs this binary once per engine (tests/CMakeLists.txt).
    if (const char* engine = std::getenv("SLUICE_TEST_GRPC_ENGINE"); engine != nullptr) {
      args.insert(args.end(), {"--grpc-engine", engine});
    }
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& arg : args) {
      argv.push_back(arg.data());
    }
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      envp.push_back(*entry);
    }
    for (std::string& entry : environment) {
      envp.push_back(entry.data());
    }
    envp.push_back(nullptr);
    started_ =
        posix_spawn(&pid_, sluiced_path.c_str(), &actions, nullptr, argv.data(), envp.data()) == 0;
    posix_spawn_file_actions_destroy(&actions);
  }

  ~SluicedProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // The gRPC port from the log, or 0 after 120 s (a watchdog: a loaded machine starts slowly).
  int AwaitGrpcPort() const {
    const std::regex pattern(R"(grpc://127\.0\.0\.1:(\d+))");
    for (int i = 0; started_ && i < 12000; ++i) {
      std::smatch match;
      const std::string log = Log();
      if (std::regex_search(log, match, pattern)) {
        return std::stoi(match[1]);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  }

  std::string Log() const {
    std::stringstream text;
    text << std::ifstream(log_).rdbuf();
    return text.str();
  }

  // Waits until it exits of itself and returns the exit status: -1 if it did not exit
  // normally, or did not exit within 30 s (it is killed then: it is serving).
  int Wait() {
    int status = 0;
    for (int i = 0; waitpid(pid_, &status, WNOHANG) == 0; ++i) {
      if (i == 3000) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        pid_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  // Sends SIGTERM and returns the exit status (-1 if it did not exit normally).
  int Stop() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  std::filesystem::path dir_;
  std::string log_;
  pid_t pid_ = -1;
  bool started_ = false;
};

rls::RateLimitRequest Request(const std::string& address) {
  rls::RateLimitRequest request;
  request.set_domain("edge");
  auto* entry = request.add_descriptors()->add_entries();
  entry->set_key("remote_address");
  entry->set_value(address);
  return request;
}

// grpc.health.v1.Health/Check with an empty HealthCheckRequest: the response's bytes
// (SERVING is field 1 = 1, bytes 08 01; NOT_SERVING 08 02: written by hand, the health .proto
// is not needed for one enum), or the error.
const std::string kServing("\x08\x01", 2);
const std::string kNotServing("\x08\x02", 2);

std::string HealthCheck(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::GenericStub generic(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  grpc::Slice nothing("");  // An empty message is one empty slice, not an empty buffer.
  grpc::ByteBuffer request(&nothing, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  generic.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                    &response, [&](grpc::Status s) {
                      std::lock_guard<std::mutex> lock(mutex);
                      status = std::move(s);
                      done = true;
                      done_cv.notify_one();
                    });
  {
    std::unique_lock<std::mutex> lock(mutex);
    done_cv.wait(lock, [&] { return done; });
  }
  if (!status.ok()) {
    return "error: " + status.error_message();
  }
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) {
    return "error: no response";
  }
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

TEST(GrpcIntegrationTest, EnvoysQuestionsAnsweredByTheBinary) {
  SluicedProcess sluiced;
  const int port = sluiced.AwaitGrpcPort();
  ASSERT_NE(port, 0) << "sluiced did not report its gRPC port";
  const auto channel =
      grpc::CreateChannel(fmt::format("127.0.0.1:{}", port), grpc::InsecureChannelCredentials());
  const auto stub = rls::RateLimitService::NewStub(channel);

  for (const auto expected : {rls::RateLimitResponse::OK, rls::RateLimitResponse::OK,
                              rls::RateLimitResponse::OVER_LIMIT}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    rls::RateLimitResponse response;
    const grpc::Status status = stub->ShouldRateLimit(&context, Request("192.0.2.1"), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.overall_code(), expected);
    EXPECT_EQ(response.statuses(0).current_limit().requests_per_unit(), 2U);
    EXPECT_EQ(response.statuses(0).current_limit().unit(), rls::RateLimitResponse::RateLimit::HOUR);
  }

  // An empty domain is a gRPC error, never an answer with UNKNOWN.
  grpc::ClientContext context;
  rls::RateLimitRequest empty = Request("192.0.2.1");
  empty.set_domain("");
  rls::RateLimitResponse response;
  EXPECT_EQ(stub->ShouldRateLimit(&context, empty, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  EXPECT_EQ(HealthCheck(channel), kServing);

  EXPECT_EQ(sluiced.Stop(), 0);
}

// Two sluiced processes on one Redis answer Envoy from one quota; with Redis gone, the deny
// policy (the default) is a gRPC error, for Envoy's failure_mode_deny to decide.
TEST(GrpcIntegrationTest, TwoServersOnOneRedisShareTheQuota) {
  testing::RedisServer redis;
  // Calls that a loaded machine still answers in time: only Redis gone fails them.
  SluicedProcess a({"--store", redis.url(), "--redis-timeout", "30s"});
  SluicedProcess b({"--store", redis.url(), "--redis-timeout", "30s"});
  std::vector<std::unique_ptr<rls::RateLimitService::Stub>> stubs;
  for (SluicedProcess* sluiced : {&a, &b}) {
    const int port = sluiced->AwaitGrpcPort();
    ASSERT_NE(port, 0) << "sluiced did not report its gRPC port";
    stubs.push_back(rls::RateLimitService::NewStub(grpc::CreateChannel(
        fmt::format("127.0.0.1:{}", port), grpc::InsecureChannelCredentials())));
  }
  auto ask = [&](size_t server, rls::RateLimitResponse& response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return stubs[server]->ShouldRateLimit(&context, Request("198.51.100.7"), &response);
  };
  // 2 per hour: one call on each server, then both say OVER_LIMIT.
  for (const auto& [server, expected] :
       {std::pair{0, rls::RateLimitResponse::OK}, std::pair{1, rls::RateLimitResponse::OK},
        std::pair{0, rls::RateLimitResponse::OVER_LIMIT},
        std::pair{1, rls::RateLimitResponse::OVER_LIMIT}}) {
    rls::RateLimitResponse response;
    const grpc::Status status = ask(static_cast<size_t>(server), response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.overall_code(), expected) << "server " << server;
  }
  redis.Stop();
  rls::RateLimitResponse response;
  const grpc::Status status = ask(0, response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  // Close the channels first: while a client holds an idle connection, sluiced's SIGTERM waits
  // out the whole --drain (5 s) in gRPC's Shutdown (a known gap, noted for issue 6).
  stubs.clear();
  EXPECT_EQ(a.Stop(), 0);
  EXPECT_EQ(b.Stop(), 0);
}

// A Redis that stops answering (frozen) under the deny policy: UNAVAILABLE, as a Redis gone
// is and as docs/redis.md says, never DEADLINE_EXCEEDED (which says the caller's own deadline
// passed).
TEST(GrpcIntegrationTest, ARedisThatDoesNotAnswerInTimeIsUnavailable) {
  testing::RedisServer redis;
  SluicedProcess sluiced({"--store", redis.url(), "--redis-timeout", "200ms"});
  const int port = sluiced.AwaitGrpcPort();
  ASSERT_NE(port, 0) << "sluiced did not report its gRPC port";
  auto stub = rls::RateLimitService::NewStub(
      grpc::CreateChannel(fmt::format("127.0.0.1:{}", port), grpc::InsecureChannelCredentials()));
  auto ask = [&] {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    rls::RateLimitResponse response;
    return stub->ShouldRateLimit(&context, Request("203.0.113.9"), &response);
  };
  const grpc::Status first = ask();
  ASSERT_TRUE(first.ok()) << first.error_message();
  redis.Pause();
  const grpc::Status frozen = ask();  // Sent, then not answered within --redis-timeout.
  redis.Resume();
  EXPECT_EQ(frozen.error_code(), grpc::StatusCode::UNAVAILABLE) << frozen.error_message();
  stub.reset();
  EXPECT_EQ(sluiced.Stop(), 0);
}

// The health service says what /healthcheck says (as envoyproxy/ratelimit's): NOT_SERVING
// while Redis is lost under --redis-on-failure deny, SERVING again once it is back; under
// allow, SERVING throughout (the policy decides).
TEST(GrpcIntegrationTest, TheHealthServiceSaysWhatHealthcheckSays) {
  testing::RedisServer redis;
  SluicedProcess deny({"--store", redis.url(), "--redis-timeout", "1s"});
  SluicedProcess allow({"--store", redis.url(), "--redis-on-failure", "allow"});
  const int deny_port = deny.AwaitGrpcPort();
  const int allow_port = allow.AwaitGrpcPort();
  ASSERT_NE(deny_port * allow_port, 0) << "sluiced did not report its gRPC port";
  auto channel = [](int port) {
    return grpc::CreateChannel(fmt::format("127.0.0.1:{}", port),
                               grpc::InsecureChannelCredentials());
  };
  const auto deny_channel = channel(deny_port);
  const auto allow_channel = channel(allow_port);
  // As it is once it has changed, or after 30 s (a watchdog: it is told every second).
  auto eventually = [&](const std::string& expected) {
    std::string now = HealthCheck(deny_channel);
    for (int i = 0; i < 600 && now != expected; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      now = HealthCheck(deny_channel);
    }
    return now;
  };
  EXPECT_EQ(eventually(kServing), kServing);
  redis.Stop();
  EXPECT_EQ(eventually(kNotServing), kNotServing);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // Told at least once since.
  EXPECT_EQ(HealthCheck(allow_channel), kServing);
  redis.Start();
  EXPECT_EQ(eventually(kServing), kServing);
  EXPECT_EQ(deny.Stop(), 0);
  EXPECT_EQ(allow.Stop(), 0);
}

// Asks `stub` for `address` once; the gRPC status, and the overall code in `code`.
grpc::Status AskOnce(rls::RateLimitService::Stub& stub, const std::string& address,
                     rls::RateLimitResponse::Code& code) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  rls::RateLimitResponse response;
  grpc::Status status = stub.ShouldRateLimit(&context, Request(address), &response);
  code = response.overall_code();
  return status;
}

// The rules' 2 per hour, asked 3 times through `channel`: OK, OK, OVER_LIMIT.
void ExpectTheLimitThrough(const std::shared_ptr<grpc::Channel>& channel,
                           const std::string& address) {
  const auto stub = rls::RateLimitService::NewStub(channel);
  for (const auto expected : {rls::RateLimitResponse::OK, rls::RateLimitResponse::OK,
                              rls::RateLimitResponse::OVER_LIMIT}) {
    rls::RateLimitResponse::Code code{};
    const grpc::Status status = AskOnce(*stub, address, code);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(code, expected);
  }
}

// gRPC's SO_REUSEPORT, left on, let a second sluiced bind the port and take a share of Envoy's
// connections, each server then counting its share against the whole limit.
TEST(GrpcIntegrationTest, ASecondServerOnTheGrpcPortExits2AndTheFirstKeepsAllTheTraffic) {
  SluicedProcess first;
  const int port = first.AwaitGrpcPort();
  ASSERT_NE(port, 0) << "sluiced did not report its gRPC port";
  SluicedProcess second({"--grpc", fmt::format("127.0.0.1:{}", port)});
  EXPECT_EQ(second.Wait(), 2);
  EXPECT_THAT(second.Log(),
              ::testing::HasSubstr(
                  fmt::format("cannot serve gRPC on 127.0.0.1:{}: Address already in use", port)));
  // Each call on a connection of its own: every one reaches the first server, whose count is
  // the whole count.
  for (const auto expected : {rls::RateLimitResponse::OK, rls::RateLimitResponse::OK,
                              rls::RateLimitResponse::OVER_LIMIT}) {
    const auto stub = rls::RateLimitService::NewStub(
        grpc::CreateChannel(fmt::format("127.0.0.1:{}", port), grpc::InsecureChannelCredentials()));
    rls::RateLimitResponse::Code code{};
    const grpc::Status status = AskOnce(*stub, "203.0.113.9", code);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(code, expected);
  }
  EXPECT_EQ(first.Stop(), 0);
}

// Envoy's calls to `sluiced` over mutual TLS with `certs`: served with the client's
// certificate, refused without.
void ExpectMutualTls(SluicedProcess& sluiced, const testing::TestCertificates& certs) {
  const int port = sluiced.AwaitGrpcPort();
  ASSERT_NE(port, 0) << "sluiced did not report its gRPC port: " << sluiced.Log();
  EXPECT_THAT(sluiced.Log(), ::testing::HasSubstr("over TLS, client certificates required"));
  auto channel = [&](bool with_certificate) {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = testing::TestCertificates::Read(certs.Cert("ca"));
    if (with_certificate) {
      tls.pem_cert_chain = testing::TestCertificates::Read(certs.Cert("client"));
      tls.pem_private_key = testing::TestCertificates::Read(certs.Key("client"));
    }
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    return grpc::CreateCustomChannel(fmt::format("127.0.0.1:{}", port), grpc::SslCredentials(tls),
                                     args);
  };
  ExpectTheLimitThrough(channel(true), "192.0.2.44");
  const auto stub = rls::RateLimitService::NewStub(channel(false));
  rls::RateLimitResponse::Code code{};
  EXPECT_EQ(AskOnce(*stub, "192.0.2.45", code).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(sluiced.Stop(), 0);
}

// --grpc-tls-cert, --grpc-tls-key and --grpc-tls-client-ca: Envoy's calls over mutual TLS.
TEST(GrpcIntegrationTest, ServesOverMutualTlsWithTheFlags) {
  testing::TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  SluicedProcess sluiced({"--grpc-tls-cert", certs.Cert("server"), "--grpc-tls-key",
                          certs.Key("server"), "--grpc-tls-client-ca", certs.Cert("ca")});
  ExpectMutualTls(sluiced, certs);
}

// The same from envoyproxy/ratelimit's variables, as their container spec sets them (the
// memory store and the test's addresses given as flags, which win; their log level, warn by
// default, raised so that the port can be read from the log).
TEST(GrpcIntegrationTest, ServesOverMutualTlsFromTheirEnvironment) {
  testing::TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  SluicedProcess sluiced(
      {"--store", "memory"},
      {"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + certs.Cert("server"),
       "GRPC_SERVER_TLS_KEY=" + certs.Key("server"), "GRPC_CLIENT_TLS_CACERT=" + certs.Cert("ca"),
       "USE_STATSD=false", "LOG_LEVEL=info"});
  ExpectMutualTls(sluiced, certs);
}

TEST(GrpcIntegrationTest, TlsFilesThatAreWrongExit2NamingTheFile) {
  testing::TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  const std::string missing = (certs.dir() / "missing.crt").string();
  SluicedProcess no_cert({"--grpc-tls-cert", missing, "--grpc-tls-key", certs.Key("server")});
  EXPECT_EQ(no_cert.Wait(), 2);
  EXPECT_THAT(no_cert.Log(),
              ::testing::HasSubstr(fmt::format("certificate file '{}': cannot read it", missing)));
  SluicedProcess bad_redis({"--store", "rediss://127.0.0.1:1", "--redis-tls-ca", missing});
  EXPECT_EQ(bad_redis.Wait(), 2);
  EXPECT_THAT(bad_redis.Log(),
              ::testing::HasSubstr(fmt::format("Redis TLS CA file '{}': cannot read it", missing)));
}

// --store unix:// and --store rediss:// with --redis-tls-ca, --redis-tls-cert, --redis-tls-key.
TEST(GrpcIntegrationTest, ReachesRedisThroughAUnixSocketAndOverTls) {
  testing::TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  const int tls_port = testing::FreePort();
  testing::RedisServer redis({"--tls-port", std::to_string(tls_port), "--tls-cert-file",
                              certs.Cert("server"), "--tls-key-file", certs.Key("server"),
                              "--tls-ca-cert-file", certs.Cert("ca"), "--tls-auth-clients", "yes"});
  SluicedProcess over_unix({"--store", redis.unix_url() + "?db=2", "--redis-timeout", "30s"});
  SluicedProcess over_tls({"--store", fmt::format("rediss://localhost:{}", tls_port),
                           "--redis-timeout", "30s", "--redis-tls-ca", certs.Cert("ca"),
                           "--redis-tls-cert", certs.Cert("client"), "--redis-tls-key",
                           certs.Key("client")});
  int index = 0;
  for (SluicedProcess* sluiced : {&over_unix, &over_tls}) {
    const int port = sluiced->AwaitGrpcPort();
    ASSERT_NE(port, 0) << "sluiced did not report its gRPC port: " << sluiced->Log();
    ExpectTheLimitThrough(
        grpc::CreateChannel(fmt::format("127.0.0.1:{}", port), grpc::InsecureChannelCredentials()),
        fmt::format("198.51.100.{}", ++index));
  }
  // In each database, the limit's key and the fleet's record of the limits (docs/redis.md):
  // the unix socket's in database 2, the TLS one's in 0.
  testing::Client client(redis.port());
  for (const char* db : {"2", "0"}) {
    client.Run({"SELECT", db});
    EXPECT_EQ(client.Run({"DBSIZE"})->integer, 2) << "database " << db;
    EXPECT_EQ(client.Run({"EXISTS", "sluice:limits"})->integer, 1) << "database " << db;
  }
  EXPECT_EQ(over_unix.Stop(), 0);
  EXPECT_EQ(over_tls.Stop(), 0);
}

}  // namespace
}  // namespace sluice::server

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--sluiced") {
      sluice::server::sluiced_path = argv[i + 1];
    }
  }
  if (sluice::server::sluiced_path.empty()) {
    std::fprintf(stderr, "usage: %s --sluiced PATH\n", argv[0]);
    return 2;
  }
  return RUN_ALL_TESTS();
}
