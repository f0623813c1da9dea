// The sluice command line. `sluice simulate` replays a trace through the algorithms
// (docs/simulate.md); exit status 0 on success, 2 for bad flags or a bad trace.
// `sluice check` asks a running sluiced (docs/server.md); exit status 0 when allowed, 1 when
// denied, 2 on an error. `sluice acquire` waits until allowed: exit status 0 then (printing
// the lease, when a concurrency limit gave one), 75 (EX_TEMPFAIL, "try again later") when not
// within --max-wait, 1 when no wait can help, 2 on an error. `sluice release` gives a lease
// back: 0 when it was held, 1 when it had expired or been released already, 2 on an error.
// `sluice settle` and `sluice reset` act after a decision (tools/settle.h): 0 when done, 1
// when the server refuses (the receipt, the admin token), 2 on an error. `sluice explain`
// prints why a request was answered so (tools/explain.h), with check's exit status; `sluice
// top` watches each rule's top offenders (tools/top.h); `sluice feedback` tells what a partner
// answered (tools/feedback.h): 0 when told, 2 on an error.
// A bad command line exits 2, naming the subcommand and pointing to its own --help; a
// misspelt subcommand is answered with the closest one.

#include <algorithm>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "sluice_build/version.h"

#include "sluice/duration.h"
#include "sluice/limit.h"
#include "tools/check.h"
#include "tools/explain.h"
#include "tools/feedback.h"
#include "tools/settle.h"
#include "tools/simulate.h"
#include "tools/svg.h"
#include "tools/top.h"

