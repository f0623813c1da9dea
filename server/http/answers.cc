#include "server/http/answers.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "fmt/compile.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

#include "server/http/explain_answer.h"
#include "server/http/request.h"
#include "sluice/duration.h"
#include "src/core/status.h"
#include "src/core/utf8.h"

namespace sluice::server {
namespace {

namespace http = boost::beast::http;

constexpr int64_t kMicrosPerSecond = 1'000'000;

// Serializes without ever throwing: invalid UTF-8 (from a request or a rules file) is
// replaced, not an exception.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

http::status StatusFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return http::status::bad_request;
    case absl::StatusCode::kNotFound:
      return http::status::not_found;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kFailedPrecondition:
      return http::status::service_unavailable;
    default:
      return http::status::internal_server_error;
  }
}

// The answer of a check is written directly rather than built as a JSON document first: it
// is the hot path, and a document costs an allocation per field.

// "allowed", "remaining", "reset_after_us", "retry_after_us", "delay_us", in that order.
// The answer to every check is written here: with compiled format strings (fmt's parsing of a
// format string at run time was most of its cost), into a buffer on the stack appended at
// once (fmt writing through a std::string's back_inserter grows it, zero-filled, piece by
// piece).
void AppendFigures(std::string& out, const Decision& d, bool limited) {
  fmt::basic_memory_buffer<char, 192> buffer;
  auto to = fmt::appender(buffer);
  if (limited) {
    fmt::format_to(to, FMT_COMPILE(R"("allowed":{},"remaining":{})"), d.allowed, d.remaining);
  } else {
    fmt::format_to(to, FMT_COMPILE(R"("allowed":{},"remaining":null)"), d.allowed);
  }
  fmt::format_to(to, FMT_COMPILE(R"(,"reset_after_us":{},"retry_after_us":{},"delay_us":{})"),
                 d.reset_after.count(), d.retry_after.count(), d.delay.count());
  out.append(buffer.data(), buffer.size());
}

}  // namespace

void AppendJsonString(std::string& out, std::string_view text) {
  out.push_back('"');
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
      ++i;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned char>(c));
      ++i;
    } else if (const size_t length = internal::Utf8SequenceAt(text, i); length > 0) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out += "\\ufffd";
      ++i;
    }
  }
  out.push_back('"');
}

void AppendLimit(std::string& out, const LimitOutcome& outcome, const Decision* decision) {
  out += R"({"name":)";
  AppendJsonString(out, outcome.name);
  if (outcome.unlimited) {
    out += R"(,"unlimited":true})";
    return;
  }
  auto to = std::back_inserter(out);
  if (outcome.concurrency > 0) {
    fmt::format_to(to, FMT_COMPILE(R"(,"algorithm":"concurrency","limit":{},"lease_ttl":")"),
                   outcome.concurrency);
    AppendDuration(out, outcome.lease_ttl);
    out.push_back('"');
  } else {
    fmt::format_to(
        to, FMT_COMPILE(R"(,"algorithm":"{}","limit":{})"),
        AlgorithmName(outcome.limit ? outcome.limit->algorithm() : Algorithm::kFixedWindow),
        outcome.nominal);
  }
  if (outcome.limit && outcome.limit->calendar()) {
    // As an ad hoc request names a calendar quota.
    fmt::format_to(to, FMT_COMPILE(R"(,"period":"{}","calendar":true,"time_zone":"{}")"),
                   CalendarPeriodName(*outcome.limit->calendar()),
                   outcome.limit->time_zone().name());
  } else if (outcome.limit) {
    out += R"(,"period":")";
    AppendDuration(out, outcome.limit->period());
    out.push_back('"');
  }
  fmt::format_to(to, FMT_COMPILE(R"(,"mode":"{}")"), ModeName(outcome.mode));
  if (decision != nullptr) {
    out.push_back(',');
    AppendFigures(out, *decision, /*limited=*/true);
    for (const auto& [flag, set] :
         {std::pair{"over_soft", outcome.over_soft}, std::pair{"borrowed", outcome.borrowed},
          std::pair{"pool", outcome.pool}, std::pair{"blocked", outcome.blocked},
          std::pair{"paused", outcome.paused}, std::pair{"paced", outcome.paced}}) {
      if (set) {
        fmt::format_to(to, FMT_COMPILE(R"(,"{}":true)"), flag);
      }
    }
  }
  out.push_back('}');
}

