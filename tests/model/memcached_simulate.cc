// The differential test's driver for the Memcached store (tests/model/differential.py
// --memcached): replays a trace through a MemcachedStore at each row's own time and writes the
// decisions as `sluice simulate` writes them, so that the same independent model
// (spec_model.py) checks the decisions the store makes from the states it keeps in memcached.
//
//   sluice_memcached_simulate --memcached HOST:PORT --prefix PREFIX
//       --algorithm NAME --limit N --period DURATION [--burst B] [--buckets K] TRACE
//
// The store reads no clock: each row is decided at its time_us. PREFIX keeps each run's items
// apart from the runs before it on the same memcached. Exit status 0 on success; 2 for bad
// flags, a bad trace or a limit the store refuses (its message on stderr); 1 when the store
// fails a decision (memcached unreachable, an item that is not a state).

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "fmt/format.h"

#include "sluice/duration.h"
#include "sluice/limit.h"
#include "sluice/memcached_store.h"
#include "tools/trace.h"

namespace sluice {
namespace {

constexpr int kStoreError = 1;
constexpr int kUsageError = 2;

struct Flags {
  std::string memcached;
  std::string prefix = "sluice:";
  std::string algorithm;
  std::string limit;
  std::string period;
  std::optional<std::string> burst;
  std::optional<std::string> buckets;
  std::string trace;
};

int Fail(std::string_view message) {
  std::cerr << "sluice_memcached_simulate: " << message << "\n";
  return kUsageError;
}

int Fail(const absl::Status& status) {
  std::cerr << "sluice_memcached_simulate: " << status.message() << "\n";
  return kUsageError;
}

// Every flag takes a value; the one argument left is the trace.
std::optional<Flags> ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (!arg.starts_with("--")) {
      flags.trace = arg;
      continue;
    }
    if (i + 1 == argc) {
      return std::nullopt;
    }
    const std::string value = argv[++i];
    if (arg == "--memcached") {
      flags.memcached = value;
    } else if (arg == "--prefix") {
      flags.prefix = value;
    } else if (arg == "--algorithm") {
      flags.algorithm = value;
    } else if (arg == "--limit") {
      flags.limit = value;
    } else if (arg == "--period") {
      flags.period = value;
    } else if (arg == "--burst") {
      flags.burst = value;
    } else if (arg == "--buckets") {
      flags.buckets = value;
    } else {
      return std::nullopt;
    }
  }
  if (flags.memcached.empty() || flags.algorithm.empty() || flags.trace.empty()) {
    return std::nullopt;
  }
  return flags;
}

std::optional<int64_t> ParseCount(const std::string& text) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);  // NOLINT(google-runtime-int)
  if (text.empty() || *end != '\0') {
    return std::nullopt;
  }
  return static_cast<int64_t>(value);
}

absl::StatusOr<Limit> LimitOf(const Flags& flags) {
  const absl::StatusOr<Algorithm> algorithm = ParseAlgorithm(flags.algorithm);
  if (!algorithm.ok()) {
    return algorithm.status();
  }
  const absl::StatusOr<Micros> period = ParseDuration(flags.period);
  if (!period.ok()) {
    return period.status();
  }
  const std::optional<int64_t> limit = ParseCount(flags.limit);
  std::optional<int64_t> burst;
  std::optional<int64_t> buckets;
  if (flags.burst) {
    burst = ParseCount(*flags.burst);
  }
  if (flags.buckets) {
    buckets = ParseCount(*flags.buckets);
  }
  if (!limit || (flags.burst && !burst) || (flags.buckets && !buckets)) {
    return absl::InvalidArgumentError("--limit, --burst and --buckets take integers");
  }
  return Limit::Create({.algorithm = *algorithm,
                        .limit = *limit,
                        .period = *period,
                        .burst = burst,
                        .buckets = buckets});
}

absl::StatusOr<std::unique_ptr<MemcachedStore>> StoreOf(const Flags& flags) {
  absl::StatusOr<MemcachedStoreOptions> options =
      ParseMemcachedUrl("memcached://" + flags.memcached);
  if (!options.ok()) {
    return options.status();
  }
  options->threads = 1;
  // A decision memcached did not make is the call's error (and the run's), never an answer.
  options->on_failure = FailurePolicy::kDeny;
  options->key_prefix = flags.prefix;
  // Generous: a busy machine must not turn a slow answer into a failed decision.
  options->timeout = std::chrono::seconds(10);
  // An item's expiry runs on memcached's own clock while the trace runs on its times, which
  // leap days ahead in a millisecond. With the default margin (1 s) a state whose reset_after
  // is short could expire between two rows of a run the machine paused for a second, and the
  // key start afresh where the trace's time says it must not: the margin makes every item
  // outlive the run, so that only the decisions are compared.
  options->expiry_margin = std::chrono::hours(1);
  return MemcachedStore::Create(*std::move(options));
}

int Run(const Flags& flags) {
  const absl::StatusOr<Limit> limit = LimitOf(flags);
  if (!limit.ok()) {
    return Fail(limit.status());
  }
  if (absl::Status s = MemcachedStore::Supports(*limit); !s.ok()) {
    return Fail(s);
  }
  absl::StatusOr<std::unique_ptr<MemcachedStore>> store = StoreOf(flags);
  if (!store.ok()) {
    return Fail(store.status());
  }
  std::ifstream file(flags.trace);
  if (!file) {
    return Fail(fmt::format("cannot open trace '{}'", flags.trace));
  }
  tools::TraceReader reader(file);
  if (absl::Status s = reader.ReadHeader(); !s.ok()) {
    return Fail(s);
  }
  std::cout << "time_us,key,cost,allowed,remaining,reset_after_us,retry_after_us,delay_us\n";
  while (true) {
    absl::StatusOr<std::optional<tools::TraceRow>> row = reader.Next();
    if (!row.ok()) {
      std::cout.flush();
      return Fail(row.status());
    }
    if (!row->has_value()) {
      break;
    }
    const tools::TraceRow& r = **row;
    absl::StatusOr<Decision> d =
        (*store)->Decide(*limit, r.key, r.cost, Timestamp(Micros(r.time_us)));
    if (!d.ok()) {
      std::cout.flush();
      std::cerr << "sluice_memcached_simulate: at " << r.time_us << ": " << d.status() << "\n";
      return kStoreError;
    }
    std::cout << fmt::format("{},{},{},{},{},{},{},{}\n", r.time_us, r.key, r.cost,
                             d->allowed ? 1 : 0, d->remaining, d->reset_after.count(),
                             d->retry_after.count(), d->delay.count());
  }
  std::cout.flush();
  return 0;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  const std::optional<sluice::Flags> flags = sluice::ParseFlags(argc, argv);
  if (!flags) {
    return sluice::Fail(
        "usage: --memcached HOST:PORT [--prefix PREFIX] --algorithm NAME --limit N --period D "
        "[--burst B] [--buckets K] TRACE");
  }
  return sluice::Run(*flags);
}
