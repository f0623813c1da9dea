// sluice_redis_load: decisions through RedisStore with a fixed number of calls in flight
// (a closed loop: each answer starts the next call), for bench/redis/run.sh. One gcra limit,
// high enough that every call is admitted, on keys drawn from `--keys`. Prints decisions per
// second, script calls per second and latency percentiles. `--limits 2` puts two limits on
// each request, on a key and on a second key of the same hash tag (one slot), or with
// `--apart` of its own (two slots: on a cluster, decided slot by slot).
//
// With --abuse-limit L: one key under a limit of L per second instead, asked by --inflight
// threads each waiting for its answer, at --rate decisions per second in all (0: as fast as
// they can), with the denial cache of --deny-cache entries (0: none). Prints decisions and
// script calls per second, script calls per decision, and how many were allowed.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "fmt/format.h"

#include "sluice/limit.h"
#include "sluice/redis_store.h"

namespace {

using SteadyClock = std::chrono::steady_clock;

struct Load {
  sluice::RedisStore* store;
  const sluice::Limit* limit;
  std::vector<std::string> keys;
  std::vector<std::string> seconds;  // --limits 2: each key's partner.
  SteadyClock::time_point until;

  std::mutex mu;
  std::vector<double> latencies_us;  // Guarded by mu.
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> decided{0};
  std::atomic<int> running{0};
};

// One slot of the loop: a call in flight, whose answer starts the next.
struct Slot {
  Load* load;
  uint64_t seed;
  std::mt19937_64 rng{seed};
  sluice::Decision each[2];
  SteadyClock::time_point started;
  std::vector<double> latencies_us;

