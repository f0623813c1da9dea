#include "tools/settle.h"

#include <fstream>
#include <iostream>
#include <sstream>

#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace sluice::tools {
namespace {

constexpr int kRefused = 1;
constexpr int kUsageError = 2;

// The server's "error" of a JSON answer, or the answer itself when it has none.
std::string ErrorOf(const HttpAnswer& answer) {
  const auto json = nlohmann::json::parse(answer.body, nullptr, /*allow_exceptions=*/false);
  if (json.is_object() && json.contains("error") && json["error"].is_string()) {
    return json["error"].get<std::string>();
  }
  return answer.body;
}

// POSTs `body` to `path` on --server `server`; the answer, or an error said on stderr as
// `command`'s.
absl::StatusOr<HttpAnswer> Post(std::string_view command, std::string_view server,
                                std::string_view path, const std::string& body,
                                std::string_view timeout, std::string_view bearer_token = {}) {
  absl::StatusOr<std::string> url = Endpoint(server, path);
  absl::StatusOr<HttpAnswer> answer =
      url.ok() ? PostJson(*url, body, timeout, bearer_token) : url.status();
  if (!answer.ok()) {
    std::cerr << "sluice " << command << ": " << answer.status().message() << "\n";
  }
  return answer;
}

}  // namespace

absl::StatusOr<std::string> ReadAdminToken(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  if (!file || !(text << file.rdbuf())) {
    return absl::InvalidArgumentError(
        fmt::format("--admin-token-file '{}': cannot read it (or it is empty)", path));
  }
  std::string token = std::move(text).str();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ' ||
                            token.back() == '\t')) {
    token.pop_back();
  }
  if (token.empty()) {
    return absl::InvalidArgumentError(fmt::format("--admin-token-file '{}' is empty", path));
  }
  return token;
}

int RunSettle(const SettleFlags& flags) {
  if (flags.cost < 0) {
    std::cerr << "sluice settle: --cost must not be negative (0 is a refund)\n";
    return kUsageError;
  }
  const std::string body = nlohmann::json{{"receipt", flags.receipt}, {"cost", flags.cost}}.dump();
  absl::StatusOr<HttpAnswer> answer =
      Post("settle", flags.server, "/v1/settle", body, flags.timeout);
  if (!answer.ok()) {
    return kUsageError;
  }
  if (answer->status == 200) {
    std::cout << answer->body << "\n";
    return 0;
  }
  if (answer->status == 400) {  // The receipt refused: the server says why.
    std::cerr << "sluice settle: refused: " << ErrorOf(*answer) << "\n";
    return kRefused;
  }
  std::cerr << "sluice settle: the server answered " << answer->status << ": " << answer->body
            << "\n";
  return kUsageError;
}

int RunReset(const ResetFlags& flags) {
  absl::StatusOr<std::string> body = ResetBody(flags.request);
  if (!body.ok()) {
    std::cerr << "sluice reset: " << body.status().message() << "\n";
    return kUsageError;
  }
  absl::StatusOr<std::string> token = ReadAdminToken(flags.admin_token_file);
  if (!token.ok()) {
    std::cerr << "sluice reset: " << token.status().message() << "\n";
    return kUsageError;
  }
  absl::StatusOr<HttpAnswer> answer =
      Post("reset", flags.request.server, "/v1/reset", *body, flags.request.timeout, *token);
  if (!answer.ok()) {
    return kUsageError;
  }
  if (answer->status == 200) {
    std::cout << answer->body << "\n";
    return 0;
  }
  if (answer->status == 401 || answer->status == 403) {
    std::cerr << "sluice reset: refused (" << answer->status << "): " << ErrorOf(*answer) << "\n";
    return kRefused;
  }
  std::cerr << "sluice reset: the server answered " << answer->status << ": " << ErrorOf(*answer)
            << "\n";
  return kUsageError;
}

}  // namespace sluice::tools
