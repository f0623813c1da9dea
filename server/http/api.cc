#include "server/http/api.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <optional>
#include <utility>
#include <variant>

#include "fmt/compile.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "simdjson.h"

#include "sluice/duration.h"
#include "src/core/status.h"

namespace sluice::server {
namespace {

namespace http = boost::beast::http;
using Json = nlohmann::ordered_json;  // Fields in the order written, as documented.

constexpr int64_t kMicrosPerSecond = 1'000'000;

// Serializes without ever throwing: invalid UTF-8 (from a request or a rules file) is
// replaced, not an exception.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
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

HttpResponse JsonResponse(http::status status, const Json& body, const HttpRequest& request) {
  return JsonResponse(status, Dump(body), request);
}

http::status StatusFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return http::status::bad_request;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kFailedPrecondition:
      return http::status::service_unavailable;
    default:
      return http::status::internal_server_error;
  }
}

using JsonObject = simdjson::dom::object;
using JsonValue = simdjson::dom::element;

// The body of a POST as a JSON object; InvalidArgument when it is not one. Read with
// simdjson, through a parser per thread that keeps its buffers: a request allocates nothing
// to be parsed (a JSON document of nlohmann's was a quarter of all the work of a check). The
// object lives in that parser: read it whole before the thread parses again.
absl::StatusOr<JsonObject> ParseObject(const HttpRequest& request) {
  thread_local simdjson::dom::parser parser;
  JsonValue body;
  switch (parser.parse(request.body()).get(body)) {
    case simdjson::SUCCESS:
      break;
    case simdjson::NUMBER_ERROR:
      return absl::InvalidArgumentError("malformed JSON: a number out of range");
    case simdjson::UTF8_ERROR:
      return absl::InvalidArgumentError("malformed JSON: not UTF-8");
    default:
      return absl::InvalidArgumentError("malformed JSON");
  }
  JsonObject object;
  if (body.get_object().get(object) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("the body must be a JSON object");
  }
  return object;
}

// Whole seconds, rounded up.
int64_t CeilSeconds(Micros d) { return (d.count() + kMicrosPerSecond - 1) / kMicrosPerSecond; }

// Where an object sits in a request body, for the errors that name a field by its path:
// "descriptors[1].entries[0].key". Spelled out only when an error is reported.
struct Where {
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();
  size_t descriptor = kNone;
  size_t entry = kNone;
  bool limit = false;  // The descriptor's "limit".

  std::string Path() const {
    if (descriptor == kNone) {
      return "";
    }
    std::string path = fmt::format("descriptors[{}]", descriptor);
    if (entry != kNone) {
      fmt::format_to(std::back_inserter(path), ".entries[{}]", entry);
    }
    if (limit) {
      path += ".limit";
    }
    return path;
  }
  std::string Name(std::string_view field) const {
    return descriptor == kNone ? std::string(field) : fmt::format("{}.{}", Path(), field);
  }
};

// Reads the fields of one JSON object, with errors that name the field by its path.
class Fields {
 public:
  Fields(JsonObject object, Where where) : object_(object), where_(where) {}

  // Every field is one of `known`, and none appears twice (which of two would count is
  // nobody's guess).
  // `also`, when not empty, is one more known field.
  absl::Status OnlyKnown(std::initializer_list<std::string_view> known,
                         std::string_view also = {}) const {
    uint32_t seen = 0;  // Bit i: known[i] has appeared; bit known.size(): `also` has.
    for (const auto field : object_) {
      const auto it = std::find(known.begin(), known.end(), field.key);
      if (it == known.end() && (also.empty() || field.key != also)) {
        return absl::InvalidArgumentError(fmt::format("unknown field '{}'", Name(field.key)));
      }
      const uint32_t bit = uint32_t{1} << (it - known.begin());
      if ((seen & bit) != 0) {
        return absl::InvalidArgumentError(fmt::format("field '{}' appears twice", Name(field.key)));
      }
      seen |= bit;
    }
    return absl::OkStatus();
  }

  // The first of `names` present (a protobuf JSON field may be spelled either way).
  std::optional<JsonValue> Find(std::initializer_list<const char*> names) const {
    for (const char* name : names) {
      JsonValue value;
      if (object_.at_key(name).get(value) == simdjson::SUCCESS) {
        return value;
      }
    }
    return std::nullopt;
  }

