// The settle differential's driver (tests/model/settle_differential.py): replays a trace of
// charges, settles and resets through a store at each row's own time and writes every figure,
// so that the independent model (spec_model_settle.py) checks the store's settles.
//
//   sluice_settle_simulate [--memcached HOST:PORT --prefix PREFIX]
//       --algorithm NAME --limit N --period DURATION [--burst B] [--buckets K] TRACE
//
// Without --memcached the store is a MemoryStore; with it, a MemcachedStore on that server
// (PREFIX keeps each run's items apart). The trace's header is
// `op,time_us,key,cost,charge_row,max_debt,once,once_until`, one row per operation:
//   charge: ChargeAll of `cost`; writes the decision's five figures and the Charge (at,
//           units, ahead);
//   settle: SettleAll of the charge row `charge_row` made (-1: none) at `cost` units (M) with
//           `max_debt`, claiming `once` ("-": none) until `once_until`; writes `ok` with
//           given_back, charged and the five figures after, or `already` (AlreadyExists) or
//           `invalid` (InvalidArgument: a debt the store cannot hold);
//   reset:  ResetAll; writes `ok`.
// Exit status 0 on success; 2 for bad flags, a bad trace or a limit the store refuses; 1 when
// the store fails otherwise (its error on stderr).

#include <charconv>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "fmt/format.h"

#include "sluice/duration.h"
#include "sluice/limit.h"
#include "sluice/memcached_store.h"
#include "sluice/memory_store.h"
#include "sluice/settle.h"

