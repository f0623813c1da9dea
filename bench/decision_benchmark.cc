// The cost of one decision of each algorithm: the pure function on a state in cache, the time
// advancing 1 us per call so that the state really changes. Baseline in the same run: a clock
// read, which a server pays once per batch rather than once per decision.

#include "benchmark/benchmark.h"

#include "sluice/algorithms.h"

namespace sluice {
namespace {

constexpr int64_t kEpoch = 1'700'000'000'000'000;

// `rate` units per 2 * rate us (one every 2 us) with a burst of 1000, one call per microsecond:
// about one call in two is admitted. With rate 500,000 t*N needs 128 bits; with 100 it fits in
// 64, the fast path that ordinary limits take.
void BM_Decide(benchmark::State& bench, Algorithm algorithm, int64_t rate) {
  const Limit limit = *Limit::Create({.algorithm = algorithm,
                                      .limit = rate,
                                      .period = Micros(2 * rate),
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
  bench.counters["admitted"] =
      benchmark::Counter(static_cast<double>(admitted) / static_cast<double>(bench.iterations()));
}

BENCHMARK_CAPTURE(BM_Decide, fixed_window, Algorithm::kFixedWindow, 500'000);
BENCHMARK_CAPTURE(BM_Decide, sliding_log, Algorithm::kSlidingLog, 500'000);
BENCHMARK_CAPTURE(BM_Decide, sliding_window, Algorithm::kSlidingWindow, 500'000);
BENCHMARK_CAPTURE(BM_Decide, sliding_buckets, Algorithm::kSlidingBuckets, 500'000);
BENCHMARK_CAPTURE(BM_Decide, token_bucket, Algorithm::kTokenBucket, 500'000);
BENCHMARK_CAPTURE(BM_Decide, gcra, Algorithm::kGcra, 500'000);
BENCHMARK_CAPTURE(BM_Decide, leaky_bucket, Algorithm::kLeakyBucket, 500'000);
BENCHMARK_CAPTURE(BM_Decide, gcra_100_per_second, Algorithm::kGcra, 100);
BENCHMARK_CAPTURE(BM_Decide, leaky_bucket_100_per_second, Algorithm::kLeakyBucket, 100);

// A calendar quota (a day in Europe/Berlin, tzdata's) against a fixed window of 24 h, 1,000
// a day, `step` us between calls. 1 us: the window is the one the thread's cache holds. 25 h:
// every call falls in another window, which the zone's rules give (and the state starts anew).
void BM_DecideDay(benchmark::State& bench, bool calendar, int64_t step) {
  LimitSpec spec{.limit = 1000, .period = std::chrono::hours(24)};
  if (calendar) {
    spec.period = Micros{0};
    spec.calendar = Calendar{CalendarUnit::kDay, "Europe/Berlin"};
  }
  const Limit limit = *Limit::Create(spec);
  FixedWindowState state;
  int64_t t = kEpoch;
  for (auto _ : bench) {
    t += step;
    benchmark::DoNotOptimize(Decide(limit, state, Timestamp(Micros(t)), 1));
  }
}

constexpr int64_t kNewWindow = 25LL * 3'600'000'000;
BENCHMARK_CAPTURE(BM_DecideDay, fixed_24h, false, 1);
BENCHMARK_CAPTURE(BM_DecideDay, calendar_berlin, true, 1);
BENCHMARK_CAPTURE(BM_DecideDay, fixed_24h_new_window, false, kNewWindow);
BENCHMARK_CAPTURE(BM_DecideDay, calendar_berlin_new_window, true, kNewWindow);

void BM_ClockRead(benchmark::State& bench) {
  Clock& clock = SystemClock();
  for (auto _ : bench) {
    benchmark::DoNotOptimize(clock.Now());
  }
}
BENCHMARK(BM_ClockRead);

}  // namespace
}  // namespace sluice
