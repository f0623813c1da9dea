// A partner's feedback (issue 36), on the memory store, in one run:
//   - CheckPlain / CheckWithFeedback: a rules check on a limit without and with `feedback`,
//     whose pause key is read before the limit is charged (a second store call): what
//     feedback costs every check.
//   - ReadPartnerAnswer: the headers of a typical 429 (Retry-After, the IETF draft's RateLimit
//     and RateLimit-Policy, GitHub's three) read into a PartnerAnswer.
//   - Feedback: POST /v1/feedback's service call for a 200 with a lower remaining (a settle of
//     the limit and a query of the pause key, one store call).
// Keys spread over 10,000 values, a limit no check reaches.

#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "spdlog/spdlog.h"

#include "server/http/partner_headers.h"
#include "server/service/service.h"
#include "sluice/memory_store.h"

namespace sluice::server {
namespace {

constexpr char kRules[] = R"(
domain: bench
descriptors:
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 1000000000, algorithm: gcra}
  - key: partner
    rate_limit: {unit: second, requests_per_unit: 1000000000, algorithm: gcra, feedback: true}
)";
constexpr int kValues = 10'000;

class Fixture {
 public:
  Fixture() : service_(store_, SystemClock(), metrics_) {
    service_.SetRules(
        *RuleSet::Parse({{"bench.yaml", kRules}}, metrics_.rules(),
                        [&](const Limit& limit) { return store_.CheckLimit(limit); }));
    for (int i = 0; i < kValues; ++i) {
      values_.push_back("value-" + std::to_string(i));
    }
  }

  CheckRequest Request(const char* key, int n) const {
    return CheckRequest{.domain = "bench",
                        .descriptors = {{.entries = {{key, values_[n % kValues]}}}}};
  }

  MemoryStore store_;
  Metrics metrics_;
  RateLimitService service_;
  std::vector<std::string> values_;
};

void Check(benchmark::State& bench, const char* key) {
  Fixture f;
  int n = 0;
  for (auto _ : bench) {
    absl::StatusOr<CheckResult> result = f.service_.Check(f.Request(key, n++));
    if (!result.ok() || !result->combined.allowed) {
      bench.SkipWithError("not admitted");
      break;
    }
  }
  bench.SetItemsProcessed(bench.iterations());
}

void BM_CheckPlain(benchmark::State& bench) { Check(bench, "plain"); }
void BM_CheckWithFeedback(benchmark::State& bench) { Check(bench, "partner"); }
BENCHMARK(BM_CheckPlain);
BENCHMARK(BM_CheckWithFeedback);

const std::vector<PartnerHeader> kHeaders = {
    {"Content-Type", "application/json"},
    {"Retry-After", "12"},
    {"RateLimit-Policy", R"("burst";q=100;w=1, "day";q=5000;w=86400)"},
    {"RateLimit", R"("burst";r=0;t=1, "day";r=4000;t=50000)"},
    {"X-RateLimit-Limit", "5000"},
    {"X-RateLimit-Remaining", "0"},
    {"X-RateLimit-Reset", "1795000000"},
    {"X-Request-Id", "8c1f6a0e-2b51-4b1c-9f49-5d3f0d7d3c1e"},
};

void BM_ReadPartnerAnswer(benchmark::State& bench) {
  const Timestamp now = SystemClock().Now();
  for (auto _ : bench) {
    PartnerAnswer answer = ReadPartnerAnswer(429, kHeaders, now);
    benchmark::DoNotOptimize(answer);
  }
  bench.SetItemsProcessed(bench.iterations());
}
BENCHMARK(BM_ReadPartnerAnswer);

void BM_Feedback(benchmark::State& bench) {
  Fixture f;
  spdlog::set_level(spdlog::level::warn);  // Each run's first lowering would log a line.
  int n = 0;
  for (auto _ : bench) {
    absl::StatusOr<FeedbackResult> result = f.service_.Feedback(
        {.target = f.Request("partner", n++), .answer = {.status = 200, .remaining = 500'000'000}});
    if (!result.ok() || result->limits.empty()) {
      bench.SkipWithError("not told");
      break;
    }
  }
  bench.SetItemsProcessed(bench.iterations());
}
BENCHMARK(BM_Feedback);

}  // namespace
}  // namespace sluice::server