namespace sluice::tools {
namespace {

constexpr int kUsageError = 2;
constexpr int kTryLater = 75;  // sysexits.h's EX_TEMPFAIL: what a shell script retries on.

struct SimulateFlags {
  std::string algorithm;
  std::string compare;
  int64_t limit = 0;
  std::string period;
  std::optional<int64_t> burst;
  std::optional<int64_t> buckets;
  std::string svg;
  std::string trace = "-";
  bool calendar = false;
  std::string time_zone = "UTC";
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
  std::optional<Calendar> calendar;
  if (flags.calendar) {
    const std::optional<CalendarUnit> unit = ParseCalendarPeriod(flags.period);
    if (!unit) {
      return Fail("--period: a calendar quota's period is 1d, 1w, 1mo or 1y");
    }
    calendar = Calendar{*unit, flags.time_zone};
  }
  const absl::StatusOr<Micros> period =
      calendar ? absl::StatusOr<Micros>(Micros{0}) : ParseDuration(flags.period);
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
                                                       .buckets = flags.buckets,
                                                       .calendar = calendar});
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

// An answer that says no rule matched the request's descriptors (a misspelt domain or key)
// limits nothing: said on stderr, as the Python and Node clients warn of it, so that a script
// pacing itself with `sluice acquire` does not run unlimited without a word.
void WarnIfUnmatched(std::string_view command, const nlohmann::json& json) {
  if (json.is_object() && json.value("unmatched", false)) {
    std::cerr << "sluice " << command
              << ": warning: no rule matched these descriptors; nothing limits them\n";
  }
}

// With --receipt: the receipt of an admitted answer, alone on a line; nothing, and a word on
// stderr, when it has none (nothing was charged: cost 0, no rule matched).
void PrintReceipt(std::string_view command, const nlohmann::json& json) {
  if (json.is_object() && json.contains("receipt") && json["receipt"].is_string()) {
    std::cout << json["receipt"].get<std::string>() << "\n";
  } else {
    std::cerr << "sluice " << command << ": no receipt: nothing was charged\n";
  }
}

// POSTs `body` to `path` on the server of --server `server`.
absl::StatusOr<HttpAnswer> Post(std::string_view server, std::string_view path,
                                const std::string& body, std::string_view timeout) {
  absl::StatusOr<std::string> url = Endpoint(server, path);
  if (!url.ok()) {
    return url.status();
  }
  return PostJson(*url, body, timeout);
}

int RunCheck(const CheckFlags& flags) {
  absl::StatusOr<std::string> body = CheckBody(flags);
  if (!body.ok()) {
    std::cerr << "sluice check: " << body.status().message() << "\n";
    return kUsageError;
  }
  absl::StatusOr<HttpAnswer> answer = Post(flags.server, "/v1/check", *body, flags.timeout);
  if (!answer.ok()) {
    std::cerr << "sluice check: " << answer.status().message() << "\n";
    return kUsageError;
  }
  const auto json = nlohmann::json::parse(answer->body, nullptr, /*allow_exceptions=*/false);
  WarnIfUnmatched("check", json);
  if (answer->status == 200 && flags.receipt) {
    PrintReceipt("check", json);  // The only output, for `sluice settle`.
    return 0;
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

int RunAcquire(const CheckFlags& flags) {
  absl::StatusOr<Micros> max_wait = ParseDuration(flags.max_wait);
  absl::StatusOr<Micros> timeout = ParseDuration(flags.timeout);
  if (!max_wait.ok()) {
    std::cerr << "sluice acquire: --max-wait: " << max_wait.status().message() << "\n";
    return kUsageError;
  }
  if (!timeout.ok()) {
    std::cerr << "sluice acquire: --timeout: " << timeout.status().message() << "\n";
    return kUsageError;
  }
  absl::StatusOr<std::string> body = CheckBody(flags);
  if (!body.ok()) {
    std::cerr << "sluice acquire: " << body.status().message() << "\n";
    return kUsageError;
  }
  // The server holds the request up to max_wait; --timeout is for the rest.
  absl::StatusOr<HttpAnswer> answer =
      Post(flags.server, "/v1/acquire", *body, FormatDuration(*max_wait + *timeout));
  if (!answer.ok()) {
    std::cerr << "sluice acquire: " << answer.status().message() << "\n";
    return kUsageError;
  }
  const auto json = nlohmann::json::parse(answer->body, nullptr, /*allow_exceptions=*/false);
  WarnIfUnmatched("acquire", json);
  if (answer->status == 200) {
    // A concurrency limit's lease, for `sluice release`: the only output on success.
    if (json.is_object() && json.contains("lease") && json["lease"].is_string()) {
      std::cout << json["lease"].get<std::string>() << "\n";
    }
    if (flags.receipt) {
      PrintReceipt("acquire", json);  // After the lease, when there is one.
    }
    return 0;
  }
  if (answer->status == 429) {
    const auto retry = json.is_object() ? json.value("retry_after_us", int64_t{-1}) : -1;
    if (retry < 0) {
      std::cerr << "sluice acquire: denied, and no wait would help\n";
      return 1;  // Not temporary: retrying cannot succeed.
    }
    std::cerr << fmt::format("sluice acquire: not within --max-wait {}; retry after {:.3f}s\n",
                             flags.max_wait, static_cast<double>(retry) / 1e6);
    return kTryLater;
  }
  std::cerr << "sluice acquire: the server answered " << answer->status << ": " << answer->body
            << "\n";
  return kUsageError;
}

int RunRelease(const std::string& server, const std::string& lease, const std::string& timeout) {
  absl::StatusOr<HttpAnswer> answer =
      Post(server, "/v1/release", nlohmann::json{{"lease", lease}}.dump(), timeout);
  if (!answer.ok()) {
    std::cerr << "sluice release: " << answer.status().message() << "\n";
    return kUsageError;
  }
  const auto json = nlohmann::json::parse(answer->body, nullptr, /*allow_exceptions=*/false);
  if (answer->status != 200 || !json.is_object() || !json.contains("released")) {
    std::cerr << "sluice release: the server answered " << answer->status << ": " << answer->body
              << "\n";
    return kUsageError;
  }
  if (json["released"] != true) {
    std::cerr << "sluice release: the lease was not held (it expired, or was released)\n";
    return 1;
  }
  return 0;
}

enum class RequestFlags { kAll, kKeysOnly };

// The flags of `check` and `acquire`: the server and the request; kKeysOnly (`reset`): the
// server and the keys, without --cost, --max-debt and --receipt.
void AddRequestFlags(CLI::App& command, CheckFlags& flags,
                     RequestFlags which = RequestFlags::kAll) {
  command.add_option("--server", flags.server, "sluiced's HTTP address")->capture_default_str();
  command.add_option("--domain", flags.domain, "rules mode: the domain");
  command.add_option("--descriptor", flags.descriptors,
                     "rules mode: k=v, or k=v,k2=v2 for a nested descriptor; repeatable");
  command.add_option("--key", flags.key, "ad hoc: the key to limit");
  command.add_option("--algorithm", flags.algorithm, "ad hoc: the algorithm");
  command.add_option("--limit", flags.limit, "ad hoc: N per period");
  command.add_option("--period", flags.period, "ad hoc: P (1s, 1m, ...)");
  command.add_option("--burst", flags.burst, "ad hoc: B");
  command.add_option("--buckets", flags.buckets, "ad hoc: K for sliding_buckets");
  command.add_flag("--calendar", flags.calendar,
                   "ad hoc: a calendar quota, --period 1d, 1w, 1mo or 1y from local midnight");
  command.add_option("--time-zone", flags.time_zone, "ad hoc, with --calendar: an IANA zone");
  command.add_flag("--feedback", flags.feedback,
                   "ad hoc: the limit takes its partner's feedback (sluice feedback)");
  if (which == RequestFlags::kAll) {
    command.add_option("--max-debt", flags.max_debt,
                       "ad hoc: how far past the limit a settle may charge the key");
    command.add_option("--cost", flags.cost, "units this request costs")->capture_default_str();
    command.add_flag("--receipt", flags.receipt,
                     "ask for a receipt; print it alone when admitted, for `sluice settle`");
  }
  command
      .add_option("--timeout", flags.timeout,
                  "how long to wait for the server (acquire: beyond --max-wait)")
      ->capture_default_str();
}

struct ReleaseFlags {
  std::string server = CheckFlags{}.server;
  std::string lease;
  std::string timeout = CheckFlags{}.timeout;
};

CLI::App* AddRelease(CLI::App& app, ReleaseFlags& flags) {
  CLI::App* release = app.add_subcommand(
      "release", "Give back the lease `sluice acquire` printed; exit 0 if it was still held");
  release->add_option("--server", flags.server, "sluiced's HTTP address")->capture_default_str();
  release->add_option("--timeout", flags.timeout, "how long to wait for the server")
      ->capture_default_str();
  release->add_option("lease", flags.lease, "the lease")->required();
  return release;
}

CLI::App* AddSettle(CLI::App& app, SettleFlags& flags) {
  CLI::App* settle = app.add_subcommand(
      "settle",
      "Settle what a request `sluice check --receipt` admitted really cost; exit 0 if settled, "
      "1 if the receipt is refused");
  settle->add_option("--server", flags.server, "sluiced's HTTP address")->capture_default_str();
  settle->add_option("--timeout", flags.timeout, "how long to wait for the server")
      ->capture_default_str();
  settle->add_option("--cost", flags.cost, "the real cost in units; 0 refunds the request")
      ->required();
  settle->add_option("receipt", flags.receipt, "the receipt")->required();
  return settle;
}

CLI::App* AddReset(CLI::App& app, ResetFlags& flags) {
  CLI::App* reset = app.add_subcommand(
      "reset",
      "Make a key start afresh on every limit it names (sluiced's admin token needed); exit 0 if "
      "reset, 1 if the token is refused");
  AddRequestFlags(*reset, flags.request, RequestFlags::kKeysOnly);
  reset
      ->add_option("--admin-token-file", flags.admin_token_file,
                   "the file holding sluiced's --admin-token-file token")
      ->required();
  return reset;
}

CLI::App* AddFeedback(CLI::App& app, FeedbackFlags& flags) {
  CLI::App* feedback = app.add_subcommand(
      "feedback",
      "Tell sluiced what the partner answered (a 429, Retry-After, RateLimit headers), so that "
      "every worker acts on it; exit 0 when told");
  AddRequestFlags(*feedback, flags.request, RequestFlags::kKeysOnly);
  feedback->add_option("--status", flags.status, "the partner's HTTP status");
  feedback->add_option("--header", flags.headers,
                       "a header of its answer, 'Name: value'; repeatable");
  feedback->add_option("--headers-file", flags.headers_file,
                       "its headers as curl -D writes them ('-': standard input); its status "
                       "line gives --status");
  return feedback;
}

CLI::App* AddExplain(CLI::App& app, ExplainFlags& flags) {
  CLI::App* explain = app.add_subcommand(
      "explain",
      "Ask a running sluiced about one request and print why it answered so; exit 0 if allowed, "
      "1 if denied");
  AddRequestFlags(*explain, flags.request);
  explain->add_option("--admin-token-file", flags.admin_token_file,
                      "the file holding sluiced's admin token (needed at --cost 0)");
  explain->add_flag("--json", flags.json, "print the server's JSON answer as it is");
  return explain;
}

CLI::App* AddTop(CLI::App& app, TopFlags& flags) {
  CLI::App* top = app.add_subcommand(
      "top", "Watch each rule's top offenders on a running sluiced, refreshed as top does");
  top->add_option("--server", flags.server, "sluiced's HTTP address")->capture_default_str();
  top->add_option("--admin-token-file", flags.admin_token_file,
                  "the file holding sluiced's admin token")
      ->required();
  top->add_option("--rule", flags.rule, "one rule limit's name (default: every one)");
  top->add_option("--by", flags.by, "denied or hits")->capture_default_str();
  top->add_option("-n", flags.n, "keys per rule (1 to 100)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  top->add_option("--interval", flags.interval, "how often to refresh")->capture_default_str();
  top->add_flag("--once", flags.once, "print one view and exit");
  top->add_flag("--json", flags.json, "print the server's JSON answer as it is");
  top->add_option("--timeout", flags.timeout, "how long to wait for the server")
      ->capture_default_str();
  return top;
}

// Edit distance from `a` to `b`, for "did you mean".
size_t Distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Why the command line names no subcommand of `commands`, with the one it likely meant;
// nothing when it does (or asks only for --help or --version, which CLI11 answers).
std::optional<std::string> UnknownSubcommand(const std::vector<const CLI::App*>& commands, int argc,
                                             char** argv) {
  std::string names;
  for (const CLI::App* command : commands) {
    names += (names.empty() ? "" : ", ") + command->get_name();
  }
  std::string_view given;
  std::string_view flag;  // The first flag before it: the top level has only --help, --version.
  for (int i = 1; i < argc && given.empty(); ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help" || arg == "--help-all" || arg == "--version") {
      return std::nullopt;
    }
    if (!arg.starts_with('-')) {
      given = arg;
    } else if (flag.empty()) {
      flag = arg;
    }
  }
  const std::string list = fmt::format("(subcommands: {}; see 'sluice --help')", names);
  if (!flag.empty()) {
    return fmt::format("'{}' is not a flag of sluice itself: it goes after a subcommand {}", flag,
                       list);
  }
  if (given.empty()) {
    return fmt::format("give a subcommand {}", list);
  }
  const CLI::App* closest = nullptr;
  size_t best = 3;  // Two edits at the most: "chek", "simlate", "aquire".
  for (const CLI::App* command : commands) {
    if (command->get_name() == given) {
      return std::nullopt;
    }
    if (const size_t d = Distance(given, command->get_name()); d < best) {
      best = d;
      closest = command;
    }
  }
  return fmt::format(
      "'{}' is not a subcommand{} {}", given,
      closest == nullptr ? "" : fmt::format(": did you mean '{}'?", closest->get_name()), list);
}

// A parse error, said as the subcommand being parsed and pointing to its own help. That
// subcommand is the first argument that is not a flag (no top-level flag takes a value).
int UsageError(const std::vector<const CLI::App*>& commands, const CLI::ParseError& e, int argc,
               char** argv) {
  const CLI::App* command = nullptr;
  for (int i = 1; i < argc && command == nullptr; ++i) {
    for (const CLI::App* candidate : commands) {
      if (!std::string_view(argv[i]).starts_with('-') && candidate->get_name() == argv[i]) {
        command = candidate;
      }
    }
  }
  if (command == nullptr) {
    std::cerr << "sluice: " << e.what() << "\n(run 'sluice --help' for the subcommands)\n";
  } else {
    std::cerr << "sluice " << command->get_name() << ": " << e.what() << "\n(run 'sluice "
              << command->get_name() << " --help' for its flags)\n";
  }
  return kUsageError;
}

// `simulate`'s flags, into `flags`.
CLI::App* AddSimulate(CLI::App& app, SimulateFlags& flags) {
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
  simulate->add_flag("--calendar", flags.calendar,
                     "a calendar quota (fixed_window): --period 1d, 1w, 1mo or 1y, from local "
                     "midnight in --time-zone");
  simulate->add_option("--time-zone", flags.time_zone, "with --calendar: an IANA zone")
      ->capture_default_str();
  simulate->add_option("--svg", flags.svg, "also draw the run into this SVG file");
  simulate->add_option("trace", flags.trace, "trace file; - or nothing for stdin");
  return simulate;
}

int Main(int argc, char** argv) {
  CLI::App app("sluice: rate limiting, exact and fast", "sluice");
  app.require_subcommand(1);

  SimulateFlags flags;
  CLI::App* simulate = AddSimulate(app, flags);

  CheckFlags check_flags;
  CLI::App* check = app.add_subcommand(
      "check", "Ask a running sluiced about one request; exit 0 if allowed, 1 if denied");
  AddRequestFlags(*check, check_flags);

  CheckFlags acquire_flags;
  acquire_flags.max_wait = "30s";
  CLI::App* acquire = app.add_subcommand(
      "acquire",
      "Wait until a running sluiced allows one request; exit 0 then, 75 if not within --max-wait");
  AddRequestFlags(*acquire, acquire_flags);
  acquire->add_option("--max-wait", acquire_flags.max_wait, "the longest to wait (at most 1h)")
      ->capture_default_str();

  ReleaseFlags release_flags;
  CLI::App* release = AddRelease(app, release_flags);
  SettleFlags settle_flags;
  CLI::App* settle = AddSettle(app, settle_flags);
  ResetFlags reset_flags;
  CLI::App* reset = AddReset(app, reset_flags);
  TopFlags top_flags;
  CLI::App* top = AddTop(app, top_flags);
  ExplainFlags explain_flags;
  CLI::App* explain = AddExplain(app, explain_flags);
  FeedbackFlags feedback_flags;
  CLI::App* feedback = AddFeedback(app, feedback_flags);

  app.set_version_flag("--version", fmt::format("sluice {}", build::kVersionText),
                       "Print sluice's version and exit");
  const std::vector<const CLI::App*> commands = {simulate, check,   acquire, release, settle,
                                                 reset,    explain, top,     feedback};
  if (std::optional<std::string> unknown = UnknownSubcommand(commands, argc, argv)) {
    std::cerr << "sluice: " << *unknown << "\n";
    return kUsageError;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return UsageError(commands, e, argc, argv);
  }
  if (simulate->parsed()) {
    return RunSimulate(flags);
  }
  if (check->parsed()) {
    return RunCheck(check_flags);
  }
  if (acquire->parsed()) {
    return RunAcquire(acquire_flags);
  }
  if (release->parsed()) {
    return RunRelease(release_flags.server, release_flags.lease, release_flags.timeout);
  }
  if (settle->parsed()) {
    return RunSettle(settle_flags);
  }
  if (reset->parsed()) {
    return RunReset(reset_flags);
  }
  if (explain->parsed()) {
    return RunExplain(explain_flags);
  }
  if (top->parsed()) {
    return RunTop(top_flags);
  }
  if (feedback->parsed()) {
    return RunFeedback(feedback_flags);
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