  void Next() {
    if (SteadyClock::now() >= load->until) {
      {
        std::lock_guard lock(load->mu);
        load->latencies_us.insert(load->latencies_us.end(), latencies_us.begin(),
                                  latencies_us.end());
      }
      load->running.fetch_sub(1);
      return;
    }
    const size_t at = rng() % load->keys.size();
    const size_t limits = load->seconds.empty() ? 1 : 2;
    const sluice::LimitedKey requests[] = {
        {load->limit, load->keys[at]},
        {load->limit, limits == 1 ? std::string_view() : load->seconds[at]}};
    started = SteadyClock::now();
    load->store->DecideAllAsync(
        {requests, limits}, 1, sluice::Timestamp{}, {each, limits},
        [this](absl::StatusOr<sluice::Decision> d) {
          if (!d.ok() || !d->allowed) {
            load->errors.fetch_add(1);
          }
          load->decided.fetch_add(1, std::memory_order_relaxed);
          latencies_us.push_back(
              std::chrono::duration<double, std::micro>(SteadyClock::now() - started).count());
          Next();
        });
  }
};

// `keys` keys, and with `limits` 2 a partner for each: "{k7}:ip" shares k7's hash tag (and
// slot), "ip7" (`apart`) has a slot of its own.
void AddKeys(Load& load, int keys, int limits, bool apart) {
  for (int i = 0; i < keys; ++i) {
    load.keys.push_back(fmt::format("k{}", i));
    if (limits == 2) {
      load.seconds.push_back(apart ? fmt::format("ip{}", i) : fmt::format("{{k{}}}:ip", i));
    }
  }
}

// The closed loop: `inflight` calls in flight on `keys` keys (and their partners with `limits`
// 2), every one admitted.
int RunClosedLoop(sluice::RedisStore& store, int inflight, int keys, int limits, bool apart,
                  double duration) {
  const sluice::Limit limit = *sluice::Limit::Create({.algorithm = sluice::Algorithm::kGcra,
                                                      .limit = 1'000'000,
                                                      .period = std::chrono::seconds(1)});

  Load load;
  load.store = &store;
  load.limit = &limit;
  AddKeys(load, keys, limits, apart);
  // Warm up: connect, load the script.
  for (int i = 0; i < 100; ++i) {
    (void)store.Decide(limit, load.keys[static_cast<size_t>(i) % load.keys.size()], 1, {});
  }
  const sluice::RedisStoreStats before = store.Stats();
  const auto start = SteadyClock::now();
  load.until = start + std::chrono::duration_cast<SteadyClock::duration>(
                           std::chrono::duration<double>(duration));
  std::vector<std::unique_ptr<Slot>> slots;
  load.running = inflight;
  for (int i = 0; i < inflight; ++i) {
    slots.push_back(std::make_unique<Slot>(Slot{.load = &load, .seed = static_cast<uint64_t>(i)}));
  }
  for (auto& slot : slots) {
    slot->Next();
  }
  while (load.running.load() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const double seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  const sluice::RedisStoreStats after = store.Stats();
  std::vector<double>& lat = load.latencies_us;
  std::sort(lat.begin(), lat.end());
  auto percentile = [&](double p) {
    return lat.empty() ? 0.0 : lat[std::min(lat.size() - 1, static_cast<size_t>(p * lat.size()))];
  };
  const double calls = static_cast<double>(after.calls - before.calls);
  const double scripts = static_cast<double>(after.script_calls - before.script_calls);
  std::printf(
      "%.0f decisions/s  %.0f script calls/s (%.1f decisions each)  p50 %.0f us  p99 %.0f us  "
      "errors %llu\n",
      calls / seconds, scripts / seconds, scripts > 0 ? calls / scripts : 0.0, percentile(0.5),
      percentile(0.99), static_cast<unsigned long long>(load.errors.load()));
  return load.errors.load() == 0 ? 0 : 1;
}

// The abusive key: `threads` threads on one key, paced to `rate` decisions per second in all
// (0: unpaced), for `duration` seconds. Returns the exit status.
int RunAbusive(sluice::RedisStore& store, int64_t limit_per_second, int threads, double rate,
               double duration) {
  const sluice::Limit limit = *sluice::Limit::Create(
      {.limit = limit_per_second, .period = std::chrono::seconds(1)});  // fixed_window
  (void)store.Decide(limit, "warm-up", 1, {});
  // A key of this run's own: another run's on the same Redis may have spent its window.
  const std::string key = fmt::format("abuser:{}", SteadyClock::now().time_since_epoch().count());
  const sluice::RedisStoreStats before = store.Stats();
  std::atomic<uint64_t> allowed{0};
  std::atomic<uint64_t> errors{0};
  const auto start = SteadyClock::now();
  const auto until = start + std::chrono::duration_cast<SteadyClock::duration>(
                                 std::chrono::duration<double>(duration));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int64_t i = 0;; ++i) {
        auto next = SteadyClock::now();
        if (rate > 0) {  // This thread's share: every threads/rate seconds, staggered.
          next = start + std::chrono::duration_cast<SteadyClock::duration>(
                             std::chrono::duration<double>((i * threads + t) / rate));
          std::this_thread::sleep_until(next);
        }
        if (next >= until) {
          return;
        }
        absl::StatusOr<sluice::Decision> d = store.Decide(limit, key, 1, {});
        if (!d.ok()) {
          errors.fetch_add(1);
        } else if (d->allowed) {
          allowed.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& w : workers) {
    w.join();
  }
  const double seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  const sluice::RedisStoreStats after = store.Stats();
  const double calls = static_cast<double>(after.calls - before.calls);
  const double scripts = static_cast<double>(after.script_calls - before.script_calls);
  std::printf(
      "%.0f decisions/s  %.0f script calls/s  %.4f script calls per decision  %.1f allowed/s  "
      "%llu answered locally  errors %llu\n",
      calls / seconds, scripts / seconds, calls > 0 ? scripts / calls : 0.0,
      static_cast<double>(allowed.load()) / seconds,
      static_cast<unsigned long long>(after.denials_answered_locally -
                                      before.denials_answered_locally),
      static_cast<unsigned long long>(errors.load()));
  return errors.load() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Decisions through RedisStore with calls in flight"};
  std::string url = "redis://127.0.0.1:6379";
  int connections = 1;
  int pipeline = 16;
  int batch = 1;
  int inflight = 1;
  int keys = 100'000;
  int limits = 1;
  bool apart = false;
  double duration = 5;
  int64_t abuse_limit = 0;
  double rate = 0;
  int64_t deny_cache = 0;
  app.add_option("--url", url, "Redis URL");
  app.add_option("--connections", connections, "connections to Redis");
  app.add_option("--pipeline", pipeline, "script calls in flight per connection");
  app.add_option("--batch", batch, "decisions per script call, at most");
  app.add_option("--inflight", inflight, "decisions in flight");
  app.add_option("--keys", keys, "distinct keys");
  app.add_option("--limits", limits, "limits per request: 1, or 2 on two keys")
      ->check(CLI::Range(1, 2));
  app.add_flag("--apart", apart, "--limits 2: the two keys in different hash slots");
  app.add_option("--duration", duration, "seconds");
  app.add_option("--abuse-limit", abuse_limit, "one key under this many per second (0: off)");
  app.add_option("--rate", rate, "--abuse-limit: decisions per second in all (0: unpaced)");
  app.add_option("--deny-cache", deny_cache, "denial cache entries (0: off)");
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<sluice::RedisStoreOptions> options = sluice::ParseRedisUrl(url);
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  options->connections = connections;
  options->pipeline = pipeline;
  options->batch = batch;
  options->timeout = std::chrono::milliseconds(2000);
  options->deny_cache_entries = deny_cache;
  absl::StatusOr<std::unique_ptr<sluice::RedisStore>> store = sluice::RedisStore::Create(*options);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", std::string(store.status().message()).c_str());
    return 2;
  }
  if (abuse_limit > 0) {
    return RunAbusive(**store, abuse_limit, inflight, rate, duration);
  }
  return RunClosedLoop(**store, inflight, keys, limits, apart, duration);
}
