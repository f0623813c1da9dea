// The cost of one decision of each algorithm: the pure function on a state in cache, the time
// advancing 1 us per call so that the state really changes. Baseline in the same run: a clock
// read, which a server pays once per batch rather than once per decision.

#include "benchmark/benchmark.h"
#include "sluice/algorithms.h"

namespace sluice {
namespace {

constexpr int64_t kEpoch = 1'700'000'000'000'000;

void BM_Decide(benchmark::State& bench, Algorithm algorithm) {
  // A million per second with a burst of a thousand: about one in two calls is admitted.
  const Limit limit = *Limit::Create({.algorithm = algorithm,
                                      .limit = 500'000,
                                      .period = std::chrono::seconds(1),
                                      .burst = 1000,
                                      .buckets = 100});
  AnyState state = InitialState(algorithm);
  int64_t t = kEpoch;
  int64_t admitted = 0;
  std::visit(
      [&](auto& s) {
        for (auto _ : bench) {
          const Decision d = Decide(limit, s, Timestamp(Micros(++t)), 1);
          admitted += d.allowed ? 1 : 0;
          benchmark::DoNotOptimize(d);
        }
      },
      state);
  bench.counters["admitted"] = benchmark::Counter(static_cast<double>(admitted) /
                                                  static_cast<double>(bench.iterations()));
}

BENCHMARK_CAPTURE(BM_Decide, fixed_window, Algorithm::kFixedWindow);
BENCHMARK_CAPTURE(BM_Decide, sliding_log, Algorithm::kSlidingLog);
BENCHMARK_CAPTURE(BM_Decide, sliding_window, Algorithm::kSlidingWindow);
BENCHMARK_CAPTURE(BM_Decide, sliding_buckets, Algorithm::kSlidingBuckets);
BENCHMARK_CAPTURE(BM_Decide, token_bucket, Algorithm::kTokenBucket);
BENCHMARK_CAPTURE(BM_Decide, gcra, Algorithm::kGcra);
BENCHMARK_CAPTURE(BM_Decide, leaky_bucket, Algorithm::kLeakyBucket);

void BM_ClockRead(benchmark::State& bench) {
  Clock& clock = SystemClock();
  for (auto _ : bench) {
    benchmark::DoNotOptimize(clock.Now());
  }
}
BENCHMARK(BM_ClockRead);

}  // namespace
}  // namespace sluice
