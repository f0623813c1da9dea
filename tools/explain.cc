#include "tools/explain.h"

#include <iostream>
#include <iterator>
#include <string>

#include "fmt/format.h"

#include "tools/settle.h"

namespace sluice::tools {
namespace {

constexpr int kDenied = 1;
constexpr int kUsageError = 2;

// A duration in microseconds as a person reads it: "0", "850us", "12.5ms", "5.8s", "3.0m", "20.9h".
std::string Human(int64_t us) {
  if (us == 0) {
    return "0";
  }
  if (us < 0) {
    return "never";
  }
  const double d = static_cast<double>(us);
  if (us < 1'000) {
    return fmt::format("{}us", us);
  }
  if (us < 1'000'000) {
    return fmt::format("{:.1f}ms", d / 1e3);
  }
  if (us < 120'000'000) {
    return fmt::format("{:.1f}s", d / 1e6);
  }
  if (us < int64_t{7'200'000'000}) {
    return fmt::format("{:.1f}m", d / 6e7);
  }
  return fmt::format("{:.1f}h", d / 3.6e9);
}

// A field as printed: a string's text made printable (keys and values are callers').
std::string Text(const nlohmann::json& j) {
  return j.is_string() ? Printable(j.get<std::string>())
         : j.is_null() ? std::string("-")
                       : j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string State(const nlohmann::json& state) {
  if (!state.is_object()) {
    return "not known";
  }
  return fmt::format("{} remaining, clear in {}", Text(state["remaining"]),
                     Human(state.value("reset_after_us", int64_t{0})));
}

void FormatLimit(std::string& out, const nlohmann::json& limit, bool decider) {
  auto to = std::back_inserter(out);
  fmt::format_to(to, "  {}{}", Text(limit["name"]), decider ? "  <- decided the answer" : "");
  if (limit.value("unlimited", false)) {
    fmt::format_to(to, "\n    unlimited\n");
  } else {
    fmt::format_to(to, "\n    {} {} per {}, {} mode\n", Text(limit["algorithm"]),
                   Text(limit["limit"]), Text(limit.value("period", nlohmann::json("-"))),
                   Text(limit["mode"]));
  }
  fmt::format_to(to, "    from {}; key {}\n", Text(limit["source"]), Text(limit["key"]));
  if (!limit["before"].is_null() || !limit["after"].is_null()) {
    fmt::format_to(to, "    before: {}\n    after:  {}\n", State(limit["before"]),
                   State(limit["after"]));
  }
  if (limit.contains("allowed") && !limit.value("allowed", true)) {
    fmt::format_to(to, "    retry in {}\n", Human(limit.value("retry_after_us", int64_t{0})));
  }
  fmt::format_to(to, "    {}\n", Text(limit["verdict"]));
}

}  // namespace

std::string FormatExplanation(const nlohmann::json& answer) {
  if (!answer.is_object() || !answer.contains("explain") || !answer["explain"].is_object()) {
    return "the answer has no explanation\n";
  }
  const nlohmann::json& e = answer["explain"];
  std::string out;
  auto to = std::back_inserter(out);
  fmt::format_to(to, "{} at cost {}: {}\n", e["domain"].is_null() ? "ad hoc" : Text(e["domain"]),
                 Text(e["cost"]), e.value("admitted", false) ? "admitted" : "denied");
  if (e.contains("error")) {
    fmt::format_to(to, "  ({})\n", Text(e["error"]));
  }
  const nlohmann::json& decider = e["decided_by"];
  const nlohmann::json& descriptors = e["descriptors"];
  for (size_t d = 0; descriptors.is_array() && d < descriptors.size(); ++d) {
    const nlohmann::json& descriptor = descriptors[d];
    std::string entries;
    for (const nlohmann::json& entry : descriptor["entries"]) {
      entries += fmt::format("{}{}={}", entries.empty() ? "" : ", ", Text(entry["key"]),
                             Text(entry["value"]));
    }
    fmt::format_to(to, "descriptor {}: {}\n  {}\n", d, entries.empty() ? "-" : entries,
                   Text(descriptor["match"]));
    const nlohmann::json& limits = descriptor["limits"];
    for (size_t j = 0; limits.is_array() && j < limits.size(); ++j) {
      const bool decided = decider.is_object() && decider.value("descriptor", -1) == int(d) &&
                           decider.value("limit", -1) == int(j);
      FormatLimit(out, limits[j], decided);
    }
  }
  return out;
}

int RunExplain(const ExplainFlags& flags) {
  CheckFlags request = flags.request;
  request.explain = true;
  absl::StatusOr<std::string> body = CheckBody(request);
  if (!body.ok()) {
    std::cerr << "sluice explain: " << body.status().message() << "\n";
    return kUsageError;
  }
  std::string token;
  if (!flags.admin_token_file.empty()) {
    absl::StatusOr<std::string> read = ReadAdminToken(flags.admin_token_file);
    if (!read.ok()) {
      std::cerr << "sluice explain: " << read.status().message() << "\n";
      return kUsageError;
    }
    token = *std::move(read);
  }
  absl::StatusOr<HttpAnswer> answer =
      PostAs("explain", request.server, "/v1/check", *body, request.timeout, token);
  if (!answer.ok()) {
    return kUsageError;
  }
  if (answer->status != 200 && answer->status != 429) {
    std::cerr << "sluice explain: the server answered " << answer->status << ": "
              << ErrorOf(*answer) << "\n";
    return kUsageError;
  }
  const auto json = nlohmann::json::parse(answer->body, nullptr, /*allow_exceptions=*/false);
  std::cout << (flags.json ? answer->body + "\n" : FormatExplanation(json));
  return answer->status == 200 ? 0 : kDenied;
}

}  // namespace sluice::tools