std::string ResultText(const CheckResult& result, std::optional<Micros> waited) {
  std::string out;
  out.reserve(192 + 256 * result.limits.size());  // One allocation for the usual answer.
  out.push_back('{');
  AppendFigures(out, result.combined, result.limited);
  bool over_soft = false;
  for (const LimitOutcome& outcome : result.limits) {
    over_soft = over_soft || outcome.over_soft;
  }
  if (waited) {
    fmt::format_to(std::back_inserter(out), FMT_COMPILE(R"(,"waited_us":{})"), waited->count());
  }
  if (!result.lease.empty()) {
    out += R"(,"lease":)";
    AppendJsonString(out, result.lease);
    fmt::format_to(std::back_inserter(out), FMT_COMPILE(R"(,"lease_ttl_us":{})"),
                   result.lease_ttl.count());
  }
  if (!result.receipt.empty()) {
    out += R"(,"receipt":)";
    AppendJsonString(out, result.receipt);
    fmt::format_to(std::back_inserter(out), FMT_COMPILE(R"(,"receipt_ttl_us":{})"),
                   result.receipt_ttl.count());
  }
  // No rule matched any descriptor, or the domain is unknown (CheckResult::unmatched; an ad
  // hoc check always has its own limit). Admitted as envoyproxy/ratelimit admits it, but said,
  // so that a client can warn: a lease or an acquire on a misspelt domain or key otherwise runs
  // with no limit and nothing tells why. Written only then, so the usual answer is unchanged.
  if (result.unmatched) {
    out += R"(,"unmatched":true)";
  }
  fmt::format_to(std::back_inserter(out), FMT_COMPILE(R"(,"over_soft":{},"limits":[)"), over_soft);
  for (size_t i = 0; i < result.limits.size(); ++i) {
    if (i > 0) {
      out.push_back(',');
    }
    AppendLimit(out, result.limits[i], &result.limits[i].decision);
  }
  out += ']';
  if (result.explanation != nullptr) {
    AppendExplanation(out, *result.explanation);
  }
  out.push_back('}');
  return out;
}

namespace {

// The RateLimit headers of `result` (rate_limit_headers.h), and Retry-After (whole seconds,
// rounded up, at least 1) on a denial that a retry can cure.
void SetRateLimitHeaders(const CheckResult& result, const AnswerHeaders& headers,
                         HttpResponse& response) {
  if (!result.limited) {
    return;
  }
  absl::InlinedVector<HeaderQuota, 4> quotas;
  for (const LimitOutcome& outcome : result.limits) {
    if (std::optional<HeaderQuota> quota = QuotaOf(outcome)) {
      quotas.push_back(*quota);
    }
  }
  AddRateLimitHeaders(
      quotas, ClosestQuota(quotas), headers.options, headers.now,
      [&](std::string_view name, std::string_view value) { response.set(name, value); });
  if (!result.combined.allowed && result.combined.retry_after > Micros{0}) {
    response.set(http::field::retry_after,
                 std::to_string(std::max<int64_t>(1, CeilSeconds(result.combined.retry_after))));
  }
}

HttpResponse CheckResponse(const CheckResult& result, const HttpRequest& request,
                           const AnswerHeaders& headers, http::status denied_status,
                           std::optional<Micros> waited = std::nullopt) {
  HttpResponse response = JsonResponse(result.combined.allowed ? http::status::ok : denied_status,
                                       ResultText(result, waited), request);
  SetRateLimitHeaders(result, headers, response);
  return response;
}

// Protobuf JSON's Duration: seconds with 0, 3, 6 or 9 fractional digits and an "s".
std::string ProtoDuration(Micros d) {
  const int64_t us = d.count();
  if (us % kMicrosPerSecond == 0) {
    return fmt::format("{}s", us / kMicrosPerSecond);
  }
  if (us % 1000 == 0) {
    return fmt::format("{}.{:03}s", us / kMicrosPerSecond, (us % kMicrosPerSecond) / 1000);
  }
  return fmt::format("{}.{:06}s", us / kMicrosPerSecond, us % kMicrosPerSecond);
}

}  // namespace