  absl::StatusOr<std::optional<std::string>> String(const char* name) const {
    const std::optional<JsonValue> value = Find({name});
    if (!value) {
      return std::nullopt;
    }
    std::string_view text;
    if (value->get_string().get(text) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(fmt::format("{} must be a string", Name(name)));
    }
    return std::string(text);
  }

  // An integer field; `quoted` also accepts the string form protobuf JSON uses for 64 bits.
  absl::StatusOr<std::optional<int64_t>> Integer(std::initializer_list<const char*> names,
                                                 bool quoted = false) const {
    const std::optional<JsonValue> value = Find(names);
    if (!value) {
      return std::nullopt;
    }
    switch (value->type()) {
      case simdjson::dom::element_type::INT64:
        return value->get_int64().value_unsafe();
      case simdjson::dom::element_type::UINT64:  // Only what int64 cannot hold.
        return absl::InvalidArgumentError(fmt::format("{} is too large", Name(*names.begin())));
      case simdjson::dom::element_type::STRING:
        if (quoted) {
          const std::string_view text = value->get_string().value_unsafe();
          int64_t n = 0;
          const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
          if (ec == std::errc() && end == text.data() + text.size() && !text.empty()) {
            return n;
          }
        }
        break;
      default:
        break;
    }
    return absl::InvalidArgumentError(fmt::format("{} must be an integer", Name(*names.begin())));
  }

  std::string Name(std::string_view name) const { return where_.Name(name); }

 private:
  JsonObject object_;
  Where where_;
};

// Checks an optional integer field: when present it must be at least `min`.
absl::StatusOr<std::optional<int64_t>> AtLeast(absl::StatusOr<std::optional<int64_t>> value,
                                               const Fields& fields, const char* name,
                                               int64_t min) {
  if (value.ok() && *value && **value < min) {
    return absl::InvalidArgumentError(fmt::format("{} must be {}, not {}", fields.Name(name),
                                                  min == 0 ? "zero or more" : "positive", **value));
  }
  return value;
}

// The descriptors of a rules-mode or Envoy request: [{"entries": [{"key", "value"}], ...}].
absl::StatusOr<std::vector<RequestDescriptor>> ParseDescriptors(JsonObject body, bool envoy) {
  JsonValue list;
  if (body.at_key("descriptors").get(list) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("descriptors is missing");
  }
  simdjson::dom::array items;
  if (list.get_array().get(items) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("descriptors must be an array");
  }
  if (items.size() > kMaxDescriptors) {
    return absl::InvalidArgumentError(
        fmt::format("too many descriptors: {} (at most {})", items.size(), kMaxDescriptors));
  }
  std::vector<RequestDescriptor> descriptors;
  descriptors.reserve(items.size());
  for (const JsonValue item : items) {
    const Where where{.descriptor = descriptors.size()};
    JsonObject object;
    if (item.get_object().get(object) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(fmt::format("{} must be an object", where.Path()));
    }
    const Fields fields(object, where);
    if (absl::Status s = envoy ? fields.OnlyKnown({"entries", "limit", "hitsAddend", "hits_addend"})
                               : fields.OnlyKnown({"entries"});
        !s.ok()) {
      return s;
    }
    RequestDescriptor& descriptor = descriptors.emplace_back();
    simdjson::dom::array entries;
    if (const std::optional<JsonValue> found = fields.Find({"entries"});
        !found || found->get_array().get(entries) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(fmt::format("{}.entries must be an array", where.Path()));
    }
    if (entries.size() > kMaxEntries) {
      return absl::InvalidArgumentError(
          fmt::format("{}.entries has too many entries: {} (at most {})", where.Path(),
                      entries.size(), kMaxEntries));
    }
    descriptor.entries.reserve(entries.size());
    for (const JsonValue entry : entries) {
      const Where entry_where{.descriptor = where.descriptor, .entry = descriptor.entries.size()};
      JsonObject entry_object;
      if (entry.get_object().get(entry_object) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError(fmt::format("{} must be an object", entry_where.Path()));
      }
      const Fields entry_fields(entry_object, entry_where);
      if (absl::Status s = entry_fields.OnlyKnown({"key", "value"}); !s.ok()) {
        return s;
      }
      absl::StatusOr<std::optional<std::string>> key = entry_fields.String("key");
      absl::StatusOr<std::optional<std::string>> value = entry_fields.String("value");
      if (!key.ok()) {
        return key.status();
      }
      if (!value.ok()) {
        return value.status();
      }
      if (!*key) {
        return absl::InvalidArgumentError(fmt::format("{}.key is missing", entry_where.Path()));
      }
      descriptor.entries.push_back({.key = **std::move(key), .value = value->value_or("")});
    }
    if (!envoy) {
      continue;
    }
    absl::StatusOr<std::optional<int64_t>> hits = AtLeast(
        fields.Integer({"hitsAddend", "hits_addend"}, /*quoted=*/true), fields, "hitsAddend", 0);
    if (!hits.ok()) {
      return hits.status();
    }
    descriptor.cost = *hits;
    if (const std::optional<JsonValue> limit = fields.Find({"limit"})) {
      const Where limit_where{.descriptor = where.descriptor, .limit = true};
      JsonObject limit_object;
      if (limit->get_object().get(limit_object) != simdjson::SUCCESS) {
        return absl::InvalidArgumentError(fmt::format("{} must be an object", limit_where.Path()));
      }
      const Fields limit_fields(limit_object, limit_where);
      if (absl::Status s = limit_fields.OnlyKnown({"requestsPerUnit", "requests_per_unit", "unit"});
          !s.ok()) {
        return s;
      }
      absl::StatusOr<std::optional<int64_t>> count =
          AtLeast(limit_fields.Integer({"requestsPerUnit", "requests_per_unit"}), limit_fields,
                  "requestsPerUnit", 0);
      if (!count.ok()) {
        return count.status();
      }
      LimitOverride& override = descriptor.limit.emplace();
      override.requests_per_unit = count->value_or(0);
      if (const std::optional<JsonValue> unit = limit_fields.Find({"unit"})) {
        std::string_view name;
        int64_t number = 0;
        if (unit->get_string().get(name) == simdjson::SUCCESS) {
          override.unit = ParseUnit(name).value_or(Unit::kUnknown);
        } else if (unit->get_int64().get(number) == simdjson::SUCCESS && number >= 0 &&
                   number <= 7) {
          override.unit = static_cast<Unit>(number);
        }
      }
      if (override.unit == Unit::kUnknown) {
        return absl::InvalidArgumentError(fmt::format(
            "{}.unit must be SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR", limit_where.Path()));
      }
    }
  }
  return descriptors;
}

