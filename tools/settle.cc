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
      PostAs("settle", flags.server, "/v1/settle", body, flags.timeout);
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
      PostAs("reset", flags.request.server, "/v1/reset", *body, flags.request.timeout, *token);
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
