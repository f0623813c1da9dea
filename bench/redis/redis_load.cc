// sluice_redis_load: decisions through RedisStore with a fixed number of calls in flight
// (a closed loop: each answer starts the next call), for bench/redis/run.sh, shares.sh,
// cluster.sh and settle.sh. One gcra limit, high enough that every call is admitted, on keys
// drawn from `--keys`; through `--stores` stores (standing for as many servers), with quota
// leasing when `--share-max` is set. Prints decisions per second, script calls per second,
// latency percentiles, and script calls and store calls (RedisStoreStats::calls) per decision.
// `--changed-from N` makes the limit one changed from N per second: each request names those
// earlier figures (LimitedKey::before), as sluiced's requests do after a reload that changed
// it (bench/redis/change.sh). `--limits 2` puts two limits on each request, on a key and on a
// second key of the same hash tag (one slot), or with `--apart` of its own (two slots: on a
// cluster, decided slot by slot).
//
// With --abuse-limit L: one key under a limit of L per second instead, asked by --inflight
// threads each waiting for its answer, at --rate decisions per second in all (0: as fast as
// they can), with the denial cache of --deny-cache entries (0: none). Prints decisions and
// script calls per second, script calls per decision, and how many were allowed.
//
// With --settle: each slot's call is a check that leaves a receipt (ChargeAllAsync, cost 4)
// and, once answered, that receipt's settle (SettleAllAsync) at a random real cost of 0 to 8
// (given back, unchanged, or charged past the limit up to 1,000 units of debt), with a `once`
// id of its own claimed for a minute: a decision is the check with its settle. Issue 33's
// benchmark (bench/redis/settle.sh): the settle must cost at most one more script call.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "fmt/format.h"

#include "sluice/clock.h"
#include "sluice/limit.h"
#include "sluice/redis_store.h"

namespace {

using SteadyClock = std::chrono::steady_clock;

struct Load {
  std::vector<sluice::RedisStore*> stores;
  const sluice::Limit* limit;
  std::span<const sluice::Limit> before;  // --changed-from: the limit's earlier figures.
  const sluice::SharePolicy* share = nullptr;
  std::atomic<uint64_t> decisions{0};
  std::vector<std::string> keys;
  std::vector<std::string> seconds;  // --limits 2: each key's partner.
  SteadyClock::time_point until;

  std::mutex mu;
  std::vector<double> latencies_us;  // Guarded by mu.
  std::atomic<uint64_t> errors{0};
  std::atomic<int> running{0};

  bool settle = false;  // --settle: a check, then its settle.
  uint64_t nonce = 0;   // --settle: what makes this run's `once` ids its own on the server.
};

constexpr int64_t kSettleCharged = 4;  // --settle: each check's cost; the settle's is 0 to 8.

// One slot of the loop: a call in flight, whose answer starts the next. An answer given
// before DecideAllAsync returns (from a share) is not followed by a nested call, which would
// recurse without end, but by the loop in Next.
struct Slot {
  Load* load;
  uint64_t seed;
  std::mt19937_64 rng{seed};
  sluice::Decision each[2];
  // --settle: the check's charges, and what its settle did.
  sluice::Charge charges[2];
  sluice::Settled settled[2];
  size_t at = 0;      // The key of the call in flight.
  size_t limits = 1;  // Its limits.
  uint64_t settles = 0;
  SteadyClock::time_point started;
  std::vector<double> latencies_us;
  // 0: a call is being made; 1: made, its answer still to come; 2: answered.
  std::atomic<int> state{0};

  void Next() {
    for (;;) {
      if (SteadyClock::now() >= load->until) {
        {
          std::lock_guard lock(load->mu);
          load->latencies_us.insert(load->latencies_us.end(), latencies_us.begin(),
                                    latencies_us.end());
        }
        load->running.fetch_sub(1);
        return;
      }
      at = rng() % load->keys.size();
      limits = load->seconds.empty() ? 1 : 2;
      const std::array<sluice::LimitedKey, 2> requests = Requests();
      started = SteadyClock::now();
      state = 0;
      sluice::RedisStore& store = *load->stores[seed % load->stores.size()];
      if (load->settle) {
        store.ChargeAllAsync({requests.data(), limits}, kSettleCharged, sluice::SystemClock().Now(),
                             {each, limits}, {charges, limits},
                             [this](absl::StatusOr<sluice::Decision> d) {
                               if (d.ok() && d->allowed) {
                                 Settle();
                               } else {
                                 Answered(false);
                               }
                             });
      } else {
        store.DecideAllAsync(
            {requests.data(), limits}, 1, sluice::SystemClock().Now(), {each, limits},
            [this](absl::StatusOr<sluice::Decision> d) { Answered(d.ok() && d->allowed); });
      }
      if (state.exchange(1) != 2) {
        return;  // Answered later: the answer goes on.
      }
    }
  }

