// A change of limit in the memory store (issue 34): DecideAll on keys spread over a million
// under a limit whose figures changed (LimitedKey::before names the earlier ones), against the
// same keys under a limit that never changed, in one run.
//   - Unchanged: the baseline, `before` empty.
//   - Adopting: every key still holds its state under the earlier figures; each call is a
//     key's first under the new ones, which moves and converts its state (exactly a million
//     calls, one per key).
//   - Adopted: every key has moved already, but the earlier figures' table is still in force
//     (empty), so each call pays the check that nothing is left to adopt; once that table
//     retires the cost is gone.
// gcra, 1,000 an hour before and 2,000 an hour after, so that every call is admitted.

#include <charconv>
#include <string>
#include <string_view>

#include "bench/decision_bench.h"
#include "benchmark/benchmark.h"

#include "sluice/memory_store.h"

namespace sluice {
namespace {

constexpr int64_t kKeys = 1'000'000;

Limit Gcra(int64_t per_hour) {
  return *Limit::Create(
      {.algorithm = Algorithm::kGcra, .limit = per_hour, .period = std::chrono::hours(1)});
}

struct Keys {
  char buf[32] = {'u', 's', 'e', 'r', ':'};
  std::string_view Of(int64_t n) {
    char* const end = std::to_chars(buf + 5, buf + sizeof(buf), n).ptr;
    return {buf, static_cast<size_t>(end - buf)};
  }
};

enum class Case : uint8_t { kUnchanged, kAdopting, kAdopted };

void Run(benchmark::State& bench, Case c) {
  MemoryStore store;
  const Limit old_limit = Gcra(1000);
  const Limit new_limit = Gcra(2000);
  const Limit before[] = {old_limit};
  const Timestamp now = SystemClock().Now();
  Keys keys;
  Decision each;
  for (int64_t n = 0; n < kKeys; ++n) {
    (void)store.Decide(old_limit, keys.Of(n), 1, now);
    if (c == Case::kAdopted) {
      const LimitedKey request{.limit = &new_limit, .key = keys.Of(n), .before = before};
      (void)store.DecideAll({&request, 1}, 1, now, {&each, 1});
    }
  }
  const Limit& limit = c == Case::kUnchanged ? old_limit : new_limit;
  const std::span<const Limit> earlier = c == Case::kUnchanged ? std::span<const Limit>() : before;
  // The same spread order in every case: key n * a prime, modulo the million.
  int64_t n = 0;
  absl::StatusOr<Decision> decided;
  for (auto _ : bench) {
    const LimitedKey request{
        .limit = &limit, .key = keys.Of((n++ * 7919) % kKeys), .before = earlier};
    decided = store.DecideAll({&request, 1}, 1, now, {&each, 1});
    if (!Admitted(bench, decided)) {
      break;
    }
  }
  bench.SetItemsProcessed(bench.iterations());
}

void BM_ChangeUnchanged(benchmark::State& bench) { Run(bench, Case::kUnchanged); }
void BM_ChangeAdopting(benchmark::State& bench) { Run(bench, Case::kAdopting); }
void BM_ChangeAdopted(benchmark::State& bench) { Run(bench, Case::kAdopted); }
BENCHMARK(BM_ChangeUnchanged)->Iterations(kKeys)->Repetitions(3);
BENCHMARK(BM_ChangeAdopting)->Iterations(kKeys)->Repetitions(3);
BENCHMARK(BM_ChangeAdopted)->Iterations(kKeys)->Repetitions(3);

}  // namespace
}  // namespace sluice
