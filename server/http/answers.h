#pragma once

// The answers of sluiced's HTTP API: their JSON bodies, the RateLimit headers of a decision
// (built by rate_limit_headers.h, shared with the Envoy API), and the HTTP status of a refusal's
// absl::Status (Envoy's rate-limit filter keeps its headers apart in the same way, in
// ratelimit_headers.{h,cc}). A check's answer is written by hand, as it is the hot path, with every
// name checked for UTF-8 so that the answer is valid JSON whatever a rules file or a request holds.
// docs/server.md documents each answer.
//
// Thread-safe: pure functions of their arguments.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "boost/beast/http/status.hpp"
#include "nlohmann/json_fwd.hpp"

#include "server/http/request.h"
#include "server/http/response.h"
#include "server/service/key_names.h"
#include "server/service/rate_limit_headers.h"
#include "server/service/service.h"
#include "server/stats/top_keys.h"

namespace sluice::server {

using Json = nlohmann::ordered_json;  // Fields in the order written, as documented.

// A response to a request the server could not even parse (too large, timed out): `status`
// with a JSON body {"error": message}.
HttpResponse ErrorResponse(boost::beast::http::status status, std::string_view message,
                           unsigned version, bool keep_alive);

// `status` with a JSON body, in `request`'s HTTP version and keep-alive.
HttpResponse JsonResponse(boost::beast::http::status status, std::string body,
                          const HttpRequest& request);
HttpResponse JsonResponse(boost::beast::http::status status, const Json& body,
                          const HttpRequest& request);

// `status` with a plain text body (UTF-8), in `request`'s HTTP version and keep-alive.
HttpResponse TextResponse(boost::beast::http::status status, std::string body,
                          const HttpRequest& request);

// The answer to a request refused with `status`: its HTTP status and its message.
HttpResponse Failure(const absl::Status& status, const HttpRequest& request);

// How a decision's answer tells its limits: the headers' format, and the wall clock's time
// (x-ratelimit's Reset is in epoch seconds).
struct AnswerHeaders {
  const HeaderOptions& options;
  Timestamp now;
};

// A decision's answer: 200, or 429 (/v1/check) or 403 (/v1/auth, for nginx) when denied, with
// the RateLimit headers (rate_limit_headers.h) and Retry-After.
HttpResponse CheckAnswer(const CheckResult& result, const HttpRequest& request,
                         const AnswerHeaders& headers);
HttpResponse AuthAnswer(const CheckResult& result, const HttpRequest& request,
                        const AnswerHeaders& headers);
HttpResponse AcquireAnswer(const AcquireResult& result, const HttpRequest& request,
                           const AnswerHeaders& headers);
// POST /v1/release: 200 either way; "released" says whether the lease was still held.
HttpResponse ReleaseAnswer(const bool& released, const HttpRequest& request);
// POST /v1/settle and POST /v1/reset (docs/server.md).
HttpResponse SettleAnswer(const SettleResult& result, const HttpRequest& request);
HttpResponse ResetAnswer(const ResetResult& result, const HttpRequest& request);
// POST /v1/feedback: what the partner's answer did on each limit, and the notes.
HttpResponse FeedbackAnswer(const FeedbackResult& result, const HttpRequest& request);
// GET /v1/top: each rule limit's top keys by `by`, named as `names` shows keys.
HttpResponse TopAnswer(const std::vector<RuleTop>& tops, TopBy by, const KeyNames& names,
                       const HttpRequest& request);
// An answer of RateLimitService::ShouldRateLimitAsync with its overall code.
struct EnvoyAnswer {
  std::vector<DescriptorResult> statuses;
  bool over_limit = false;  // RateLimitService::OverallOverLimit.
  // response_headers_to_add (envoy_headers.h), with --response-headers.
  std::vector<std::pair<std::string, std::string>> headers;
};
// Envoy's RateLimitResponse in protobuf JSON: 200 for OK, 429 for OVER_LIMIT.
HttpResponse EnvoyJsonResponse(const EnvoyAnswer& answer, const HttpRequest& request);

// The JSON body of a check's answer. `waited`: an acquire's wait, given as "waited_us".
std::string ResultText(const CheckResult& result, std::optional<Micros> waited = std::nullopt);

// `text` as a JSON string: quotes, backslashes and control characters escaped, and any byte
// that is not part of well-formed UTF-8 (a rules file or a request may hold such bytes)
// replaced by U+FFFD, so that the answer is always valid JSON.
void AppendJsonString(std::string& out, std::string_view text);

// One limit: its name, algorithm, limit, period and mode (what /v1/rules shows too), then,
// when `decision` is given, its figures and flags.
void AppendLimit(std::string& out, const LimitOutcome& outcome, const Decision* decision);

}  // namespace sluice::server
