// The user-space cost of one HTTP check, without sockets: HttpApi::Handle on a parsed request
// (JSON parse, matching, the store, the answer and its headers). bench/http/run.sh measures
// the whole server with the kernel; this isolates what sluiced itself spends per request.
// The /top:1 variants count top offenders too (server/stats/top_keys.h), each request a key
// the summaries do not hold (10,000 users in turn, 32 places): their worst case. Compare the
// two in one sitting, interleaved:
//   build/bin/sluice_bench --benchmark_filter=Handle --benchmark_repetitions=10
//       --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true

#include <string>

#include "benchmark/benchmark.h"

#include "server/http/api.h"
#include "sluice/memory_store.h"

namespace sluice::server {
namespace {

namespace http = boost::beast::http;

constexpr char kRules[] = R"(
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: api_key
    limits:
      - {requests_per_unit: 1000000000, unit: second}
      - {requests_per_unit: 1000000000, unit: day, algorithm: sliding_window}
)";

class Fixture {
 public:
  explicit Fixture(bool top = false)
      : service_(store_, SystemClock(), metrics_),
        api_(service_, metrics_, SystemClock(), nullptr) {
    metrics_.top().Enable(top);
    service_.SetRules(
        *RuleSet::Parse({{"bench.yaml", kRules}}, metrics_.rules(),
                        [&](const Limit& limit) { return store_.CheckLimit(limit); }));
  }

  // Checks `body` for users 0..9999 in turn; the state stays in the store between requests.
  void Run(benchmark::State& state, const std::string& prefix, const std::string& suffix) {
    std::vector<HttpRequest> requests;
    for (int user = 0; user < 10'000; ++user) {
      HttpRequest& request = requests.emplace_back(http::verb::post, "/v1/check", 11);
      request.body() = prefix + std::to_string(user) + suffix;
      request.prepare_payload();
    }
    size_t i = 0;
    for (auto _ : state) {
      // The memory store answers before Handle returns.
      api_.Handle(requests[i], "127.0.0.1", [](HttpApi::Build build) {
        HttpResponse response = std::move(build)();
        benchmark::DoNotOptimize(response);
      });
      i = i + 1 == requests.size() ? 0 : i + 1;
    }
    state.SetItemsProcessed(state.iterations());
  }

 private:
  MemoryStore store_;
  Metrics metrics_;
  RateLimitService service_;
  HttpApi api_;
};

void BM_HandleAdHocCheck(benchmark::State& state) {
  Fixture fixture(state.range(0) != 0);
  fixture.Run(state, R"({"key": "user:)",
              R"(", "algorithm": "gcra", "limit": 1000000, "period": "1s"})");
}
BENCHMARK(BM_HandleAdHocCheck)->ArgName("top")->Arg(0)->Arg(1);

void BM_HandleRulesCheck(benchmark::State& state) {
  Fixture fixture(state.range(0) != 0);
  fixture.Run(state,
              R"({"domain": "bench", "descriptors": [{"entries": [{"key": "user", "value": ")",
              R"("}]}]})");
}
BENCHMARK(BM_HandleRulesCheck)->ArgName("top")->Arg(0)->Arg(1);

void BM_HandleRulesTwoLimits(benchmark::State& state) {
  Fixture fixture(state.range(0) != 0);
  fixture.Run(state,
              R"({"domain": "bench", "descriptors": [{"entries": [{"key": "api_key", "value": ")",
              R"("}]}]})");
}
BENCHMARK(BM_HandleRulesTwoLimits)->ArgName("top")->Arg(0)->Arg(1);

}  // namespace
}  // namespace sluice::server