namespace sluice {
namespace {

constexpr int kStoreError = 1;
constexpr int kUsageError = 2;

int Fail(std::string_view message) {
  std::cerr << "sluice_settle_simulate: " << message << "\n";
  return kUsageError;
}

std::optional<int64_t> Int(std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

struct Flags {
  std::string memcached;
  std::string prefix = "sluice:";
  std::string algorithm;
  std::optional<int64_t> limit;
  std::string period;
  std::optional<int64_t> burst;
  std::optional<int64_t> buckets;
  std::string trace;
};

std::optional<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (!arg.starts_with("--")) {
      f.trace = arg;
      continue;
    }
    if (i + 1 == argc) {
      return std::nullopt;
    }
    const std::string value = argv[++i];
    if (arg == "--memcached") {
      f.memcached = value;
    } else if (arg == "--prefix") {
      f.prefix = value;
    } else if (arg == "--algorithm") {
      f.algorithm = value;
    } else if (arg == "--limit") {
      f.limit = Int(value);
    } else if (arg == "--period") {
      f.period = value;
    } else if (arg == "--burst" && Int(value)) {
      f.burst = Int(value);
    } else if (arg == "--buckets" && Int(value)) {
      f.buckets = Int(value);
    } else {
      return std::nullopt;
    }
  }
  if (f.algorithm.empty() || !f.limit || f.trace.empty()) {
    return std::nullopt;
  }
  return f;
}

absl::StatusOr<std::unique_ptr<Store>> StoreOf(const Flags& flags, const Limit& limit) {
  if (flags.memcached.empty()) {
    if (absl::Status s = MemoryStore::Supports(limit); !s.ok()) {
      return s;
    }
    return std::unique_ptr<Store>(std::make_unique<MemoryStore>());
  }
  if (absl::Status s = MemcachedStore::Supports(limit); !s.ok()) {
    return s;
  }
  absl::StatusOr<MemcachedStoreOptions> options =
      ParseMemcachedUrl("memcached://" + flags.memcached);
  if (!options.ok()) {
    return options.status();
  }
  options->threads = 1;
  options->key_prefix = flags.prefix;
  options->timeout = std::chrono::seconds(10);  // A busy machine's slow answer is no failure.
  // Items outlive the run on memcached's own clock (memcached_simulate.cc says why).
  options->expiry_margin = std::chrono::hours(1);
  absl::StatusOr<std::unique_ptr<MemcachedStore>> store = MemcachedStore::Create(*options);
  if (!store.ok()) {
    return store.status();
  }
  return std::unique_ptr<Store>(*std::move(store));
}

// A 128-bit number in decimal (fmt has no Int128 of its own here).
std::string Decimal(Int128 v) {
  char buffer[48];
  char* end = buffer + sizeof(buffer);
  char* p = end;
  const bool negative = v < 0;
  do {
    const auto digit = static_cast<int>(v % 10);
    *--p = static_cast<char>('0' + (digit < 0 ? -digit : digit));
    v /= 10;
  } while (v != 0);
  if (negative) {
    *--p = '-';
  }
  return std::string(p, end);
}

std::string Figures(const Decision& d) {
  return fmt::format("{},{},{},{},{}", d.allowed ? 1 : 0, d.remaining, d.reset_after.count(),
                     d.retry_after.count(), d.delay.count());
}

// One row of the trace, run; its output line, or the store's error.
absl::StatusOr<std::string> RunRow(Store& store, const Limit& limit,
                                   const std::vector<std::string_view>& cells,
                                   std::vector<Charge>& charges) {
  const std::optional<int64_t> t = Int(cells[1]);
  const std::optional<int64_t> cost = Int(cells[3]);
  const std::optional<int64_t> row = Int(cells[4]);
  const std::optional<int64_t> max_debt = Int(cells[5]);
  const std::optional<int64_t> until = Int(cells[7]);
  if (!t || !cost || !row || !max_debt || !until || *row >= static_cast<int64_t>(charges.size())) {
    return absl::InvalidArgumentError("a cell is not an integer or names a later row");
  }
  const LimitedKey request{.limit = &limit, .key = cells[2]};
  const Timestamp now{Micros(*t)};
  charges.emplace_back();
  if (cells[0] == "charge") {
    Decision each;
    absl::StatusOr<Decision> d =
        store.ChargeAll({&request, 1}, *cost, now, {&each, 1}, {&charges.back(), 1});
    if (!d.ok()) {
      return d.status();
    }
    const Charge& c = charges.back();
    return fmt::format("{},{},{},{}", Figures(*d), c.at.time_since_epoch().count(), c.units,
                       Decimal(c.ahead));
  }
  if (cells[0] == "settle") {
    const Settlement settlement{.charge = *row >= 0 ? charges[static_cast<size_t>(*row)] : Charge{},
                                .units = *cost,
                                .max_debt = *max_debt};
    const std::string_view once = cells[6] == "-" ? "" : cells[6];
    Settled settled;
    const absl::Status s = store.SettleAll({&request, 1}, {&settlement, 1}, once,
                                           Timestamp(Micros(*until)), now, {&settled, 1});
    if (absl::IsAlreadyExists(s)) {
      return std::string("already");
    }
    if (absl::IsInvalidArgument(s)) {
      return std::string("invalid");
    }
    if (!s.ok()) {
      return s;
    }
    return fmt::format("ok,{},{},{}", settled.given_back, settled.charged, Figures(settled.after));
  }
  if (cells[0] == "reset") {
    if (absl::Status s = store.ResetAll({&request, 1}, now); !s.ok()) {
      return s;
    }
    return std::string("ok");
  }
  return absl::InvalidArgumentError(fmt::format("unknown op '{}'", cells[0]));
}

int Run(const Flags& flags) {
  const absl::StatusOr<Algorithm> algorithm = ParseAlgorithm(flags.algorithm);
  const absl::StatusOr<Micros> period = ParseDuration(flags.period);
  if (!algorithm.ok() || !period.ok()) {
    return Fail("bad --algorithm or --period");
  }
  const absl::StatusOr<Limit> limit = Limit::Create({.algorithm = *algorithm,
                                                     .limit = *flags.limit,
                                                     .period = *period,
                                                     .burst = flags.burst,
                                                     .buckets = flags.buckets});
  if (!limit.ok()) {
    return Fail(limit.status().ToString());
  }
  absl::StatusOr<std::unique_ptr<Store>> store = StoreOf(flags, *limit);
  if (!store.ok()) {
    return Fail(store.status().ToString());
  }
  std::ifstream file(flags.trace);
  std::string line;
  if (!file || !std::getline(file, line)) {
    return Fail(fmt::format("cannot read trace '{}'", flags.trace));
  }
  std::vector<Charge> charges;  // By row: what each charge row charged.
  for (int number = 2; std::getline(file, line); ++number) {
    std::vector<std::string_view> cells;
    for (size_t start = 0;;) {
      const size_t comma = line.find(',', start);
      cells.push_back(std::string_view(line).substr(start, comma - start));
      if (comma == std::string::npos) {
        break;
      }
      start = comma + 1;
    }
    if (cells.size() != 8) {
      return Fail(fmt::format("line {}: 8 cells wanted", number));
    }
    absl::StatusOr<std::string> out = RunRow(**store, *limit, cells, charges);
    if (!out.ok()) {
      std::cout.flush();
      std::cerr << "sluice_settle_simulate: line " << number << ": " << out.status() << "\n";
      return absl::IsInvalidArgument(out.status()) ? kUsageError : kStoreError;
    }
    std::cout << cells[0] << "," << *out << "\n";
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
        "usage: [--memcached HOST:PORT --prefix PREFIX] --algorithm NAME --limit N --period D "
        "[--burst B] [--buckets K] TRACE");
  }
  return sluice::Run(*flags);
}
