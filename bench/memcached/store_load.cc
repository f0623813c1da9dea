// sluice_store_load: decisions through a shared store (RedisStore or MemcachedStore, by the
// URL's scheme) with a fixed number of calls in flight: a closed loop, each answer starting the
// next call through DecideAllAsync. One limit (fixed_window or gcra) high enough that every
// call is admitted, so that every decision writes; on `--keys` keys drawn at random (1: one
// hot key, which Memcached's cas loops contend on). Prints decisions per second, latency
// percentiles and errors, on one line, for bench/memcached/run.sh.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "fmt/format.h"

#include "sluice/clock.h"
#include "sluice/limit.h"
#include "sluice/memcached_store.h"
#include "sluice/redis_store.h"

namespace {

using SteadyClock = std::chrono::steady_clock;

struct Load {
  sluice::Store* store = nullptr;
  const sluice::Limit* limit = nullptr;
  std::vector<std::string> keys;
  SteadyClock::time_point until;
  std::atomic<uint64_t> decisions{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<int> running{0};
  std::mutex mu;
  std::vector<double> latencies_us;  // Guarded by mu.
};

// One call in flight: asks, and from its answer asks again until the time is up.
struct Caller {
  Load* load;
  std::mt19937_64 rng;
  sluice::Decision each;
  SteadyClock::time_point sent;
  std::vector<double> latencies_us;

  void Ask() {
    const std::string& key = load->keys[rng() % load->keys.size()];
    const sluice::LimitedKey request{load->limit, key};
    sent = SteadyClock::now();
    load->store->DecideAllAsync({&request, 1}, 1, sluice::SystemClock().Now(), {&each, 1},
                                [this](absl::StatusOr<sluice::Decision> d) { Done(d.ok()); });
  }
  void Done(bool ok) {
    const SteadyClock::time_point now = SteadyClock::now();
    latencies_us.push_back(std::chrono::duration<double, std::micro>(now - sent).count());
    (ok ? load->decisions : load->errors).fetch_add(1, std::memory_order_relaxed);
    if (now < load->until) {
      Ask();
      return;
    }
    std::lock_guard lock(load->mu);
    load->latencies_us.insert(load->latencies_us.end(), latencies_us.begin(), latencies_us.end());
    load->running.fetch_sub(1);
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"decisions through a shared store (redis:// or memcached://)"};
  std::string url;
  std::string algorithm = "gcra";
  int keys = 100'000;
  int inflight = 16;
  int threads = 4;
  double duration = 5;
  app.add_option("--url", url, "redis://host:port or memcached://host:port")->required();
  app.add_option("--algorithm", algorithm, "fixed_window or gcra");
  app.add_option("--keys", keys, "keys drawn at random (1: one hot key)");
  app.add_option("--inflight", inflight, "calls in flight");
  app.add_option("--threads", threads, "memcached: the store's threads");
  app.add_option("--duration", duration, "seconds");
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<sluice::Algorithm> parsed = sluice::ParseAlgorithm(algorithm);
  if (!parsed.ok()) {
    fmt::print(stderr, "{}\n", parsed.status().ToString());
    return 2;
  }
  const sluice::Limit limit = *sluice::Limit::Create(
      {.algorithm = *parsed, .limit = 1'000'000'000, .period = std::chrono::seconds(1)});
  std::unique_ptr<sluice::Store> store;
  if (url.starts_with("memcached://")) {
    absl::StatusOr<sluice::MemcachedStoreOptions> options = sluice::ParseMemcachedUrl(url);
    if (!options.ok()) {
      fmt::print(stderr, "{}\n", options.status().ToString());
      return 2;
    }
    options->threads = threads;
    options->timeout = std::chrono::seconds(2);
    store = *sluice::MemcachedStore::Create(*options);
  } else {
    absl::StatusOr<sluice::RedisStoreOptions> options = sluice::ParseRedisUrl(url);
    if (!options.ok()) {
      fmt::print(stderr, "{}\n", options.status().ToString());
      return 2;
    }
    options->timeout = std::chrono::seconds(2);
    store = *sluice::RedisStore::Create(*options);
  }
  Load load;
  load.store = store.get();
  load.limit = &limit;
  for (int i = 0; i < keys; ++i) {
    load.keys.push_back(fmt::format("k{}", i));
  }
  std::vector<std::unique_ptr<Caller>> callers;
  const SteadyClock::time_point start = SteadyClock::now();
  load.until = start + std::chrono::duration_cast<SteadyClock::duration>(
                           std::chrono::duration<double>(duration));
  load.running = inflight;
  for (int i = 0; i < inflight; ++i) {
    callers.push_back(std::make_unique<Caller>(
        Caller{.load = &load, .rng = std::mt19937_64(static_cast<uint64_t>(i) + 1)}));
    callers.back()->Ask();
  }
  while (load.running.load() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const double seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  std::vector<double>& l = load.latencies_us;
  std::sort(l.begin(), l.end());
  auto at = [&](double q) { return l.empty() ? 0.0 : l[static_cast<size_t>(q * (l.size() - 1))]; };
  std::string conflicts = "-";
  if (auto* memcached = dynamic_cast<sluice::MemcachedStore*>(store.get())) {
    const sluice::MemcachedStoreStats stats = memcached->Stats();
    conflicts = fmt::format("{:.2f}/{}",
                            static_cast<double>(stats.cas_conflicts) /
                                static_cast<double>(std::max<uint64_t>(1, stats.calls)),
                            stats.cas_exhausted);
  }
  // conflicts: cas conflicts per decision / calls that exhausted their retries.
  fmt::print("decisions/s {:.0f} p50 {:.0f}us p99 {:.0f}us errors {} conflicts {}\n",
             static_cast<double>(load.decisions.load()) / seconds, at(0.5), at(0.99),
             load.errors.load(), conflicts);
  return 0;
}
