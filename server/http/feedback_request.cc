// POST /v1/feedback's body (request.h's ParseFeedback): the limits, named as a check names
// them, and the partner's answer, read by partner_headers.h.

#include <utility>
#include <vector>

#include "fmt/format.h"
#include "nlohmann/json.hpp"

#include "server/http/partner_headers.h"
#include "server/http/request.h"

namespace sluice::server {
namespace {

using Json = nlohmann::json;

// "headers": {"name": "value" or ["value", ...]} or [["name", "value"], ...].
absl::Status ReadHeaders(const Json& headers, std::vector<PartnerHeader>& out) {
  auto add = [&out](const std::string& name, const Json& value) -> absl::Status {
    if (out.size() >= 4 * kMaxPartnerHeaders) {
      return absl::InvalidArgumentError(
          fmt::format("partner.headers: more than {} values", 4 * kMaxPartnerHeaders));
    }
    if (value.is_number_integer()) {
      out.push_back({name, value.dump()});
      return absl::OkStatus();
    }
    if (!value.is_string()) {
      return absl::InvalidArgumentError(
          fmt::format("partner.headers: the value of '{}' must be a string", name));
    }
    out.push_back({name, value.get<std::string>()});
    return absl::OkStatus();
  };
  if (headers.is_object()) {
    for (const auto& [name, value] : headers.items()) {
      const bool list = value.is_array();
      for (const Json& v : list ? value : Json::array({value})) {
        if (absl::Status s = add(name, v); !s.ok()) {
          return s;
        }
      }
    }
    return absl::OkStatus();
  }
  if (headers.is_array()) {
    for (const Json& pair : headers) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string()) {
        return absl::InvalidArgumentError(
            "partner.headers: each of a list of headers must be [\"name\", \"value\"]");
      }
      if (absl::Status s = add(pair[0].get<std::string>(), pair[1]); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      "partner.headers must be an object ({\"Retry-After\": \"5\"}) or a list of [name, value]");
}

}  // namespace

absl::StatusOr<FeedbackRequest> ParseFeedback(const HttpRequest& request, Timestamp now) {
  absl::StatusOr<std::variant<AdHocRequest, CheckRequest>> target =
      ParseCheck(request, nullptr, "partner");
  if (!target.ok()) {
    return target.status();
  }
  // ParseCheck read the body as a JSON object, within simdjson's depth: this parse is bounded.
  const Json body = Json::parse(request.body(), nullptr, /*allow_exceptions=*/false);
  const auto partner = body.find("partner");
  if (partner == body.end() || !partner->is_object()) {
    return absl::InvalidArgumentError(
        "partner is missing: {\"status\": 429, \"headers\": {\"Retry-After\": \"5\"}}");
  }
  for (const auto& [name, value] : partner->items()) {
    if (name != "status" && name != "headers") {
      return absl::InvalidArgumentError(fmt::format("unknown field 'partner.{}'", name));
    }
  }
  int status = 0;
  if (const auto s = partner->find("status"); s != partner->end()) {
    if (!s->is_number_integer() || s->get<int64_t>() < 100 || s->get<int64_t>() > 599) {
      return absl::InvalidArgumentError("partner.status must be an HTTP status, 100 to 599");
    }
    status = s->get<int>();
  }
  std::vector<PartnerHeader> headers;
  if (const auto h = partner->find("headers"); h != partner->end()) {
    if (absl::Status s = ReadHeaders(*h, headers); !s.ok()) {
      return s;
    }
  }
  if (status == 0 && headers.empty()) {
    return absl::InvalidArgumentError("partner has neither a status nor headers: nothing to tell");
  }
  return FeedbackRequest{.target = *std::move(target),
                         .answer = ReadPartnerAnswer(status, headers, now)};
}

}  // namespace sluice::server
