// The sluice command line. `sluice simulate` replays a trace through the algorithms
// (docs/simulate.md); exit status 0 on success, 2 for bad flags or a bad trace.
// `sluice check` asks a running sluiced (docs/server.md); exit status 0 when allowed, 1 when
// denied, 2 on an error.

#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "fmt/format.h"

#include "sluice/duration.h"
#include "sluice/limit.h"
#include "tools/check.h"
#include "tools/simulate.h"
#include "tools/svg.h"

namespace sluice::tools {
namespace {

constexpr int kUsageError = 2;

struct SimulateFlags {
  std::string algorithm;
  std::string compare;
  int64_t limit = 0;
  std::string period;
  std::optional<int64_t> burst;
  std::optional<int64_t> buckets;
  std::string svg;
  std::string trace = "-";
};

int Fail(std::string_view message) {
  std::cerr << "sluice simulate: " << message << "\n";
  return kUsageError;
}

int Fail(std::string_view context, const absl::Status& status) {
  std::cerr << "sluice simulate: " << context << ": " << status.message() << "\n";
  return kUsageError;
}

int RunSimulate(const SimulateFlags& flags) {
  if (flags.algorithm.empty() == flags.compare.empty()) {
    return Fail("give exactly one of --algorithm NAME and --compare NAME,NAME,...");
  }
  const absl::StatusOr<Micros> period = ParseDuration(flags.period);
  if (!period.ok()) {
    return Fail("--period", period.status());
  }
  std::vector<Lane> lanes;
  const std::string& names = flags.algorithm.empty() ? flags.compare : flags.algorithm;
  const char* const flag = flags.algorithm.empty() ? "--compare" : "--algorithm";
  for (std::string_view name : SplitCommas(names)) {
    const absl::StatusOr<Algorithm> algorithm = ParseAlgorithm(name);
    if (!algorithm.ok()) {
      return Fail(flag, algorithm.status());
    }
    const absl::StatusOr<Limit> limit = Limit::Create({.algorithm = *algorithm,
                                                       .limit = flags.limit,
                                                       .period = *period,
                                                       .burst = flags.burst,
                                                       .buckets = flags.buckets});
    if (!limit.ok()) {
      return Fail(name, limit.status());
    }
    lanes.push_back({*limit, {}});
  }

  std::ifstream file;
  if (flags.trace != "-") {
    file.open(flags.trace);
    if (!file) {
      return Fail(fmt::format("cannot open trace '{}'", flags.trace));
    }
  }
  std::istream& in = flags.trace == "-" ? std::cin : file;
  const KeepRows keep = flags.svg.empty() ? KeepRows::kNo : KeepRows::kYes;
  if (absl::Status s = Simulate(in, std::cout, lanes, keep); !s.ok()) {
    return Fail(flags.trace == "-" ? "stdin" : flags.trace, s);
  }
  if (!flags.svg.empty()) {
    std::ofstream out(flags.svg, std::ios::trunc);
    out << RenderSvg(lanes);
    out.close();
    if (!out) {
      return Fail(fmt::format("--svg: cannot write '{}'", flags.svg));
    }
    std::cerr << "sluice simulate: wrote " << flags.svg << "\n";
  }
  return 0;
}

int RunCheck(const CheckFlags& flags) {
  absl::StatusOr<std::string> body = CheckBody(flags);
  if (!body.ok()) {
    std::cerr << "sluice check: " << body.status().message() << "\n";
    return kUsageError;
  }
  std::string_view server = flags.server;
  while (server.ends_with('/')) {
    server.remove_suffix(1);
  }
  absl::StatusOr<HttpAnswer> answer =
      PostJson(fmt::format("{}/v1/check", server), *body, flags.timeout);
  if (!answer.ok()) {
    std::cerr << "sluice check: " << answer.status().message() << "\n";
    return kUsageError;
  }
  std::cout << answer->body << "\n";
  if (answer->status == 200) {
    return 0;
  }
  if (answer->status == 429) {
    return 1;
  }
  std::cerr << "sluice check: the server answered " << answer->status << "\n";
  return kUsageError;
}

int Main(int argc, char** argv) {
  CLI::App app("sluice: rate limiting, exact and fast", "sluice");
  app.require_subcommand(1);

  SimulateFlags flags;
  CLI::App* simulate = app.add_subcommand(
      "simulate",
      "Replay a CSV trace (time_us,key,cost) through an algorithm; print the decisions as CSV");
  simulate->add_option("--algorithm", flags.algorithm,
                       "fixed_window, sliding_log, sliding_window, sliding_buckets, token_bucket, "
                       "gcra or leaky_bucket");
  simulate->add_option("--compare", flags.compare,
                       "several algorithms, comma-separated: one lane each in the --svg picture");
  simulate->add_option("--limit", flags.limit, "N: units allowed per period")->required();
  simulate->add_option("--period", flags.period, "P: 100us, 250ms, 1s, 1m, 1h, 1d")->required();
  simulate->add_option("--burst", flags.burst,
                       "B: capacity of token_bucket, gcra, leaky_bucket (default N)");
  simulate->add_option("--buckets", flags.buckets,
                       "K: sub-windows of sliding_buckets, must divide the period (default 60)");
  simulate->add_option("--svg", flags.svg, "also draw the run into this SVG file");
  simulate->add_option("trace", flags.trace, "trace file; - or nothing for stdin");

  CheckFlags check_flags;
  CLI::App* check = app.add_subcommand(
      "check", "Ask a running sluiced about one request; exit 0 if allowed, 1 if denied");
  check->add_option("--server", check_flags.server, "sluiced's HTTP address")
      ->capture_default_str();
  check->add_option("--domain", check_flags.domain, "rules mode: the domain");
  check->add_option("--descriptor", check_flags.descriptors,
                    "rules mode: k=v, or k=v,k2=v2 for a nested descriptor; repeatable");
  check->add_option("--key", check_flags.key, "ad hoc: the key to limit");
  check->add_option("--algorithm", check_flags.algorithm, "ad hoc: the algorithm");
  check->add_option("--limit", check_flags.limit, "ad hoc: N per period");
  check->add_option("--period", check_flags.period, "ad hoc: P (1s, 1m, ...)");
  check->add_option("--burst", check_flags.burst, "ad hoc: B");
  check->add_option("--buckets", check_flags.buckets, "ad hoc: K for sliding_buckets");
  check->add_option("--cost", check_flags.cost, "units this request costs")->capture_default_str();
  check->add_option("--timeout", check_flags.timeout, "how long to wait for the server")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "sluice: " << e.what()
              << "\n(run 'sluice --help' for the commands and their flags)\n";
    return kUsageError;
  }
  if (simulate->parsed()) {
    return RunSimulate(flags);
  }
  if (check->parsed()) {
    return RunCheck(check_flags);
  }
  return kUsageError;
}

}  // namespace
}  // namespace sluice::tools

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  try {
    return sluice::tools::Main(argc, argv);
  } catch (const std::exception& e) {  // CLI11 may throw beyond its parse errors.
    std::cerr << "sluice: " << e.what() << "\n";
    return 1;
  }
}
