#pragma once

// The requests of sluiced's HTTP API read into the service's request types: the JSON bodies of
// POST /v1/check, /v1/acquire, /v1/release and /json, and the query of GET /v1/auth. Pure
// functions of the request, apart from the parser each thread keeps: they touch no service and
// no socket, so they can be tested alone. Every refusal is InvalidArgument with a message that
// names the field by its path ("descriptors[1].entries[0].key is missing"); docs/server.md
// documents the bodies.
//
// Thread-safe: each thread parses with its own simdjson parser, and the results own their data.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "boost/beast/http.hpp"

#include "server/service/service.h"
#include "server/stats/top_keys.h"
#include "sluice/duration.h"

namespace sluice::server {

// The largest hits_addend and requests_per_unit of Envoy's API: its proto declares them uint32.
inline constexpr int64_t kUint32Max = std::numeric_limits<uint32_t>::max();

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;

// POST /v1/check's body: an ad hoc request (it has a "key") or a rules-mode one. With
// `max_wait` (POST /v1/acquire), the body may also have "max_wait", a duration, read into it;
// else with `also`, a field of that name, left to the caller.
absl::StatusOr<std::variant<AdHocRequest, CheckRequest>> ParseCheck(
    const HttpRequest& request, std::optional<Micros>* max_wait = nullptr,
    std::string_view also = {});

// POST /v1/feedback's body: a check's (naming the limits), and "partner": {"status": 429,
// "headers": {"Retry-After": "5", ...}} (or headers as [["name", "value"], ...], which may
// repeat a name), read at `now` (feedback_request.cc; server/http/partner_headers.h).
absl::StatusOr<FeedbackRequest> ParseFeedback(const HttpRequest& request, Timestamp now);

// POST /v1/release's body: {"lease": "<the token an acquire or check answered>"}.
absl::StatusOr<std::string> ParseRelease(const HttpRequest& request);
// POST /v1/settle's body: {"receipt": "...", "cost": M}.
absl::StatusOr<SettleRequest> ParseSettle(const HttpRequest& request);

// POST /json's body: Envoy's RateLimitRequest in protobuf JSON.
absl::StatusOr<CheckRequest> ParseEnvoyJson(const HttpRequest& request);

// GET /v1/top's query: ?rule=NAME (percent-encoded; none: every rule) &by=denied|hits
// (default denied) &n=N (1 to kMaxTopKeys, default 10).
inline constexpr size_t kMaxTopKeys = 100;
struct TopQuery {
  std::string rule;
  TopBy by = TopBy::kDenied;
  size_t n = 10;
};
absl::StatusOr<TopQuery> ParseTopQuery(std::string_view target);
// The parameters of `target`'s query ("name=value&..."), in order, percent-decoded ('+' a
// space); those with no name dropped. InvalidArgument naming the parameter for a malformed
// %-escape.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseQuery(
    std::string_view target);

// The value of `request`'s header `name` (a boost::beast::http::field, or the name as text), or
// empty when it has none.
template <typename Name>
std::string_view HeaderOf(const HttpRequest& request, Name name) {
  const auto header = request.find(name);
  return header == request.end() ? std::string_view()
                                 : std::string_view(header->value().data(), header->value().size());
}

// GET /v1/auth's "?domain=" in `target` (the last one given, as written: not decoded), or
// empty when the query names none.
std::string_view DomainInQuery(std::string_view target);

}  // namespace sluice::server
