#include "tools/feedback.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "absl/strings/ascii.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace sluice::tools {
namespace {

constexpr int kUsageError = 2;
constexpr size_t kMaxDumpBytes = 1 << 20;

// The headers sluiced reads (server/http/partner_headers.h): the only ones sent.
bool AboutLimits(std::string name) {
  name = absl::AsciiStrToLower(name);
  static constexpr std::string_view kNames[] = {"retry-after",
                                                "retry-after-ms",
                                                "ratelimit",
                                                "ratelimit-policy",
                                                "ratelimit-limit",
                                                "ratelimit-remaining",
                                                "ratelimit-reset",
                                                "x-ratelimit-limit",
                                                "x-ratelimit-remaining",
                                                "x-ratelimit-reset",
                                                "x-ratelimit-reset-after",
                                                "x-rate-limit-limit",
                                                "x-rate-limit-remaining",
                                                "x-rate-limit-reset"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// "Name: value" split; nullopt without a colon.
std::optional<std::pair<std::string, std::string>> Header(std::string_view line) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) {
    return std::nullopt;
  }
  return std::pair{std::string(Trim(line.substr(0, colon))),
                   std::string(Trim(line.substr(colon + 1)))};
}

absl::StatusOr<std::string> ReadDump(const std::string& path) {
  std::ostringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
  } else {
    std::ifstream file(path, std::ios::binary);
    if (!file || !(text << file.rdbuf())) {
      return absl::InvalidArgumentError(
          fmt::format("--headers-file '{}': cannot read it (or it is empty)", path));
    }
  }
  std::string dump = std::move(text).str();
  if (dump.size() > kMaxDumpBytes) {
    return absl::InvalidArgumentError(
        fmt::format("--headers-file '{}' holds more than {} bytes", path, kMaxDumpBytes));
  }
  return dump;
}

}  // namespace

HeaderDump ParseHeaderDump(std::string_view text) {
  HeaderDump dump;
  std::istringstream lines{std::string(text)};
  for (std::string line; std::getline(lines, line);) {
    const std::string_view l = Trim(line);
    if (l.substr(0, 5) == "HTTP/") {  // A new response (a redirect, a 100 before): its own.
      dump = HeaderDump{};
      const size_t space = l.find(' ');
      if (space != std::string_view::npos) {
        const std::string_view code = l.substr(space + 1, 3);
        if (code.size() == 3 && std::all_of(code.begin(), code.end(), absl::ascii_isdigit)) {
          dump.status = std::stoi(std::string(code));
        }
      }
    } else if (std::optional<std::pair<std::string, std::string>> h = Header(l)) {
      dump.headers.push_back(*std::move(h));
    }
  }
  return dump;
}

absl::StatusOr<std::string> FeedbackBody(
    const CheckFlags& keys, std::optional<int> status,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  absl::StatusOr<std::string> target = ResetBody(keys);
  if (!target.ok()) {
    return target.status();
  }
  nlohmann::ordered_json body = nlohmann::ordered_json::parse(*target);
  nlohmann::ordered_json partner = nlohmann::ordered_json::object();
  if (status) {
    partner["status"] = *status;
  }
  nlohmann::ordered_json sent = nlohmann::ordered_json::array();
  for (const auto& [name, value] : headers) {
    if (AboutLimits(name)) {
      sent.push_back({name, value});
    }
  }
  partner["headers"] = std::move(sent);
  if (!status && partner["headers"].empty()) {
    return absl::InvalidArgumentError(
        "nothing to tell: give --status, or rate limit headers (--header, --headers-file)");
  }
  body["partner"] = std::move(partner);
  // A curl dump may hold bytes that are not UTF-8: replaced, not thrown on.
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

int RunFeedback(const FeedbackFlags& flags) {
  std::optional<int> status = flags.status;
  std::vector<std::pair<std::string, std::string>> headers;
  if (!flags.headers_file.empty()) {
    absl::StatusOr<std::string> text = ReadDump(flags.headers_file);
    if (!text.ok()) {
      std::cerr << "sluice feedback: " << text.status().message() << "\n";
      return kUsageError;
    }
    HeaderDump dump = ParseHeaderDump(*text);
    if (!status && dump.status != 0) {
      status = dump.status;
    }
    headers = std::move(dump.headers);
  }
  for (const std::string& header : flags.headers) {
    std::optional<std::pair<std::string, std::string>> h = Header(header);
    if (!h) {
      std::cerr << "sluice feedback: --header '" << header << "' is not 'Name: value'\n";
      return kUsageError;
    }
    headers.push_back(*std::move(h));
  }
  absl::StatusOr<std::string> body = FeedbackBody(flags.request, status, headers);
  if (!body.ok()) {
    std::cerr << "sluice feedback: " << body.status().message() << "\n";
    return kUsageError;
  }
  absl::StatusOr<HttpAnswer> answer =
      PostAs("feedback", flags.request.server, "/v1/feedback", *body, flags.request.timeout);
  if (!answer.ok()) {
    return kUsageError;
  }
  if (answer->status == 200) {
    std::cout << answer->body << "\n";
    return 0;
  }
  std::cerr << "sluice feedback: the server answered " << answer->status << ": " << ErrorOf(*answer)
            << "\n";
  return kUsageError;
}

}  // namespace sluice::tools
