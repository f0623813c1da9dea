// The queries of the HTTP API's GET endpoints (request.h): any (ParseQuery), GET /v1/top's and
// GET /v1/auth's.

#include <algorithm>
#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fmt/format.h"

#include "server/http/request.h"

namespace sluice::server {

namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

// A query's value, percent-decoded ('+' a space); nullopt for a malformed escape.
std::optional<std::string> QueryDecoded(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '+') {
      out.push_back(' ');
    } else if (text[i] != '%') {
      out.push_back(text[i]);
    } else if (i + 2 < text.size() && HexDigit(text[i + 1]) >= 0 && HexDigit(text[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexDigit(text[i + 1]) * 16 + HexDigit(text[i + 2])));
      i += 2;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseQuery(
    std::string_view target) {
  std::vector<std::pair<std::string, std::string>> parameters;
  const size_t start = target.find('?');
  std::string_view rest = start == std::string_view::npos ? "" : target.substr(start + 1);
  while (!rest.empty()) {
    const std::string_view pair = rest.substr(0, rest.find('&'));
    rest.remove_prefix(std::min(rest.size(), pair.size() + 1));
    const size_t equals = pair.find('=');
    const std::string_view name = pair.substr(0, std::min(equals, pair.size()));
    std::optional<std::string> value =
        QueryDecoded(equals == std::string_view::npos ? "" : pair.substr(equals + 1));
    if (!value) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: a malformed %-escape", name.substr(0, std::min<size_t>(name.size(), 64))));
    }
    if (!name.empty()) {
      parameters.emplace_back(std::string(name), *std::move(value));
    }
  }
  return parameters;
}

absl::StatusOr<TopQuery> ParseTopQuery(std::string_view target) {
  TopQuery query;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> parameters = ParseQuery(target);
  if (!parameters.ok()) {
    return parameters.status();
  }
  for (const auto& [name, value] : *parameters) {
    if (name == "rule") {
      query.rule = value;
    } else if (name == "by" && (value == "denied" || value == "hits")) {
      query.by = value == "hits" ? TopBy::kHits : TopBy::kDenied;
    } else if (name == "by") {
      return absl::InvalidArgumentError("by must be denied or hits");
    } else if (name == "n") {
      size_t n = 0;
      const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), n);
      if (error != std::errc() || end != value.data() + value.size() || n < 1 || n > kMaxTopKeys) {
        return absl::InvalidArgumentError(fmt::format("n must be 1 to {}", kMaxTopKeys));
      }
      query.n = n;
    } else {
      return absl::InvalidArgumentError(
          fmt::format("unknown parameter '{}' (rule, by, n)",
                      name.substr(0, std::min<size_t>(name.size(), 64))));
    }
  }
  return query;
}

std::string_view DomainInQuery(std::string_view target) {
  std::string_view domain_name;
  if (const size_t query = target.find('?'); query != std::string_view::npos) {
    std::string_view rest = target.substr(query + 1);
    while (!rest.empty()) {
      const std::string_view pair = rest.substr(0, rest.find('&'));
      rest.remove_prefix(std::min(rest.size(), pair.size() + 1));
      if (pair.starts_with("domain=")) {
        domain_name = pair.substr(7);
      }
    }
  }
  return domain_name;
}

}  // namespace sluice::server