// The answer of a check is written directly rather than built as a JSON document first: it
// is the hot path, and a document costs an allocation per field.
//
// The length of the well-formed UTF-8 sequence that starts text[i] (RFC 3629: no overlong
// forms, no surrogates, nothing above U+10FFFF), or 0 when there is none.
size_t Utf8SequenceAt(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) {
    return 1;
  }
  size_t length = 0;
  unsigned char low = 0x80;  // Bounds of the second byte.
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    low = lead == 0xE0 ? 0xA0 : 0x80;
    high = lead == 0xED ? 0x9F : 0xBF;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    low = lead == 0xF0 ? 0x90 : 0x80;
    high = lead == 0xF4 ? 0x8F : 0xBF;
  } else {
    return 0;
  }
  if (i + length > text.size() || byte(i + 1) < low || byte(i + 1) > high) {
    return 0;
  }
  for (size_t k = i + 2; k < i + length; ++k) {
    if (byte(k) < 0x80 || byte(k) > 0xBF) {
      return 0;
    }
  }
  return length;
}

// `text` as a JSON string: quotes, backslashes and control characters escaped, and any byte
// that is not part of well-formed UTF-8 (a rules file or a request may hold such bytes)
// replaced by U+FFFD, so that the answer is always valid JSON.
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
    } else if (const size_t length = Utf8SequenceAt(text, i); length > 0) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out += "\\ufffd";
      ++i;
    }
  }
  out.push_back('"');
}

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

// One limit: its name, algorithm, limit, period and mode (what /v1/rules shows too), then,
// when `decision` is given, its figures and flags.
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
  if (outcome.limit) {
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
          std::pair{"pool", outcome.pool}}) {
      if (set) {
        fmt::format_to(to, FMT_COMPILE(R"(,"{}":true)"), flag);
      }
    }
  }
  out.push_back('}');
}

// `waited`: an acquire's wait, given as "waited_us".
std::string ResultText(const CheckResult& result, std::optional<Micros> waited = std::nullopt) {
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
  fmt::format_to(std::back_inserter(out), FMT_COMPILE(R"(,"over_soft":{},"limits":[)"), over_soft);
  for (size_t i = 0; i < result.limits.size(); ++i) {
    if (i > 0) {
      out.push_back(',');
    }
    AppendLimit(out, result.limits[i], &result.limits[i].decision);
  }
  out += "]}";
  return out;
}

