// The sluiced binary asked over gRPC, as Envoy asks it: Envoy's rate limit API and the
// standard health service on the --grpc port, then a clean stop on SIGTERM.
//
//   grpc_integration_test --sluiced build/bin/sluiced   (ctest passes the flag)

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

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
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"

#include "tests/testing/redis_server.h"

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
// file, its gRPC port read from the log. `extra`: more flags (--store redis://...).
class SluicedProcess {
 public:
  explicit SluicedProcess(std::vector<std::string> extra = {}) {
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
    std::vector<std::string> args = {sluiced_path,  "--config",    rules,
                                     "--http",      "127.0.0.1:0", "--grpc",
                                     "127.0.0.1:0", "--threads",   "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& arg : args) {
      argv.push_back(arg.data());
    }
    argv.push_back(nullptr);
    started_ =
        posix_spawn(&pid_, sluiced_path.c_str(), &actions, nullptr, argv.data(), environ) == 0;
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

  // The gRPC port from the log, or 0 after 10 s.
  int AwaitGrpcPort() const {
    const std::regex pattern(R"(grpc://127\.0\.0\.1:(\d+))");
    for (int i = 0; started_ && i < 1000; ++i) {
      std::stringstream text;
      text << std::ifstream(log_).rdbuf();
      std::smatch match;
      const std::string log = text.str();
      if (std::regex_search(log, match, pattern)) {
        return std::stoi(match[1]);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
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
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
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

  // grpc.health.v1.Health/Check with an empty HealthCheckRequest: SERVING is field 1 = 1,
  // bytes 08 01 (written by hand: the health .proto is not needed for one enum).
  grpc::GenericStub generic(channel);
  grpc::ClientContext health_context;
  health_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice nothing("");  // An empty message is one empty slice, not an empty buffer.
  grpc::ByteBuffer health_request(&nothing, 1);
  grpc::ByteBuffer health_response;
  grpc::Status health_status;
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  generic.UnaryCall(&health_context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                    &health_request, &health_response, [&](grpc::Status status) {
                      std::lock_guard<std::mutex> lock(mutex);
                      health_status = std::move(status);
                      done = true;
                      done_cv.notify_one();
                    });
  {
    std::unique_lock<std::mutex> lock(mutex);
    done_cv.wait(lock, [&] { return done; });
  }
  ASSERT_TRUE(health_status.ok()) << health_status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(health_response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));

  EXPECT_EQ(sluiced.Stop(), 0);
}

// Two sluiced processes on one Redis answer Envoy from one quota; with Redis gone, the deny
// policy (the default) is a gRPC error, for Envoy's failure_mode_deny to decide.
TEST(GrpcIntegrationTest, TwoServersOnOneRedisShareTheQuota) {
  testing::RedisServer redis;
  SluicedProcess a({"--store", redis.url()});
  SluicedProcess b({"--store", redis.url()});
  std::vector<std::unique_ptr<rls::RateLimitService::Stub>> stubs;
  for (SluicedProcess* sluiced : {&a, &b}) {
    const int port = sluiced->AwaitGrpcPort();
    ASSERT_NE(port, 0) << "sluiced did not report its gRPC port";
    stubs.push_back(rls::RateLimitService::NewStub(grpc::CreateChannel(
        fmt::format("127.0.0.1:{}", port), grpc::InsecureChannelCredentials())));
  }
  auto ask = [&](size_t server, rls::RateLimitResponse& response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
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
