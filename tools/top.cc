#include "tools/top.h"

#include <unistd.h>

#include <iostream>
#include <iterator>
#include <string>
#include <thread>

#include "fmt/format.h"

#include "sluice/duration.h"
#include "src/core/url_escape.h"
#include "tools/check.h"
#include "tools/settle.h"

namespace sluice::tools {
namespace {

constexpr int kRefused = 1;
constexpr int kUsageError = 2;

}  // namespace

std::string FormatTop(const nlohmann::json& answer) {
  std::string out;
  auto to = std::back_inserter(out);
  const std::string by = answer.value("by", "denied");
  fmt::format_to(to, "top offenders by {} over the last {} s\n", by,
                 answer.value("window_s", int64_t{0}));
  const nlohmann::json& rules = answer["rules"];
  if (!rules.is_array() || rules.empty()) {
    out += "\n(no rule has seen a request since sluiced started counting)\n";
    return out;
  }
  for (const nlohmann::json& rule : rules) {
    const uint64_t total = rule.value("total", uint64_t{0});
    fmt::format_to(to, "\n{}: {} {} (each count within {})\n", Printable(rule.value("rule", "?")),
                   total, by == "hits" ? "hits" : "denials", rule.value("bound", uint64_t{0}));
    if (rule["keys"].empty()) {
      out += "  (none)\n";
      continue;
    }
    fmt::format_to(to, "  {:>10} {:>7}  {}\n", "COUNT", "SHARE", "KEY");
    for (const nlohmann::json& key : rule["keys"]) {
      const uint64_t count = key.value("count", uint64_t{0});
      fmt::format_to(
          to, "  {:>10} {:>6.1f}%  {}\n", count,
          total == 0 ? 0.0 : 100.0 * static_cast<double>(count) / static_cast<double>(total),
          Printable(key.value("key", "")));
    }
  }
  return out;
}

int RunTop(const TopFlags& flags) {
  absl::StatusOr<Micros> interval = ParseDuration(flags.interval);
  if (!interval.ok() || *interval < std::chrono::milliseconds(100)) {
    std::cerr << "sluice top: --interval must be a duration of at least 100ms\n";
    return kUsageError;
  }
  if (flags.by != "denied" && flags.by != "hits") {
    std::cerr << "sluice top: --by must be denied or hits\n";
    return kUsageError;
  }
  absl::StatusOr<std::string> token = ReadAdminToken(flags.admin_token_file);
  if (!token.ok()) {
    std::cerr << "sluice top: " << token.status().message() << "\n";
    return kUsageError;
  }
  std::string path = fmt::format("/v1/top?by={}&n={}", flags.by, flags.n);
  if (!flags.rule.empty()) {
    path += "&rule=" + internal::UrlEscape(flags.rule);  // Names hold dots, slashes, anything.
  }
  absl::StatusOr<std::string> url = Endpoint(flags.server, path);
  if (!url.ok()) {
    std::cerr << "sluice top: " << url.status().message() << "\n";
    return kUsageError;
  }
  const bool live = !flags.once && isatty(STDOUT_FILENO) != 0;
  for (;;) {
    absl::StatusOr<HttpAnswer> answer = GetJson(*url, flags.timeout, *token);
    if (!answer.ok()) {
      std::cerr << "sluice top: " << answer.status().message() << "\n";
      return kUsageError;
    }
    if (answer->status == 401 || answer->status == 403) {
      std::cerr << "sluice top: refused (" << answer->status << "): " << ErrorOf(*answer) << "\n";
      return kRefused;
    }
    if (answer->status != 200) {
      std::cerr << "sluice top: the server answered " << answer->status << ": " << ErrorOf(*answer)
                << "\n";
      return kUsageError;
    }
    const auto json = nlohmann::json::parse(answer->body, nullptr, /*allow_exceptions=*/false);
    // A live view draws over the last one (cursor home, clear), as top does.
    std::cout << (live ? "\x1b[H\x1b[2J" : "")
              << (flags.json ? answer->body + "\n" : FormatTop(json)) << std::flush;
    if (flags.once) {
      return 0;
    }
    std::this_thread::sleep_for(*interval);
  }
}

}  // namespace sluice::tools
