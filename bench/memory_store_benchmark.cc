// MemoryStore throughput: one hot key, and keys spread over 1,000,000, on 1 and 2 threads;
// with a clock read per call (Limiter::Check) and with the time passed in (CheckAt), as a
// server that reads the clock once per batch would. Keys are made on the fly from a cheap
// pseudo-random sequence, not read from a big array. Baseline in the same run: the same keys
// counted in a mutex-guarded std::unordered_map, the obvious hand-written limiter.

#include <array>
#include <atomic>
#include <charconv>
#include <cmath>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/decision_bench.h"
#include "benchmark/benchmark.h"
#include "fmt/format.h"

#include "sluice/limiter.h"
#include "sluice/memory_store.h"

namespace sluice {
namespace {

constexpr int64_t kKeys = 1'000'000;

// 1,000 an hour: a key holds state for the whole run, so the benchmarks measure a million
// live keys (with 100 a second a key would reset between its requests, about 200 ms apart,
// and be reclaimed and made again each time: BM_KeysResettingBetweenRequests measures that).
Limit GcraLimit() {
  return *Limit::Create(
      {.algorithm = Algorithm::kGcra, .limit = 1000, .period = std::chrono::hours(1)});
}

// 1,000 a microsecond with a burst of 10^9: faster than any thread calls, and a second's
// worth of burst for 1,024 calls at one BatchClock instant or a thread whose clock read lags
// another's. So a hot key's every call is admitted and writes its new state, as the peers' hot
// limiters do (a denial writes nothing). Its TAT fits 64 bits (N' = 1,000, P' = 1), as an
// ordinary limit's does.
Limit AdmitAllLimit() {
  return *Limit::Create(
      {.algorithm = Algorithm::kGcra, .limit = 1000, .period = Micros(1), .burst = 1'000'000'000});
}

// A key "user:<n>" for n in [0, kKeys), from a per-thread xorshift sequence.
class KeyMaker {
 public:
  explicit KeyMaker(uint64_t seed) : x_(seed * 0x9E3779B97F4A7C15ULL + 1) {}
  std::string_view Next() {
    x_ ^= x_ << 13;
    x_ ^= x_ >> 7;
    x_ ^= x_ << 17;
    const auto n = static_cast<int64_t>(x_ % kKeys);
    char* const end = std::to_chars(buf_ + 5, buf_ + sizeof(buf_), n).ptr;
    return {buf_, static_cast<size_t>(end - buf_)};
  }

 private:
  uint64_t x_;
  char buf_[32] = {'u', 's', 'e', 'r', ':'};
};

// One store shared by all threads of a benchmark run, filled with every key before timing.
struct Shared {
  explicit Shared(MemoryStoreOptions options) : store(options) {}
  MemoryStore store;
  Limiter limiter{GcraLimit(), store, SystemClock()};
  Limiter hot{AdmitAllLimit(), store, SystemClock()};  // The hot key's: it admits every call.
};
Shared* shared = nullptr;

void Fill(Limiter& limiter) {
  char buf[32] = {'u', 's', 'e', 'r', ':'};
  for (int64_t n = 0; n < kKeys; ++n) {
    char* const end = std::to_chars(buf + 5, buf + sizeof(buf), n).ptr;
    (void)limiter.Check(std::string_view(buf, static_cast<size_t>(end - buf)));
  }
}

void SetUp(const benchmark::State& bench, bool fill, MemoryStoreOptions options = {}) {
  if (bench.thread_index() == 0) {
    shared = new Shared(options);
    if (fill) {
      Fill(shared->limiter);
    }
  }
}
void TearDown(const benchmark::State& bench) {
  if (bench.thread_index() == 0) {
    delete shared;
    shared = nullptr;
  }
}

void BM_HotKeyWithClock(benchmark::State& bench) {
  for (auto _ : bench) {
    if (!Admitted(bench, shared->hot.Check("hot"))) {
      break;
    }
  }
  bench.SetItemsProcessed(bench.iterations());
}
BENCHMARK(BM_HotKeyWithClock)
    ->Setup([](const benchmark::State& s) { SetUp(s, false); })
    ->Teardown(TearDown)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

void BM_HotKeyTimePassedIn(benchmark::State& bench) {
  BatchClock clock;
  for (auto _ : bench) {
    const Timestamp now = clock.Now();
    if (!Admitted(bench, shared->hot.CheckAt("hot", 1, now))) {
      break;
    }
  }
  bench.SetItemsProcessed(bench.iterations());
}
BENCHMARK(BM_HotKeyTimePassedIn)
    ->Setup([](const benchmark::State& s) { SetUp(s, false); })
    ->Teardown(TearDown)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

void BM_MillionKeysTimePassedIn(benchmark::State& bench) {
  KeyMaker keys(static_cast<uint64_t>(bench.thread_index()) + 1);
  BatchClock clock;
  for (auto _ : bench) {
    const Timestamp now = clock.Now();
    benchmark::DoNotOptimize(shared->limiter.CheckAt(keys.Next(), 1, now));
  }
  bench.SetItemsProcessed(bench.iterations());
}
BENCHMARK(BM_MillionKeysTimePassedIn)
    ->Setup([](const benchmark::State& s) { SetUp(s, true); })
    ->Teardown(TearDown)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

void BM_MillionKeysWithClock(benchmark::State& bench) {
  KeyMaker keys(static_cast<uint64_t>(bench.thread_index()) + 1);
  for (auto _ : bench) {
    benchmark::DoNotOptimize(shared->limiter.Check(keys.Next()));
  }
  bench.SetItemsProcessed(bench.iterations());
}
BENCHMARK(BM_MillionKeysWithClock)
    ->Setup([](const benchmark::State& s) { SetUp(s, true); })
    ->Teardown(TearDown)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// As BM_MillionKeysTimePassedIn, in compact-keys mode (MemoryStoreOptions::compact_keys): a
// key's fingerprint and TAT in 16 bytes, found in one cache line.
void BM_MillionKeysCompactKeys(benchmark::State& bench) { BM_MillionKeysTimePassedIn(bench); }
BENCHMARK(BM_MillionKeysCompactKeys)
    ->Setup([](const benchmark::State& s) { SetUp(s, true, {.compact_keys = true}); })
    ->Teardown(TearDown)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// The same keys decided range(0) at a time by MemoryStore::DecideBatch, which asks the memory
// for the keys' slots a few requests ahead of deciding them.
void BM_MillionKeysBatch(benchmark::State& bench) {
  const Limit limit = GcraLimit();
  const auto size = static_cast<size_t>(bench.range(0));
  KeyMaker keys(static_cast<uint64_t>(bench.thread_index()) + 1);
  BatchClock clock;
  std::vector<std::array<char, 32>> text(size);
  std::vector<KeyCost> requests(size);
  std::vector<absl::StatusOr<Decision>> out(size);
  for (auto _ : bench) {
    for (size_t i = 0; i < size; ++i) {
      const std::string_view key = keys.Next();
      std::copy(key.begin(), key.end(), text[i].data());
      requests[i] = {std::string_view(text[i].data(), key.size()), 1};
    }
    const Timestamp now = clock.Now();
    shared->store.DecideBatch(limit, requests, now, out);
    benchmark::DoNotOptimize(out.data());
  }
  bench.SetItemsProcessed(bench.iterations() * bench.range(0));
}
BENCHMARK(BM_MillionKeysBatch)
    ->Setup([](const benchmark::State& s) { SetUp(s, true); })
    ->Teardown(TearDown)
    ->Arg(16)
    ->Arg(64)
    ->Arg(256)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

void BM_MillionKeysBatchCompactKeys(benchmark::State& bench) { BM_MillionKeysBatch(bench); }
BENCHMARK(BM_MillionKeysBatchCompactKeys)
    ->Setup([](const benchmark::State& s) { SetUp(s, true, {.compact_keys = true}); })
    ->Teardown(TearDown)
    ->Arg(64)
    ->Arg(256)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// Keys over 1,000,000 with a Zipf-like distribution: key k with probability about 1/k (a few
// keys take most of the traffic, as real clients do). Drawn as floor(10^6 ^ u) for uniform u.
void BM_MillionKeysZipf(benchmark::State& bench) {
  uint64_t x = static_cast<uint64_t>(bench.thread_index()) * 0x9E3779B97F4A7C15ULL + 7;
  char buf[32] = {'u', 's', 'e', 'r', ':'};
  BatchClock clock;
  for (auto _ : bench) {
    const Timestamp now = clock.Now();
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const double u = static_cast<double>(x >> 11) * 0x1.0p-53;
    const auto n = static_cast<int64_t>(std::pow(static_cast<double>(kKeys), u)) - 1;
    char* const end = std::to_chars(buf + 5, buf + sizeof(buf), n).ptr;
    benchmark::DoNotOptimize(
        shared->limiter.CheckAt(std::string_view(buf, static_cast<size_t>(end - buf)), 1, now));
  }
  bench.SetItemsProcessed(bench.iterations());
}
BENCHMARK(BM_MillionKeysZipf)
    ->Setup([](const benchmark::State& s) { SetUp(s, true); })
    ->Teardown(TearDown)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// The cost of a new key when the store is full: every call brings a key never seen, into a
// store capped at 1,000,000 and already full of keys that have not reset, so each one looks at
// eight keys and is refused (ResourceExhausted). Compare with BM_MillionKeysTimePassedIn, where
// the keys exist.
MemoryStore* full_store = nullptr;

void BM_NewKeyIntoAFullStore(benchmark::State& bench) {
  const Limit limit = GcraLimit();
  const Timestamp now = SystemClock().Now();
  char buf[32] = {'n', 'e', 'w', ':'};
  int64_t n = 0;
  auto next_key = [&] {
    char* const end = std::to_chars(buf + 4, buf + sizeof(buf), ++n).ptr;
    return std::string_view(buf, static_cast<size_t>(end - buf));
  };
  for (int64_t i = 0; i < kKeys; ++i) {  // Fill it: from here on every new key is refused.
    (void)full_store->Decide(limit, next_key(), 1, now);
  }
  for (auto _ : bench) {
    benchmark::DoNotOptimize(full_store->Decide(limit, next_key(), 1, now));
  }
  bench.SetItemsProcessed(bench.iterations());
  bench.counters["refused"] = static_cast<double>(full_store->Stats().refused);
}
BENCHMARK(BM_NewKeyIntoAFullStore)
    ->Setup([](const benchmark::State&) {
      full_store = new MemoryStore({.max_keys = static_cast<size_t>(kKeys)});
    })
    ->Teardown([](const benchmark::State&) {
      delete full_store;
      full_store = nullptr;
    })
    ->UseRealTime();

// A million keys that reset between their requests (100 a second, one request on a key about
// every 200 ms): the store reclaims them as its tables near growth, so many requests make
// their key anew. The price of keeping memory flat, against BM_MillionKeysTimePassedIn.
MemoryStore* resetting_store = nullptr;

void BM_KeysResettingBetweenRequests(benchmark::State& bench) {
  const Limit limit = *Limit::Create(
      {.algorithm = Algorithm::kGcra, .limit = 100, .period = std::chrono::seconds(1)});
  KeyMaker keys(static_cast<uint64_t>(bench.thread_index()) + 1);
  BatchClock clock;
  for (auto _ : bench) {
    const Timestamp now = clock.Now();
    benchmark::DoNotOptimize(resetting_store->Decide(limit, keys.Next(), 1, now));
  }
  bench.SetItemsProcessed(bench.iterations());
}
BENCHMARK(BM_KeysResettingBetweenRequests)
    ->Setup([](const benchmark::State&) { resetting_store = new MemoryStore(); })
    ->Teardown([](const benchmark::State&) {
      delete resetting_store;
      resetting_store = nullptr;
    })
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// Concurrency limits: a lease taken and given back (two LeaseAll calls) per iteration, on keys
// spread over a million, each holding 9 of its 10 slots already (other workers' leases), so a
// take scans a full set and a release finds its lease among them. Against
// BM_MillionKeysTimePassedIn: one rate decision per key.
MemoryStore* lease_store = nullptr;

void BM_LeaseTakeAndRelease(benchmark::State& bench) {
  KeyMaker keys(static_cast<uint64_t>(bench.thread_index()) + 1);
  BatchClock clock;
  const std::string id = fmt::format("{:032x}", bench.thread_index() + 1);
  Decision each;
  for (auto _ : bench) {
    const Timestamp now = clock.Now();
    const LeasedKey leased{keys.Next(), 10};
    benchmark::DoNotOptimize(lease_store->LeaseAll(LeaseOp::kTake, {&leased, 1}, id,
                                                   std::chrono::hours(1), now, {&each, 1}));
    benchmark::DoNotOptimize(
        lease_store->LeaseAll(LeaseOp::kRelease, {&leased, 1}, id, Micros{0}, now, {&each, 1}));
  }
  bench.SetItemsProcessed(bench.iterations());
}
BENCHMARK(BM_LeaseTakeAndRelease)
    ->Setup([](const benchmark::State& bench) {
      if (bench.thread_index() != 0) {
        return;
      }
      lease_store = new MemoryStore();
      char buf[32] = {'u', 's', 'e', 'r', ':'};
      const Timestamp now = SystemClock().Now();
      Decision each;
      for (int64_t n = 0; n < kKeys; ++n) {
        char* const end = std::to_chars(buf + 5, buf + sizeof(buf), n).ptr;
        const LeasedKey leased{std::string_view(buf, static_cast<size_t>(end - buf)), 10};
        for (int held = 0; held < 9; ++held) {
          (void)lease_store->LeaseAll(LeaseOp::kTake, {&leased, 1}, fmt::format("other{}", held),
                                      std::chrono::hours(2), now, {&each, 1});
        }
      }
    })
    ->Teardown([](const benchmark::State& bench) {
      if (bench.thread_index() == 0) {
        delete lease_store;
        lease_store = nullptr;
      }
    })
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// Settles (issue 33): a check that leaves a receipt (ChargeAllAsync: DecideAll, and what it
// charged), then that receipt settled (SettleAllAsync) at a random real cost, against the
// check alone (DecideAll). One limit, gcra or fixed_window (range(0): its Algorithm), of 1,000
// an hour as GcraLimit, on keys spread over a million, each decided once before timing; each
// check charges 4 and its settle finds a real cost of 0 to 8 (given back, unchanged or
// charged past the limit, up to 1,000 units of debt), with a `once` id of its own claimed for
// a minute (NoOnce: without, to see what the claim costs). An iteration is one decision (with
// its settle); store_calls counts the store's calls per decision. The asynchronous forms, as a
// server calls them: MemoryStore answers before they return.
struct SettleShared {
  explicit SettleShared(Algorithm algorithm)
      : limit(*Limit::Create(
            {.algorithm = algorithm, .limit = 1000, .period = std::chrono::hours(1)})) {}
  // Room for every claim a run makes (a minute each): the default million could be reached.
  MemoryStore store{{.max_once_claims = 16'000'000}};
  Limit limit;
};
SettleShared* settle_shared = nullptr;
std::atomic<uint64_t> settle_runs{0};  // Each thread's run: its `once` ids' prefix.

constexpr int64_t kSettleCharged = 4;

void SettleSetUp(const benchmark::State& bench) {
  if (bench.thread_index() != 0) {
    return;
  }
  settle_shared = new SettleShared(static_cast<Algorithm>(bench.range(0)));
  char buf[32] = {'u', 's', 'e', 'r', ':'};
  const Timestamp now = SystemClock().Now();
  for (int64_t n = 0; n < kKeys; ++n) {
    char* const end = std::to_chars(buf + 5, buf + sizeof(buf), n).ptr;
    (void)settle_shared->store.Decide(
        settle_shared->limit, std::string_view(buf, static_cast<size_t>(end - buf)), 1, now);
  }
}
void SettleTearDown(const benchmark::State& bench) {
  if (bench.thread_index() == 0) {
    delete settle_shared;
    settle_shared = nullptr;
  }
}

enum class SettleStep : uint8_t { kDecide, kCharge, kChargeAndSettle, kChargeAndSettleNoOnce };

void RunSettles(benchmark::State& bench, SettleStep step) {
  SettleShared& s = *settle_shared;
  bench.SetLabel(std::string(AlgorithmName(s.limit.algorithm())));
  KeyMaker keys(static_cast<uint64_t>(bench.thread_index()) + 1);
  uint64_t x = static_cast<uint64_t>(bench.thread_index()) * 0x9E3779B97F4A7C15ULL + 11;
  char once[32] = {'r'};
  char* const once_at = std::to_chars(once + 1, once + 16, settle_runs.fetch_add(1) + 1).ptr;
  *once_at = ':';
  BatchClock clock;
  Decision each;
  Charge charge;
  Settled settled;
  absl::StatusOr<Decision> decided;
  absl::Status status;
  uint64_t n = 0;
  for (auto _ : bench) {
    const Timestamp now = clock.Now();
    const LimitedKey request{.limit = &s.limit, .key = keys.Next()};
    if (step == SettleStep::kDecide) {
      decided = s.store.DecideAll({&request, 1}, kSettleCharged, now, {&each, 1});
    } else {
      s.store.ChargeAllAsync({&request, 1}, kSettleCharged, now, {&each, 1}, {&charge, 1},
                             [&](absl::StatusOr<Decision> d) { decided = std::move(d); });
    }
    if (!Admitted(bench, decided)) {
      break;
    }
    if (step == SettleStep::kDecide || step == SettleStep::kCharge) {
      continue;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const Settlement settlement{
        .charge = charge, .units = static_cast<int64_t>(x % 9), .max_debt = 1000};
    char* const end = std::to_chars(once_at + 1, once + sizeof(once), ++n).ptr;
    const size_t once_size =
        step == SettleStep::kChargeAndSettle ? static_cast<size_t>(end - once) : 0;
    s.store.SettleAllAsync({&request, 1}, {&settlement, 1}, std::string_view(once, once_size),
                           now + std::chrono::minutes(1), now, {&settled, 1},
                           [&](absl::Status st) { status = std::move(st); });
    benchmark::DoNotOptimize(settled);
    if (!status.ok()) [[unlikely]] {
      bench.SkipWithError(status.ToString().c_str());
      break;
    }
  }
  bench.SetItemsProcessed(bench.iterations());
  bench.counters["store_calls"] =
      benchmark::Counter(step == SettleStep::kDecide || step == SettleStep::kCharge ? 1 : 2,
                         benchmark::Counter::kAvgThreads);
}

void BM_SettleBaselineDecideAll(benchmark::State& bench) { RunSettles(bench, SettleStep::kDecide); }
void BM_SettleChargeAll(benchmark::State& bench) { RunSettles(bench, SettleStep::kCharge); }
void BM_SettleChargeAllThenSettleAll(benchmark::State& bench) {
  RunSettles(bench, SettleStep::kChargeAndSettle);
}
void BM_SettleChargeAllThenSettleAllNoOnce(benchmark::State& bench) {
  RunSettles(bench, SettleStep::kChargeAndSettleNoOnce);
}
void SettleArgs(benchmark::internal::Benchmark* b) {
  b->Setup(SettleSetUp)
      ->Teardown(SettleTearDown)
      ->Arg(static_cast<int64_t>(Algorithm::kGcra))
      ->Arg(static_cast<int64_t>(Algorithm::kFixedWindow))
      ->Threads(1)
      ->Threads(2)
      ->UseRealTime();
}
BENCHMARK(BM_SettleBaselineDecideAll)->Apply(SettleArgs);
BENCHMARK(BM_SettleChargeAll)->Apply(SettleArgs);
BENCHMARK(BM_SettleChargeAllThenSettleAll)->Apply(SettleArgs);
BENCHMARK(BM_SettleChargeAllThenSettleAllNoOnce)->Apply(SettleArgs);

// Baseline: a counter per key in one std::unordered_map behind one mutex.
void BM_BaselineUnorderedMapMillionKeys(benchmark::State& bench) {
  static std::mutex mu;
  static std::unordered_map<std::string, int64_t>* counts = nullptr;
  if (bench.thread_index() == 0) {
    counts = new std::unordered_map<std::string, int64_t>();
    KeyMaker fill(99);
    for (int64_t i = 0; i < 4 * kKeys; ++i) {
      (*counts)[std::string(fill.Next())] = 0;
    }
  }
  KeyMaker keys(static_cast<uint64_t>(bench.thread_index()) + 1);
  for (auto _ : bench) {
    std::lock_guard lock(mu);
    auto it = counts->find(std::string(keys.Next()));
    if (it != counts->end()) {
      ++it->second;
    }
  }
  bench.SetItemsProcessed(bench.iterations());
}
BENCHMARK(BM_BaselineUnorderedMapMillionKeys)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace
}  // namespace sluice