HttpResponse ErrorResponse(http::status status, std::string_view message, unsigned version,
                           bool keep_alive) {
  HttpResponse response{status, version};
  response.set(http::field::server, "sluiced");
  response.set(http::field::content_type, "application/json");
  response.keep_alive(keep_alive);
  response.body() = Dump(Json{{"error", message}});
  response.prepare_payload();
  return response;
}

HttpResponse JsonResponse(http::status status, std::string body, const HttpRequest& request) {
  HttpResponse response{status, request.version()};
  response.set(http::field::server, "sluiced");
  response.set(http::field::content_type, "application/json");
  response.keep_alive(request.keep_alive());
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

HttpResponse TextResponse(http::status status, std::string body, const HttpRequest& request) {
  HttpResponse response = JsonResponse(status, std::move(body), request);
  response.set(http::field::content_type, "text/plain; charset=utf-8");
  return response;
}

HttpResponse JsonResponse(http::status status, const Json& body, const HttpRequest& request) {
  return JsonResponse(status, Dump(body), request);
}

HttpResponse Failure(const absl::Status& status, const HttpRequest& request) {
  return ErrorResponse(StatusFor(status), internal::Message(status), request.version(),
                       request.keep_alive());
}

HttpResponse CheckAnswer(const CheckResult& result, const HttpRequest& request,
                         const AnswerHeaders& headers) {
  return CheckResponse(result, request, headers, http::status::too_many_requests);
}
HttpResponse AuthAnswer(const CheckResult& result, const HttpRequest& request,
                        const AnswerHeaders& headers) {
  return CheckResponse(result, request, headers, http::status::forbidden);
}
HttpResponse AcquireAnswer(const AcquireResult& result, const HttpRequest& request,
                           const AnswerHeaders& headers) {
  return CheckResponse(result.check, request, headers, http::status::too_many_requests,
                       result.waited);
}
HttpResponse ReleaseAnswer(const bool& released, const HttpRequest& request) {
  return JsonResponse(http::status::ok,
                      std::string(released ? R"({"released":true})" : R"({"released":false})"),
                      request);
}

HttpResponse SettleAnswer(const SettleResult& result, const HttpRequest& request) {
  std::string out;
  fmt::format_to(
      std::back_inserter(out),
      FMT_COMPILE(R"({{"settled":true,"cost":{},"given_back":{},"charged":{},"limits":[)"),
      result.cost, result.given_back, result.charged);
  for (size_t i = 0; i < result.limits.size(); ++i) {
    const SettledLimit& limit = result.limits[i];
    out += i > 0 ? R"(,{"name":)" : R"({"name":)";
    AppendJsonString(out, limit.name);
    fmt::format_to(std::back_inserter(out), FMT_COMPILE(R"(,"given_back":{},"charged":{},)"),
                   limit.settled.given_back, limit.settled.charged);
    AppendFigures(out, limit.settled.after, /*limited=*/true);
    out.push_back('}');
  }
  out += "]}";
  return JsonResponse(http::status::ok, std::move(out), request);
}

HttpResponse ResetAnswer(const ResetResult& result, const HttpRequest& request) {
  std::string out = R"({"reset":true)";
  if (result.unmatched) {
    out += R"(,"unmatched":true)";
  }
  out += R"(,"limits":[)";
  for (size_t i = 0; i < result.limits.size(); ++i) {
    out += i > 0 ? R"(,{"name":)" : R"({"name":)";
    AppendJsonString(out, result.limits[i]);
    out.push_back('}');
  }
  out += "]}";
  return JsonResponse(http::status::ok, std::move(out), request);
}

HttpResponse FeedbackAnswer(const FeedbackResult& result, const HttpRequest& request) {
  Json limits = Json::array();
  for (const FeedbackLimit& l : result.limits) {
    limits.push_back({{"name", l.name},
                      {"pause_us", l.pause.count()},
                      {"paused", l.paused},
                      {"pause_left_us", l.pause_left.count()},
                      {"lowered", l.lowered},
                      {"rate", l.rate},
                      {"cut", l.cut},
                      {"remaining", l.after.remaining},
                      {"reset_after_us", l.after.reset_after.count()},
                      {"notes", l.notes}});
  }
  Json out = {{"limits", std::move(limits)}, {"notes", result.notes}};
  if (result.unmatched) {
    out["unmatched"] = true;
  }
  return JsonResponse(http::status::ok, Dump(out), request);
}

HttpResponse TopAnswer(const std::vector<RuleTop>& tops, TopBy by, const KeyNames& names,
                       const HttpRequest& request) {
  Json rules = Json::array();
  for (const RuleTop& top : tops) {
    Json keys = Json::array();
    for (const RuleTop::Key& key : top.keys) {
      keys.push_back({{"key", names.Show(key.key)}, {"count", key.count}, {"error", key.error}});
    }
    rules.push_back({{"rule", top.rule},
                     {"total", top.total},
                     {"bound", top.bound},
                     {"keys", std::move(keys)}});
  }
  const Json body = {
      {"by", by == TopBy::kHits ? "hits" : "denied"},
      {"window_s", TopKeys::kEpochs *
                       std::chrono::duration_cast<std::chrono::seconds>(TopKeys::kEpoch).count()},
      {"capacity", TopKeys::kCapacity},
      {"rules", std::move(rules)}};
  return JsonResponse(http::status::ok, body, request);
}

HttpResponse EnvoyJsonResponse(const EnvoyAnswer& answer, const HttpRequest& request) {
  const bool over = answer.over_limit;
  Json statuses = Json::array();
  for (const DescriptorResult& result : answer.statuses) {
    Json status = {{"code", result.over_limit ? "OVER_LIMIT" : "OK"}};
    // Protobuf JSON leaves out fields at their default (0, UNKNOWN, empty).
    if (result.closest) {
      Json current = {{"requestsPerUnit", std::min(result.closest->nominal, kUint32Max)}};
      if (result.unit != Unit::kUnknown) {
        current["unit"] = UnitName(result.unit);
      }
      if (result.closest->named) {
        current["name"] = result.closest->name;
      }
      status["currentLimit"] = std::move(current);
    }
    if (result.limit_remaining != 0) {
      status["limitRemaining"] = result.limit_remaining;
    }
    if (result.closest) {
      status["durationUntilReset"] = ProtoDuration(result.until_reset);
    }
    statuses.push_back(std::move(status));
  }
  Json response = {{"overallCode", over ? "OVER_LIMIT" : "OK"}, {"statuses", statuses}};
  if (!answer.headers.empty()) {
    Json headers = Json::array();
    for (const auto& [key, value] : answer.headers) {
      headers.push_back({{"key", key}, {"value", value}});
    }
    response["responseHeadersToAdd"] = std::move(headers);
  }
  std::string body = Dump(response);
  std::string explained;
  AppendEnvoyExplanation(explained, answer.statuses);
  if (!explained.empty()) {
    body.insert(body.size() - 1, explained);  // Inside the answer's closing brace.
  }
  return JsonResponse(over ? http::status::too_many_requests : http::status::ok, std::move(body),
                      request);
}

}  // namespace sluice::server