// The limit a client is told about in RateLimit-Limit: the one with the fewest remaining,
// a denying one first.
const LimitOutcome* Closest(const CheckResult& result) {
  const LimitOutcome* closest = nullptr;
  for (const LimitOutcome& outcome : result.limits) {
    if (outcome.unlimited || outcome.borrowed) {
      continue;
    }
    const bool denies = !outcome.decision.allowed && outcome.mode != Mode::kShadow;
    const bool closest_denies =
        closest != nullptr && !closest->decision.allowed && closest->mode != Mode::kShadow;
    if (closest == nullptr || (denies && !closest_denies) ||
        (denies == closest_denies && outcome.decision.remaining < closest->decision.remaining)) {
      closest = &outcome;
    }
  }
  return closest;
}

// The standard headers: RateLimit-Limit, -Remaining, -Reset and -Policy, and Retry-After (whole
// seconds, rounded up, at least 1) on a denial that a retry can cure.
void SetRateLimitHeaders(const CheckResult& result, HttpResponse& response) {
  if (!result.limited) {
    return;
  }
  if (const LimitOutcome* closest = Closest(result)) {
    response.set("RateLimit-Limit", std::to_string(closest->nominal));
    response.set("RateLimit-Reset", std::to_string(CeilSeconds(closest->decision.reset_after)));
  }
  response.set("RateLimit-Remaining", std::to_string(result.combined.remaining));
  std::string policy;
  for (const LimitOutcome& outcome : result.limits) {
    if (outcome.limit && !outcome.unlimited && !outcome.pool) {
      fmt::format_to(std::back_inserter(policy), FMT_COMPILE("{}{};w={}"),
                     policy.empty() ? "" : ", ", outcome.nominal,
                     CeilSeconds(outcome.limit->period()));
    }
  }
  if (!policy.empty()) {
    response.set("RateLimit-Policy", policy);
  }
  if (!result.combined.allowed && result.combined.retry_after > Micros{0}) {
    response.set(http::field::retry_after,
                 std::to_string(std::max<int64_t>(1, CeilSeconds(result.combined.retry_after))));
  }
}

