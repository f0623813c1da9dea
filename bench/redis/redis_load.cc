// sluice_redis_load: decisions through RedisStore with a fixed number of calls in flight
// (a closed loop: each answer starts the next call), for bench/redis/run.sh. One gcra limit,
// high enough that every call is admitted, on keys drawn from `--keys`. Prints decisions per
// second, script calls per second and latency percentiles. `--limits 2` puts two limits on
// each request, on a key and on a second key of the same hash tag (one slot), or with
// `--apart` of its own (two slots: on a cluster, decided slot by slot).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
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
  absl::StatusOr<std::unique_ptr<sluice::RedisStore>> store = sluice::RedisStore::Create(*options);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", std::string(store.status().message()).c_str());
    return 2;
  }
  const sluice::Limit limit = *sluice::Limit::Create({.algorithm = sluice::Algorithm::kGcra,
                                                      .limit = 1'000'000,
                                                      .period = std::chrono::seconds(1)});

  Load load;
  load.store = store->get();
  load.limit = &limit;
  AddKeys(load, keys, limits, apart);
  // Warm up: connect, load the script.
  for (int i = 0; i < 100; ++i) {
    (void)(*store)->Decide(limit, load.keys[static_cast<size_t>(i) % load.keys.size()], 1, {});
  }
  const sluice::RedisStoreStats before = (*store)->Stats();
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
  const sluice::RedisStoreStats after = (*store)->Stats();
  std::vector<double>& lat = load.latencies_us;
  std::sort(lat.begin(), lat.end());
  auto percentile = [&](double p) {
    return lat.empty() ? 0.0 : lat[std::min(lat.size() - 1, static_cast<size_t>(p * lat.size()))];
  };
  const double calls = static_cast<double>(load.decided.load());
  const double scripts = static_cast<double>(after.script_calls - before.script_calls);
  std::printf(
      "%.0f decisions/s  %.0f script calls/s (%.1f decisions each)  p50 %.0f us  p99 %.0f us  "
      "errors %llu\n",
      calls / seconds, scripts / seconds, scripts > 0 ? calls / scripts : 0.0, percentile(0.5),
      percentile(0.99), static_cast<unsigned long long>(load.errors.load()));
  return load.errors.load() == 0 ? 0 : 1;
}
