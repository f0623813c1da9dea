// DirectLimiter throughput: one limit held in the process, no key (what Guava's RateLimiter
// is), on 1 and 2 threads, with a clock read per call and with the time passed in, with the
// figures (Check) and with the yes or no alone (TryAcquire). Every call is admitted, so every
// call writes the limiter's word. Baseline in the same binary: the same limit on one key of a
// MemoryStore (BM_HotKey*, memory_store_benchmark.cc).

#include <memory>

#include "bench/decision_bench.h"
#include "benchmark/benchmark.h"

#include "sluice/direct_limiter.h"

namespace sluice {
namespace {

DirectLimiter* direct = nullptr;  // Shared by the threads of one run.

void SetUp(const benchmark::State& bench) {
  if (bench.thread_index() == 0) {
    // BM_HotKey*'s limit (memory_store_benchmark.cc): every call is admitted.
    direct = DirectLimiter::Create(*Limit::Create({.algorithm = Algorithm::kGcra,
                                                   .limit = 1000,
                                                   .period = Micros(1),
                                                   .burst = 1'000'000'000}),
                                   SystemClock())
                 ->release();
  }
}
void TearDown(const benchmark::State& bench) {
  if (bench.thread_index() == 0) {
    delete direct;
    direct = nullptr;
  }
}

void BM_DirectWithClock(benchmark::State& bench) {
  for (auto _ : bench) {
    if (!Admitted(bench, direct->Check())) {
      break;
    }
  }
  bench.SetItemsProcessed(bench.iterations());
}
BENCHMARK(BM_DirectWithClock)
    ->Setup(SetUp)
    ->Teardown(TearDown)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

void BM_DirectTimePassedIn(benchmark::State& bench) {
  BatchClock clock;
  for (auto _ : bench) {
    if (!Admitted(bench, direct->CheckAt(1, clock.Now()))) {
      break;
    }
  }
  bench.SetItemsProcessed(bench.iterations());
}
BENCHMARK(BM_DirectTimePassedIn)
    ->Setup(SetUp)
    ->Teardown(TearDown)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

void BM_DirectTryAcquireWithClock(benchmark::State& bench) {
  for (auto _ : bench) {
    if (!Admitted(bench, direct->TryAcquire())) {
      break;
    }
  }
  bench.SetItemsProcessed(bench.iterations());
}
BENCHMARK(BM_DirectTryAcquireWithClock)
    ->Setup(SetUp)
    ->Teardown(TearDown)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

void BM_DirectTryAcquireTimePassedIn(benchmark::State& bench) {
  BatchClock clock;
  for (auto _ : bench) {
    if (!Admitted(bench, direct->TryAcquireAt(1, clock.Now()))) {
      break;
    }
  }
  bench.SetItemsProcessed(bench.iterations());
}
BENCHMARK(BM_DirectTryAcquireTimePassedIn)
    ->Setup(SetUp)
    ->Teardown(TearDown)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

}  // namespace
}  // namespace sluice
