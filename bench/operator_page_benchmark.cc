// What the operator's page (sluiced --ui, server/ui/) costs the server:
//   - BM_CheckThroughPage/page:0|1: a rules check through HttpApi alone, and through the
//     OperatorPage that wraps it with --ui (a path test, then the API): compare the two;
//   - BM_SampleHistory/counters:N: the control loop's one sample a second of N rule limits,
//     each moving (RateHistory::Sample);
//   - BM_SeriesAnswer/series:N/seconds:S: one GET /ui/api/series?seconds=S of N rule limits, as
//     JSON: an open page asks for 900 once, then every second for the few since.
// In one sitting, interleaved:
//   build/bin/sluice_bench --benchmark_filter='ThroughPage|SampleHistory|SeriesAnswer'
//       --benchmark_repetitions=10 --benchmark_enable_random_interleaving=true
//       --benchmark_report_aggregates_only=true

#include <string>
#include <vector>

#include "benchmark/benchmark.h"

#include "server/http/api.h"
#include "server/stats/rate_history.h"
#include "server/ui/operator_page.h"
#include "sluice/memory_store.h"

namespace sluice::server {
namespace {

namespace http = boost::beast::http;

constexpr char kRules[] = R"(
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
)";
constexpr char kToken[] = "bench-admin-token-0123456789";

class PageFixture {
 public:
  PageFixture()
      : service_(store_, SystemClock(), metrics_),
        api_(service_, metrics_, SystemClock(), nullptr),
        page_(api_, service_, history_, metrics_, *AdminToken::Create(kToken), SystemClock()) {
    service_.SetRules(
        *RuleSet::Parse({{"bench.yaml", kRules}}, metrics_.rules(),
                        [&](const Limit& limit) { return store_.CheckLimit(limit); }));
  }

  void Handle(HttpHandler& handler, const HttpRequest& request) {
    handler.Handle(
        request, "127.0.0.1",
        [](HttpHandler::Build build) {
          HttpResponse response = std::move(build)();
          benchmark::DoNotOptimize(response);
        },
        nullptr);
  }

  MemoryStore store_;
  Metrics metrics_;
  RateLimitService service_;
  HttpApi api_;
  RateHistory history_;
  OperatorPage page_;
};

void BM_CheckThroughPage(benchmark::State& state) {
  PageFixture fixture;
  std::vector<HttpRequest> requests;
  for (int user = 0; user < 10'000; ++user) {
    HttpRequest& request = requests.emplace_back(http::verb::post, "/v1/check", 11);
    request.body() =
        R"({"domain": "bench", "descriptors": [{"entries": [{"key": "user", "value": ")" +
        std::to_string(user) + R"("}]}]})";
    request.prepare_payload();
  }
  HttpHandler& handler =
      state.range(0) != 0 ? static_cast<HttpHandler&>(fixture.page_) : fixture.api_;
  size_t i = 0;
  for (auto _ : state) {
    fixture.Handle(handler, requests[i]);
    i = i + 1 == requests.size() ? 0 : i + 1;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CheckThroughPage)->ArgName("page")->Arg(0)->Arg(1);

// N rule limits' counters, each moved before every sample.
void BM_SampleHistory(benchmark::State& state) {
  CounterRegistry counters;
  std::vector<RuleCounters*> all;
  for (int64_t i = 0; i < state.range(0); ++i) {
    all.push_back(counters.Get("bench.rule_" + std::to_string(i)));
  }
  RateHistory history;
  Timestamp now = SystemClock().Now();
  for (auto _ : state) {
    for (RuleCounters* c : all) {
      c->admitted.fetch_add(3, std::memory_order_relaxed);
    }
    now += std::chrono::seconds(1);
    history.Sample(counters, now);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SampleHistory)->ArgName("counters")->Arg(16)->Arg(256)->Arg(4096);

void BM_SeriesAnswer(benchmark::State& state) {
  PageFixture fixture;
  std::vector<RuleCounters*> all;
  for (int64_t i = 0; i < state.range(0); ++i) {
    all.push_back(fixture.metrics_.rules().Get("bench.rule_" + std::to_string(i)));
  }
  Timestamp now = SystemClock().Now();
  for (int second = 0; second <= RateHistory::kSeconds; ++second) {  // A full window.
    for (RuleCounters* c : all) {
      c->admitted.fetch_add(static_cast<uint64_t>(second % 97), std::memory_order_relaxed);
      c->denied.fetch_add(static_cast<uint64_t>(second % 13), std::memory_order_relaxed);
    }
    now += std::chrono::seconds(1);
    fixture.history_.Sample(fixture.metrics_.rules(), now);
  }
  HttpRequest request{http::verb::get, "/ui/api/series?seconds=" + std::to_string(state.range(1)),
                      11};
  request.set(http::field::authorization, std::string("Bearer ") + kToken);
  for (auto _ : state) {
    fixture.Handle(fixture.page_, request);
  }
  state.SetItemsProcessed(state.iterations());
}
// seconds:900, a page's first answer; seconds:3, each one after (the seconds since).
BENCHMARK(BM_SeriesAnswer)->ArgNames({"series", "seconds"})->ArgsProduct({{4, 32, 256}, {900, 3}});

}  // namespace
}  // namespace sluice::server