HttpResponse CheckResponse(const CheckResult& result, const HttpRequest& request,
                           http::status denied_status,
                           std::optional<Micros> waited = std::nullopt) {
  HttpResponse response = JsonResponse(result.combined.allowed ? http::status::ok : denied_status,
                                       ResultText(result, waited), request);
  SetRateLimitHeaders(result, response);
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

constexpr int64_t kUint32Max = std::numeric_limits<uint32_t>::max();

// The methods an endpoint accepts, for a 405's Allow header; empty for an unknown path.
std::string_view AllowedMethods(std::string_view path) {
  if (path == "/v1/check" || path == "/v1/acquire" || path == "/v1/release" || path == "/json") {
    return "POST";
  }
  if (path == "/v1/auth") {
    return "GET, HEAD";
  }
  if (path == "/healthz" || path == "/metrics" || path == "/v1/rules") {
    return "GET, HEAD";
  }
  return {};
}

// A decision's answer: 200, or 429 (/v1/check) or 403 (/v1/auth, for nginx) when denied.
HttpResponse CheckAnswer(const CheckResult& result, const HttpRequest& request) {
  return CheckResponse(result, request, http::status::too_many_requests);
}
HttpResponse AuthAnswer(const CheckResult& result, const HttpRequest& request) {
  return CheckResponse(result, request, http::status::forbidden);
}
HttpResponse AcquireAnswer(const AcquireResult& result, const HttpRequest& request) {
  return CheckResponse(result.check, request, http::status::too_many_requests, result.waited);
}
// POST /v1/release: 200 either way; "released" says whether the lease was still held.
HttpResponse ReleaseAnswer(const bool& released, const HttpRequest& request) {
  return JsonResponse(http::status::ok,
                      std::string(released ? R"({"released":true})" : R"({"released":false})"),
                      request);
}

// The answer to a request refused with `status`: its HTTP status and its message.
HttpResponse Failure(const absl::Status& status, const HttpRequest& request) {
  return ErrorResponse(StatusFor(status), internal::Message(status), request.version(),
                       request.keep_alive());
}

// POST /v1/check's body: an ad hoc request (it has a "key") or a rules-mode one. With
// `max_wait` (POST /v1/acquire), the body may also have "max_wait", a duration, read into it.
absl::StatusOr<std::variant<AdHocRequest, CheckRequest>> ParseCheck(
    const HttpRequest& request, std::optional<Micros>* max_wait = nullptr) {
  absl::StatusOr<JsonObject> parsed = ParseObject(request);
  if (!parsed.ok()) {
    return parsed.status();
  }
  const JsonObject body = *parsed;
  const Fields fields(body, Where{});
  const std::string_view also = max_wait != nullptr ? "max_wait" : "";
  if (max_wait != nullptr) {
    absl::StatusOr<std::optional<std::string>> text = fields.String("max_wait");
    if (!text.ok()) {
      return text.status();
    }
    if (*text) {
      absl::StatusOr<Micros> wait = ParseDuration(**text);
      if (!wait.ok()) {
        return absl::InvalidArgumentError(
            fmt::format("max_wait: {}", internal::Message(wait.status())));
      }
      *max_wait = *wait;
    }
  }
  absl::StatusOr<std::optional<int64_t>> cost =
      AtLeast(fields.Integer({"cost"}), fields, "cost", 0);
  if (!cost.ok()) {
    return cost.status();
  }
  if (fields.Find({"key"})) {
    // Ad hoc: the limit is in the request.
    if (absl::Status s = fields.OnlyKnown(
            {"key", "algorithm", "limit", "period", "burst", "buckets", "cost"}, also);
        !s.ok()) {
      return s;
    }
    AdHocRequest adhoc;
    adhoc.cost = cost->value_or(1);
    absl::StatusOr<std::optional<std::string>> key = fields.String("key");
    absl::StatusOr<std::optional<std::string>> algorithm = fields.String("algorithm");
    absl::StatusOr<std::optional<std::string>> period = fields.String("period");
    absl::StatusOr<std::optional<int64_t>> limit = fields.Integer({"limit"});
    absl::StatusOr<std::optional<int64_t>> burst = fields.Integer({"burst"});
    absl::StatusOr<std::optional<int64_t>> buckets = fields.Integer({"buckets"});
    for (const absl::Status& s : {key.status(), algorithm.status(), period.status(), limit.status(),
                                  burst.status(), buckets.status()}) {
      if (!s.ok()) {
        return s;
      }
    }
    if (!*limit) {
      return absl::InvalidArgumentError("limit is missing");
    }
    if (!*period) {
      return absl::InvalidArgumentError("period is missing (a duration such as \"1s\")");
    }
    adhoc.key = **key;
    if (*algorithm) {
      absl::StatusOr<Algorithm> parsed = ParseAlgorithm(**algorithm);
      if (!parsed.ok()) {
        return parsed.status();
      }
      adhoc.spec.algorithm = *parsed;
    }
    absl::StatusOr<Micros> parsed_period = ParseDuration(**period);
    if (!parsed_period.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("period: {}", internal::Message(parsed_period.status())));
    }
    adhoc.spec.limit = **limit;
    adhoc.spec.period = *parsed_period;
    adhoc.spec.burst = *burst;
    adhoc.spec.buckets = *buckets;
    return adhoc;
  }
  if (absl::Status s = fields.OnlyKnown({"domain", "descriptors", "cost"}, also); !s.ok()) {
    return s;
  }
  CheckRequest check;
  check.cost = cost->value_or(1);
  absl::StatusOr<std::optional<std::string>> domain = fields.String("domain");
  if (!domain.ok()) {
    return domain.status();
  }
  if (!*domain) {
    return absl::InvalidArgumentError(
        "give either a domain and descriptors (rules mode) or a key and a limit (ad hoc)");
  }
  check.domain = **domain;
  absl::StatusOr<std::vector<RequestDescriptor>> descriptors =
      ParseDescriptors(body, /*envoy=*/false);
  if (!descriptors.ok()) {
    return descriptors.status();
  }
  check.descriptors = *std::move(descriptors);
  return check;
}

