#pragma once

// Text put into a URL (a user or password, a query's value): percent-escaped but for RFC 3986's
// unreserved characters, which need none. Used by sluiced (URLs it builds from
// envoyproxy/ratelimit's environment) and by the sluice command (GET /v1/top's query).

#include <cctype>
#include <iterator>
#include <string>
#include <string_view>

#include "fmt/format.h"

namespace sluice::internal {

inline std::string UrlEscape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
        c == '~') {
      out += c;
    } else {
      fmt::format_to(std::back_inserter(out), "%{:02X}", static_cast<unsigned char>(c));
    }
  }
  return out;
}

}  // namespace sluice::internal