  // The call in flight's limits: its key's, and with --limits 2 its partner's.
  std::array<sluice::LimitedKey, 2> Requests() const {
    return {sluice::LimitedKey{.limit = load->limit,
                               .key = load->keys[at],
                               .share = load->share,
                               .before = load->before},
            sluice::LimitedKey{.limit = load->limit,
                               .key = limits == 1 ? std::string_view() : load->seconds[at],
                               .before = load->before}};
  }

  // --settle: the check answered, allowed; its settle, at a random real cost.
  void Settle() {
    const std::array<sluice::LimitedKey, 2> requests = Requests();
    sluice::Settlement settlements[2];
    for (size_t i = 0; i < limits; ++i) {
      settlements[i] = {
          .charge = charges[i], .units = static_cast<int64_t>(rng() % 9), .max_debt = 1000};
    }
    const std::string once = fmt::format("{}.{}.{}", load->nonce, seed, ++settles);
    const sluice::Timestamp now = sluice::SystemClock().Now();
    load->stores[seed % load->stores.size()]->SettleAllAsync(
        {requests.data(), limits}, {settlements, limits}, once, now + std::chrono::minutes(1), now,
        {settled, limits}, [this](absl::Status status) { Answered(status.ok()); });
  }

  // The decision answered (with its settle): counted, and the next one started unless the
  // call that started it has not returned yet (Next's loop then goes on).
  void Answered(bool ok) {
    if (!ok) {
      load->errors.fetch_add(1);
    }
    load->decisions.fetch_add(1, std::memory_order_relaxed);
    latencies_us.push_back(
        std::chrono::duration<double, std::micro>(SteadyClock::now() - started).count());
    if (state.exchange(2) == 1) {
      Next();
    }
  }
};

// The flags.
struct Flags {
  std::string url = "redis://127.0.0.1:6379";
  int connections = 1;
  int pipeline = 16;
  int batch = 1;
  int inflight = 1;
  int keys = 100'000;
  int stores = 1;
  int64_t share_max = 0;
  int share_ttl_ms = 100;
  int limits = 1;
  bool apart = false;
  double duration = 5;
  int64_t abuse_limit = 0;
  double rate = 0;
  int64_t deny_cache = 0;
  bool settle = false;
  int64_t limit = 1'000'000;  // The gcra limit per second.
  int64_t changed_from = 0;   // Not 0: the limit was this many per second before (a change).
};

void AddFlags(CLI::App& app, Flags& f) {
  app.add_option("--url", f.url, "Redis URL");
  app.add_option("--connections", f.connections, "connections to Redis");
  app.add_option("--pipeline", f.pipeline, "script calls in flight per connection");
  app.add_option("--batch", f.batch, "decisions per script call, at most");
  app.add_option("--inflight", f.inflight, "decisions in flight");
  app.add_option("--keys", f.keys, "distinct keys");
  app.add_option("--duration", f.duration, "seconds");
  app.add_option("--stores", f.stores, "stores (servers) the calls are spread over")
      ->check(CLI::Range(1, 64));
  app.add_option("--share-max", f.share_max, "quota leasing: the most units a share holds (0: off)")
      ->check(CLI::Range(int64_t{0}, sluice::kMaxShare));
  app.add_option("--share-ttl-ms", f.share_ttl_ms, "quota leasing: how long a share lives")
      ->check(CLI::Range(1, 60'000));
  app.add_option("--limits", f.limits, "limits per request: 1, or 2 on two keys")
      ->check(CLI::Range(1, 2));
  app.add_flag("--apart", f.apart, "--limits 2: the two keys in different hash slots");
  app.add_option("--abuse-limit", f.abuse_limit, "one key under this many per second (0: off)");
  app.add_option("--rate", f.rate, "--abuse-limit: decisions per second in all (0: unpaced)");
  app.add_option("--deny-cache", f.deny_cache, "denial cache entries (0: off)");
  app.add_flag("--settle", f.settle, "each decision a check (cost 4), then its settle (0 to 8)");
  app.add_option("--limit", f.limit, "the gcra limit, per second (every call admitted)")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000'000}));
  app.add_option("--changed-from", f.changed_from,
                 "a limit changed from this many per second (0: unchanged): each request names "
                 "its earlier figures, and a key is carried from them at its first decision")
      ->check(CLI::Range(int64_t{0}, int64_t{1'000'000'000}));
}

// `f.stores` stores on `f.url`, or the reason why not.
absl::StatusOr<std::vector<std::unique_ptr<sluice::RedisStore>>> MakeStores(const Flags& f) {
  absl::StatusOr<sluice::RedisStoreOptions> options = sluice::ParseRedisUrl(f.url);
  if (!options.ok()) {
    return options.status();
  }
  options->connections = f.connections;
  options->pipeline = f.pipeline;
  options->batch = f.batch;
  options->timeout = std::chrono::milliseconds(2000);
  options->shares = f.share_max > 0;
  options->deny_cache_entries = f.deny_cache;
  std::vector<std::unique_ptr<sluice::RedisStore>> stores;
  for (int i = 0; i < f.stores; ++i) {
    absl::StatusOr<std::unique_ptr<sluice::RedisStore>> store =
        sluice::RedisStore::Create(*options);
    if (!store.ok()) {
      return store.status();
    }
    stores.push_back(*std::move(store));
  }
  return stores;
}

// The stores' script calls and store calls (RedisStoreStats::calls: checks, settles, ...).
std::pair<uint64_t, uint64_t> Calls(
    const std::vector<std::unique_ptr<sluice::RedisStore>>& stores) {
  std::pair<uint64_t, uint64_t> n{0, 0};
  for (const auto& s : stores) {
    const sluice::RedisStoreStats stats = s->Stats();
    n.first += stats.script_calls;
    n.second += stats.calls;
  }
  return n;
}

// Keeps `inflight` calls going until `duration` seconds have passed; the seconds it took.
double Run(Load& load, int inflight, double duration) {
  const auto start = SteadyClock::now();
  load.until = start + std::chrono::duration_cast<SteadyClock::duration>(
                           std::chrono::duration<double>(duration));
  std::vector<std::unique_ptr<Slot>> slots;
  load.running = inflight;
  for (int i = 0; i < inflight; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->load = &load;
    slot->seed = static_cast<uint64_t>(i);
    slot->rng.seed(slot->seed);
    slots.push_back(std::move(slot));
  }
  for (auto& slot : slots) {
    slot->Next();
  }
  while (load.running.load() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

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
  Flags f;
  AddFlags(app, f);
  CLI11_PARSE(app, argc, argv);
  absl::StatusOr<std::vector<std::unique_ptr<sluice::RedisStore>>> stores = MakeStores(f);
  if (!stores.ok()) {
    std::fprintf(stderr, "%s\n", std::string(stores.status().message()).c_str());
    return 2;
  }
  const sluice::SharePolicy share{.max = f.share_max,
                                  .ttl = std::chrono::milliseconds(f.share_ttl_ms)};
  const sluice::Limit limit = *sluice::Limit::Create(
      {.algorithm = sluice::Algorithm::kGcra, .limit = f.limit, .period = std::chrono::seconds(1)});
  std::vector<sluice::Limit> earlier;
  if (f.changed_from > 0) {
    earlier.push_back(*sluice::Limit::Create({.algorithm = sluice::Algorithm::kGcra,
                                              .limit = f.changed_from,
                                              .period = std::chrono::seconds(1)}));
  }
  if (f.abuse_limit > 0) {
    return RunAbusive(*stores->front(), f.abuse_limit, f.inflight, f.rate, f.duration);
  }
  Load load;
  for (auto& s : *stores) {
    load.stores.push_back(s.get());
  }
  load.limit = &limit;
  load.before = earlier;
  load.share = f.share_max > 0 ? &share : nullptr;
  load.settle = f.settle;
  load.nonce = static_cast<uint64_t>(SteadyClock::now().time_since_epoch().count());
  AddKeys(load, f.keys, f.limits, f.apart);
  // Warm up: connect, load the script.
  for (auto& s : *stores) {
    for (int i = 0; i < 100; ++i) {
      (void)s->Decide(limit, load.keys[static_cast<size_t>(i) % load.keys.size()], 1, {});
    }
  }
  const std::pair<uint64_t, uint64_t> before = Calls(*stores);
  const double seconds = Run(load, f.inflight, f.duration);
  const std::pair<uint64_t, uint64_t> after = Calls(*stores);
  const double scripts = static_cast<double>(after.first - before.first);
  const double store_calls = static_cast<double>(after.second - before.second);
  std::vector<double>& lat = load.latencies_us;
  std::sort(lat.begin(), lat.end());
  auto percentile = [&](double p) {
    return lat.empty() ? 0.0 : lat[std::min(lat.size() - 1, static_cast<size_t>(p * lat.size()))];
  };
  const double calls = static_cast<double>(load.decisions.load());
  std::printf(
      "%.0f decisions/s  %.0f script calls/s (%.1f decisions each)  p50 %.0f us  p99 %.0f us  "
      "errors %llu  %.3f script calls per decision  %.3f store calls per decision  "
      "%.0f decisions\n",
      calls / seconds, scripts / seconds, scripts > 0 ? calls / scripts : 0.0, percentile(0.5),
      percentile(0.99), static_cast<unsigned long long>(load.errors.load()),
      calls > 0 ? scripts / calls : 0.0, calls > 0 ? store_calls / calls : 0.0, calls);
  return load.errors.load() == 0 ? 0 : 1;
}