// POST /json's body: Envoy's RateLimitRequest in protobuf JSON.
// POST /v1/release's body: {"lease": "<the token an acquire or check answered>"}.
absl::StatusOr<std::string> ParseRelease(const HttpRequest& request) {
  absl::StatusOr<JsonObject> parsed = ParseObject(request);
  if (!parsed.ok()) {
    return parsed.status();
  }
  const Fields fields(*parsed, Where{});
  if (absl::Status s = fields.OnlyKnown({"lease"}, ""); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::optional<std::string>> lease = fields.String("lease");
  if (!lease.ok()) {
    return lease.status();
  }
  if (!*lease) {
    return absl::InvalidArgumentError("lease is missing");
  }
  return **lease;
}

absl::StatusOr<CheckRequest> ParseEnvoyJson(const HttpRequest& request) {
  absl::StatusOr<JsonObject> parsed = ParseObject(request);
  if (!parsed.ok()) {
    return parsed.status();
  }
  const JsonObject body = *parsed;
  const Fields fields(body, Where{});
  if (absl::Status s = fields.OnlyKnown({"domain", "descriptors", "hitsAddend", "hits_addend"});
      !s.ok()) {
    return s;
  }
  CheckRequest check;
  absl::StatusOr<std::optional<std::string>> domain = fields.String("domain");
  absl::StatusOr<std::optional<int64_t>> hits =
      AtLeast(fields.Integer({"hitsAddend", "hits_addend"}), fields, "hitsAddend", 0);
  if (!domain.ok()) {
    return domain.status();
  }
  if (!hits.ok()) {
    return hits.status();
  }
  check.domain = domain->value_or("");
  check.cost = std::max<int64_t>(1, hits->value_or(1));  // 0 means 1, as in Envoy's proto.
  if (check.cost > kUint32Max) {
    return absl::InvalidArgumentError("hitsAddend must fit 32 bits");
  }
  absl::StatusOr<std::vector<RequestDescriptor>> descriptors =
      ParseDescriptors(body, /*envoy=*/true);
  if (!descriptors.ok()) {
    return descriptors.status();
  }
  check.descriptors = *std::move(descriptors);
  return check;
}

// Envoy's RateLimitResponse in protobuf JSON: 200 for OK, 429 for OVER_LIMIT.
HttpResponse EnvoyJsonResponse(const std::vector<DescriptorResult>& results,
                               const HttpRequest& request) {
  bool over = false;
  Json statuses = Json::array();
  for (const DescriptorResult& result : results) {
    Json status = {{"code", result.over_limit ? "OVER_LIMIT" : "OK"}};
    over = over || result.over_limit;
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
  const Json response = {{"overallCode", over ? "OVER_LIMIT" : "OK"}, {"statuses", statuses}};
  return JsonResponse(over ? http::status::too_many_requests : http::status::ok, response, request);
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

HttpApi::HttpApi(RateLimitService& service, Metrics& metrics, Clock& clock,
                 std::function<std::string()> store_metrics)
    : service_(service),
      metrics_(metrics),
      clock_(clock),
      store_metrics_(std::move(store_metrics)) {}

// A decision under way: what building its answer needs, in one allocation that follows it
// through the service and back to the caller. The callbacks hold only the pointer, which fits
// inside an AnyInvocable, so they allocate nothing more.
template <typename Result>
struct HttpApi::Decided {
  HttpApi& api;
  const HttpRequest& request;
  HttpResponse (*format)(const Result&, const HttpRequest&);
  Reply reply;
  // Empty until the service answers. (Not a StatusOr holding an error meanwhile: an error
  // with a message is an allocation per request.)
  std::optional<absl::StatusOr<Result>> result;
};

template <typename Result>
RateLimitService::Done<absl::StatusOr<Result>> HttpApi::Deliver(
    const HttpRequest& request, Reply reply,
    HttpResponse (*format)(const Result&, const HttpRequest&)) {
  auto decided = std::make_unique<Decided<Result>>(Decided<Result>{
      .api = *this, .request = request, .format = format, .reply = std::move(reply)});
  return [decided = std::move(decided)](absl::StatusOr<Result> result) mutable {
    decided->result = std::move(result);
    Respond respond = std::move(decided->reply.respond);
    std::move(respond)([decided = std::move(decided)]() {
      const absl::StatusOr<Result>& r = *decided->result;
      return decided->api.Finish(
          r.ok() ? decided->format(*r, decided->request) : Failure(r.status(), decided->request),
          decided->reply);
    });
  };
}

HttpResponse HttpApi::Finish(HttpResponse response, const Reply& reply) {
  if (response.result() == http::status::bad_request) {
    metrics_.CountBadRequest();
  }
  if (reply.head) {
    response.body().clear();  // HEAD: the headers alone (Content-Length stays as for GET).
  }
  if (reply.decision) {
    metrics_.RecordLatency(clock_.Now() - reply.start);
  }
  return response;
}

void HttpApi::Send(Reply reply, HttpResponse response) {
  Respond respond = std::move(reply.respond);
  std::move(respond)(
      [response = Finish(std::move(response), reply)]() mutable { return std::move(response); });
}

void HttpApi::Handle(const HttpRequest& request, std::string_view peer, Respond respond,
                     CancelWait* cancel) {
  const std::string_view target = request.target();
  const std::string_view path = target.substr(0, target.find('?'));
  const http::verb method = request.method();
  // HEAD is answered wherever GET is, with the headers alone.
  auto only = [&](http::verb allowed) {
    return method == allowed || (allowed == http::verb::get && method == http::verb::head);
  };
  Reply reply{.start = clock_.Now(),
              .head = method == http::verb::head,
              // (An acquire's time is mostly its wait: it stays out of the latency figures.)
              .decision = (path == "/v1/check" && only(http::verb::post)) ||
                          (path == "/json" && only(http::verb::post)) ||
                          (path == "/v1/auth" && only(http::verb::get)),
              .respond = std::move(respond)};
  if (path == "/v1/acquire" && only(http::verb::post)) {
    Acquire(request, std::move(reply), cancel);
    return;
  }
  if (path == "/v1/release" && only(http::verb::post)) {
    Release(request, std::move(reply));
    return;
  }
  if (reply.decision) {
    if (path == "/v1/check") {
      Check(request, std::move(reply));
    } else if (path == "/json") {
      EnvoyJson(request, std::move(reply));
    } else {
      Auth(request, peer, std::move(reply));
    }
    return;
  }
  HttpResponse response;
  if (path == "/healthz" && only(http::verb::get)) {
    response = JsonResponse(http::status::ok, Json{{"status", "ok"}}, request);
  } else if (path == "/metrics" && only(http::verb::get)) {
    response = HttpResponse{http::status::ok, request.version()};
    response.set(http::field::server, "sluiced");
    response.set(http::field::content_type, "text/plain; version=0.0.4");
    response.keep_alive(request.keep_alive());
    response.body() = metrics_.Render(store_metrics_ ? store_metrics_() : std::string());
    response.prepare_payload();
  } else if (path == "/v1/rules" && only(http::verb::get)) {
    response = Rules(request);
  } else if (const std::string_view allow = AllowedMethods(path); !allow.empty()) {
    response = ErrorResponse(http::status::method_not_allowed,
                             fmt::format("{} does not accept {}; use {}", path,
                                         std::string_view{request.method_string().data(),
                                                          request.method_string().size()},
                                         allow),
                             request.version(), request.keep_alive());
    response.set(http::field::allow, allow);
  } else {
    response = ErrorResponse(http::status::not_found, fmt::format("no endpoint {}", path),
                             request.version(), request.keep_alive());
  }
  Send(std::move(reply), std::move(response));
}

void HttpApi::Check(const HttpRequest& request, Reply reply) {
  absl::StatusOr<std::variant<AdHocRequest, CheckRequest>> parsed = ParseCheck(request);
  if (!parsed.ok()) {
    Send(std::move(reply), Failure(parsed.status(), request));
    return;
  }
  auto answer = Deliver<CheckResult>(request, std::move(reply), &CheckAnswer);
  if (AdHocRequest* adhoc = std::get_if<AdHocRequest>(&*parsed)) {
    service_.CheckAdHocAsync(std::move(*adhoc), std::move(answer));
  } else {
    service_.CheckAsync(std::get<CheckRequest>(*std::move(parsed)), std::move(answer));
  }
}

void HttpApi::Acquire(const HttpRequest& request, Reply reply, CancelWait* cancel) {
  std::optional<Micros> max_wait;
  absl::StatusOr<std::variant<AdHocRequest, CheckRequest>> parsed = ParseCheck(request, &max_wait);
  if (!parsed.ok()) {
    Send(std::move(reply), Failure(parsed.status(), request));
    return;
  }
  CancelWait wait = service_.AcquireAsync(
      {.check = *std::move(parsed), .max_wait = max_wait.value_or(kDefaultMaxWait)},
      Deliver<AcquireResult>(request, std::move(reply), &AcquireAnswer));
  if (cancel != nullptr) {
    *cancel = std::move(wait);
  }
}

void HttpApi::Release(const HttpRequest& request, Reply reply) {
  absl::StatusOr<std::string> lease = ParseRelease(request);
  if (!lease.ok()) {
    Send(std::move(reply), Failure(lease.status(), request));
    return;
  }
  service_.ReleaseAsync(*std::move(lease),
                        Deliver<bool>(request, std::move(reply), &ReleaseAnswer));
}

void HttpApi::EnvoyJson(const HttpRequest& request, Reply reply) {
  absl::StatusOr<CheckRequest> check = ParseEnvoyJson(request);
  if (!check.ok()) {
    Send(std::move(reply), Failure(check.status(), request));
    return;
  }
  service_.ShouldRateLimitAsync(
      *std::move(check),
      Deliver<std::vector<DescriptorResult>>(request, std::move(reply), &EnvoyJsonResponse));
}

void HttpApi::Auth(const HttpRequest& request, std::string_view peer, Reply reply) {
  auto fail = [&](const absl::Status& status) { Send(std::move(reply), Failure(status, request)); };
  const std::string_view target = request.target();
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
  const std::shared_ptr<const RuleSet> rules = service_.rules();
  const Domain* domain = nullptr;
  for (const auto& candidate : rules->domains()) {
    if (!candidate->auth.empty() && (domain_name.empty() || candidate->name == domain_name)) {
      if (domain != nullptr) {
        fail(absl::InvalidArgumentError("several domains define 'auth': name one with ?domain="));
        return;
      }
      domain = candidate.get();
    }
  }
  if (domain == nullptr) {
    fail(absl::FailedPreconditionError(
        domain_name.empty()
            ? std::string("no domain defines 'auth' descriptors")
            : fmt::format("domain '{}' defines no 'auth' descriptors", domain_name)));
    return;
  }
  CheckRequest check{.domain = domain->name, .leases = false};
  for (const std::vector<AuthEntry>& source : domain->auth) {
    RequestDescriptor descriptor;
    for (const AuthEntry& entry : source) {
      std::string_view value;
      if (entry.header == ":remote_addr") {
        value = peer;
      } else if (const auto field = request.find(entry.header); field != request.end()) {
        value = field->value();
      } else {
        break;  // A missing header skips the descriptor, as Envoy's actions do.
      }
      descriptor.entries.push_back({.key = entry.key, .value = std::string(value)});
    }
    if (descriptor.entries.size() == source.size()) {
      check.descriptors.push_back(std::move(descriptor));
    }
  }
  if (check.descriptors.empty()) {
    Send(std::move(reply), JsonResponse(http::status::ok, ResultText(CheckResult{}), request));
    return;
  }
  service_.CheckAsync(std::move(check),
                      Deliver<CheckResult>(request, std::move(reply), &AuthAnswer));
}

HttpResponse HttpApi::Rules(const HttpRequest& request) {
  const std::shared_ptr<const RuleSet> rules = service_.rules();
  Json domains = Json::array();
  for (const auto& domain : rules->domains()) {
    Json list = Json::array();
    auto visit = [&](const DescriptorLevel& level, auto& self) -> void {
      for (const auto& node : level.nodes) {
        if (node->rule) {
          const Rule& rule = *node->rule;
          Json limits = Json::array();
          for (const RuleLimit& rule_limit : rule.limits) {
            const LimitOutcome shown{.name = rule_limit.name,
                                     .limit = rule_limit.limit,
                                     .nominal = rule_limit.nominal,
                                     .unit = rule_limit.unit,
                                     .mode = rule.mode,
                                     .unlimited = rule_limit.unlimited};
            std::string text;
            AppendLimit(text, shown, /*decision=*/nullptr);
            // Well-formed: AppendLimit writes valid JSON whatever the names hold.
            Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
            if (!json.is_object()) {
              continue;  // Cannot happen; never index a discarded value (it would throw).
            }
            if (rule_limit.limit && UsesBurst(rule_limit.limit->algorithm())) {
              json["burst"] = rule_limit.limit->burst() - rule_limit.soft_extra;
            }
            if (!rule_limit.replaces.empty()) {
              json["replaces"] = rule_limit.replaces;
            }
            limits.push_back(std::move(json));
          }
          Json entry = {{"path", rule.path}, {"mode", ModeName(rule.mode)}, {"limits", limits}};
          if (rule.mode == Mode::kSoft) {
            entry["soft_percent"] = rule.soft_percent;
          }
          if (rule.pool != nullptr) {
            entry["pool"] = rule.pool->name;
          }
          if (rule.concurrency) {
            entry["concurrency"] = rule.concurrency->capacity;
            entry["lease_ttl"] = FormatDuration(rule.concurrency->lease_ttl);
          }
          list.push_back(std::move(entry));
        }
        self(node->children, self);
      }
    };
    visit(domain->descriptors, visit);
    domains.push_back({{"domain", domain->name}, {"file", domain->file}, {"rules", list}});
  }
  return JsonResponse(http::status::ok, Json{{"domains", domains}}, request);
}

}  // namespace sluice::server
