// A gRPC load generator for sluiced's Envoy API: keeps `--concurrency` ShouldRateLimit calls
// in flight for `--duration` seconds (each call's completion starts the next), one descriptor
// per call spread over `--users` values, and prints calls per second and latency percentiles.
// Debian has no ghz; this is the smallest thing that measures the same.
//
//   sluice_grpc_load --target 127.0.0.1:8081 --domain bench --concurrency 64 --duration 10

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace {

namespace rls = envoy::service::ratelimit::v3;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string target = "127.0.0.1:8081";
  std::string domain = "bench";
  int concurrency = 64;
  int duration_s = 10;
  int users = 10'000;
  int channels = 2;
};

class Load {
 public:
  explicit Load(const Options& options) : options_(options) {
    for (int i = 0; i < options.channels; ++i) {
      grpc::ChannelArguments args;
      args.SetInt("grpc.channel_id", i);  // Distinct arguments: a connection of its own each.
      stubs_.push_back(rls::RateLimitService::NewStub(
          grpc::CreateCustomChannel(options.target, grpc::InsecureChannelCredentials(), args)));
    }
  }

  void Run() {
    end_ = Clock::now() + std::chrono::seconds(options_.duration_s);
    start_ = Clock::now();
    for (int i = 0; i < options_.concurrency; ++i) {
      Start(i);
    }
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return running_ == 0; });
    const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    std::sort(latencies_us_.begin(), latencies_us_.end());
    auto percentile = [&](double p) {
      return latencies_us_.empty()
                 ? 0.0
                 : latencies_us_[static_cast<size_t>(p * (latencies_us_.size() - 1))] / 1000.0;
    };
    std::printf(
        "calls %zu in %.1f s: %.0f calls/s, p50 %.3f ms, p99 %.3f ms, errors %zu, "
        "over limit %zu\n",
        latencies_us_.size(), seconds, latencies_us_.size() / seconds, percentile(0.5),
        percentile(0.99), errors_, over_limit_);
  }

 private:
  struct Call {
    grpc::ClientContext context;
    rls::RateLimitRequest request;
    rls::RateLimitResponse response;
    Clock::time_point sent;
  };

  void Start(int slot) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++running_;
    }
    Issue(slot, 0);
  }

  void Issue(int slot, uint64_t n) {
    auto call = std::make_shared<Call>();
    call->request.set_domain(options_.domain);
    auto* entry = call->request.add_descriptors()->add_entries();
    entry->set_key("user");
    entry->set_value(std::to_string((slot * 7919 + n * 104729) % options_.users));
    call->sent = Clock::now();
    stubs_[slot % stubs_.size()]->async()->ShouldRateLimit(
        &call->context, &call->request, &call->response,
        [this, slot, n, call](grpc::Status status) {
          const auto now = Clock::now();
          {
            std::lock_guard<std::mutex> lock(mutex_);
            latencies_us_.push_back(static_cast<double>(
                std::chrono::duration_cast<std::chrono::microseconds>(now - call->sent).count()));
            errors_ += status.ok() ? 0 : 1;
            over_limit_ +=
                call->response.overall_code() == rls::RateLimitResponse::OVER_LIMIT ? 1 : 0;
          }
          if (now < end_) {
            Issue(slot, n + 1);
            return;
          }
          std::lock_guard<std::mutex> lock(mutex_);
          if (--running_ == 0) {
            done_.notify_one();
          }
        });
  }

  Options options_;
  std::vector<std::unique_ptr<rls::RateLimitService::Stub>> stubs_;
  Clock::time_point start_;
  Clock::time_point end_;
  std::mutex mutex_;
  std::condition_variable done_;
  int running_ = 0;
  std::vector<double> latencies_us_;
  size_t errors_ = 0;
  size_t over_limit_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"sluice_grpc_load: ShouldRateLimit calls in flight against sluiced"};
  app.add_option("--target", options.target, "HOST:PORT")->capture_default_str();
  app.add_option("--domain", options.domain)->capture_default_str();
  app.add_option("--concurrency", options.concurrency, "calls in flight")->capture_default_str();
  app.add_option("--duration", options.duration_s, "seconds")->capture_default_str();
  app.add_option("--users", options.users, "distinct descriptor values")->capture_default_str();
  app.add_option("--channels", options.channels, "connections")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  Load(options).Run();
  return 0;
}
