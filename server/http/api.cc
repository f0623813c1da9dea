#include "server/http/api.h"

#include <algorithm>
#include <utility>
#include <variant>

#include "fmt/format.h"
#include "nlohmann/json.hpp"

#include "server/http/answers.h"
#include "server/service/envoy_headers.h"
#include "sluice/duration.h"

namespace sluice::server {
namespace {

namespace http = boost::beast::http;

// The methods an endpoint accepts, for a 405's Allow header; empty for an unknown path.
std::string_view AllowedMethods(std::string_view path) {
  if (path == "/v1/check" || path == "/v1/acquire" || path == "/v1/release" || path == "/json" ||
      path == "/v1/settle" || path == "/v1/reset" || path == "/v1/feedback") {
    return "POST";
  }
  if (path == "/v1/auth") {
    return "GET, HEAD";
  }
  if (path == "/healthz" || path == "/healthcheck" || path == "/metrics" || path == "/v1/rules" ||
      path == "/v1/top") {
    return "GET, HEAD";
  }
  return {};
}

// The answers that carry no RateLimit headers, in the form Deliver takes.
HttpResponse Released(const bool& released, const HttpRequest& request, const AnswerHeaders&) {
  return ReleaseAnswer(released, request);
}
HttpResponse EnvoyJson(const EnvoyAnswer& answer, const HttpRequest& request,
                       const AnswerHeaders&) {
  return EnvoyJsonResponse(answer, request);
}
HttpResponse Settled(const SettleResult& result, const HttpRequest& request, const AnswerHeaders&) {
  return SettleAnswer(result, request);
}
HttpResponse WasReset(const ResetResult& result, const HttpRequest& request, const AnswerHeaders&) {
  return ResetAnswer(result, request);
}
HttpResponse FedBack(const FeedbackResult& result, const HttpRequest& request,
                     const AnswerHeaders&) {
  return FeedbackAnswer(result, request);
}

}  // namespace

HttpApi::HttpApi(RateLimitService& service, Metrics& metrics, Clock& clock,
                 std::function<std::string()> store_metrics, Health health, HeaderOptions headers)
    : service_(service),
      metrics_(metrics),
      clock_(clock),
      store_metrics_(std::move(store_metrics)),
      health_(std::move(health)),
      headers_(std::move(headers)) {}

// A decision under way: what building its answer needs, in one allocation that follows it
// through the service and back to the caller. The callbacks hold only the pointer, which fits
// inside an AnyInvocable, so they allocate nothing more.
template <typename Result>
struct HttpApi::Decided {
  HttpApi& api;
  const HttpRequest& request;
  HttpResponse (*format)(const Result&, const HttpRequest&, const AnswerHeaders&);
  Reply reply;
  // Empty until the service answers. (Not a StatusOr holding an error meanwhile: an error
  // with a message is an allocation per request.)
  std::optional<absl::StatusOr<Result>> result;
};

template <typename Result>
RateLimitService::Done<absl::StatusOr<Result>> HttpApi::Deliver(
    const HttpRequest& request, Reply reply,
    HttpResponse (*format)(const Result&, const HttpRequest&, const AnswerHeaders&)) {
  auto decided = std::make_unique<Decided<Result>>(Decided<Result>{
      .api = *this, .request = request, .format = format, .reply = std::move(reply)});
  return [decided = std::move(decided)](absl::StatusOr<Result> result) mutable {
    decided->result = std::move(result);
    Respond respond = std::move(decided->reply.respond);
    std::move(respond)([decided = std::move(decided)]() {
      const absl::StatusOr<Result>& r = *decided->result;
      return decided->api.Finish(r.ok() ? decided->format(*r, decided->request,
                                                          {.options = decided->api.headers_,
                                                           .now = decided->api.clock_.Now()})
                                        : Failure(r.status(), decided->request),
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
  Route(request, peer, std::move(respond), cancel, /*admin=*/false);
}

void HttpApi::Route(const HttpRequest& request, std::string_view peer, Respond respond,
                    CancelWait* cancel, bool admin) {
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
              .admin = admin,
              .respond = std::move(respond)};
  if (path == "/v1/acquire" && only(http::verb::post)) {
    Acquire(request, std::move(reply), cancel);
    return;
  }
  if (path == "/v1/release" && only(http::verb::post)) {
    Release(request, std::move(reply));
    return;
  }
  if (path == "/v1/settle" && only(http::verb::post)) {
    Settle(request, std::move(reply));
    return;
  }
  if (path == "/v1/reset" && only(http::verb::post)) {
    Reset(request, std::move(reply));
    return;
  }
  if (path == "/v1/feedback" && only(http::verb::post)) {
    Feedback(request, std::move(reply));
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
    response = Healthz(request);
  } else if (path == "/healthcheck" && only(http::verb::get)) {
    response = HealthCheck(request);
  } else if (path == "/metrics" && only(http::verb::get)) {
    response = HttpResponse{http::status::ok, request.version()};
    response.set(http::field::server, "sluiced");
    response.set(http::field::content_type, "text/plain; version=0.0.4");
    response.keep_alive(request.keep_alive());
    response.body() = metrics_.Render(store_metrics_ ? store_metrics_() : std::string());
    response.prepare_payload();
  } else if (path == "/v1/rules" && only(http::verb::get)) {
    response = Rules(request);
  } else if (path == "/v1/top" && only(http::verb::get)) {
    response = Top(request, admin);
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
  // An explanation of a request that charges nothing is a look at keys that may be another's:
  // for an administrator.
  if (const auto [explain, cost] = std::visit(
          [](const auto& r) {
            return std::pair{r.explain, r.cost};
          },
          *parsed);
      explain && cost == 0) {
    if (std::optional<HttpResponse> refused =
            RefuseAdmin(request, "an explanation at cost 0", reply.admin)) {
      metrics_.CountAdminRefused();
      Send(std::move(reply), *std::move(refused));
      return;
    }
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
  if (std::visit([](const auto& r) { return r.explain; }, *parsed)) {
    Send(std::move(reply),
         Failure(absl::InvalidArgumentError(
                     "explain: an acquire is not explained; ask POST /v1/check with it"),
                 request));
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
  service_.ReleaseAsync(*std::move(lease), Deliver<bool>(request, std::move(reply), &Released));
}

void HttpApi::Settle(const HttpRequest& request, Reply reply) {
  absl::StatusOr<SettleRequest> settle = ParseSettle(request);
  if (!settle.ok()) {
    Send(std::move(reply), Failure(settle.status(), request));
    return;
  }
  service_.SettleAsync(*std::move(settle),
                       Deliver<SettleResult>(request, std::move(reply), &Settled));
}

std::optional<HttpResponse> HttpApi::RefuseAdmin(const HttpRequest& request, std::string_view what,
                                                 bool admin) const {
  if (admin) {
    return std::nullopt;
  }
  if (!admin_) {
    return ErrorResponse(
        http::status::forbidden,
        fmt::format("admin endpoints are off: start sluiced with --admin-token-file ({} is for "
                    "an administrator)",
                    what),
        request.version(), request.keep_alive());
  }
  switch (admin_->Judge(HeaderOf(request, http::field::authorization))) {
    case AdminToken::Verdict::kMissing: {
      HttpResponse response =
          ErrorResponse(http::status::unauthorized,
                        fmt::format("{} needs the admin token: Authorization: Bearer", what),
                        request.version(), request.keep_alive());
      response.set(http::field::www_authenticate, "Bearer");
      return response;
    }
    case AdminToken::Verdict::kWrong:
      return ErrorResponse(http::status::forbidden, "the admin token is wrong", request.version(),
                           request.keep_alive());
    case AdminToken::Verdict::kGranted:
      break;
  }
  return std::nullopt;
}

void HttpApi::Reset(const HttpRequest& request, Reply reply) {
  if (std::optional<HttpResponse> refused = RefuseAdmin(request, "POST /v1/reset", reply.admin)) {
    metrics_.CountAdminRefused();
    Send(std::move(reply), *std::move(refused));
    return;
  }
  absl::StatusOr<std::variant<AdHocRequest, CheckRequest>> parsed = ParseCheck(request);
  if (!parsed.ok()) {
    Send(std::move(reply), Failure(parsed.status(), request));
    return;
  }
  service_.ResetAsync(*std::move(parsed),
                      Deliver<ResetResult>(request, std::move(reply), &WasReset));
}

void HttpApi::Feedback(const HttpRequest& request, Reply reply) {
  absl::StatusOr<FeedbackRequest> parsed = ParseFeedback(request, clock_.Now());
  if (!parsed.ok()) {
    Send(std::move(reply), Failure(parsed.status(), request));
    return;
  }
  service_.FeedbackAsync(*std::move(parsed),
                         Deliver<FeedbackResult>(request, std::move(reply), &FedBack));
}

void HttpApi::EnvoyJson(const HttpRequest& request, Reply reply) {
  absl::StatusOr<CheckRequest> check = ParseEnvoyJson(request);
  if (!check.ok()) {
    Send(std::move(reply), Failure(check.status(), request));
    return;
  }
  // As /v1/check: an explanation of a descriptor that charges nothing (hitsAddend 0) is a look
  // at keys that may be another's.
  if (check->explain &&
      std::any_of(check->descriptors.begin(), check->descriptors.end(),
                  [&](const RequestDescriptor& d) { return d.cost.value_or(check->cost) == 0; })) {
    if (std::optional<HttpResponse> refused =
            RefuseAdmin(request, "an explanation at cost 0", reply.admin)) {
      metrics_.CountAdminRefused();
      Send(std::move(reply), *std::move(refused));
      return;
    }
  }
  service_.ShouldRateLimitAsync(
      *std::move(check),
      [this, deliver = Deliver<EnvoyAnswer>(request, std::move(reply), &server::EnvoyJson)](
          absl::StatusOr<std::vector<DescriptorResult>> results) mutable {
        if (!results.ok()) {
          std::move(deliver)(results.status());
          return;
        }
        const bool over = service_.OverallOverLimit(*results);
        EnvoyAnswer answer{.statuses = *std::move(results), .over_limit = over};
        if (envoy_headers_) {
          AddEnvoyHeaders(answer.statuses, *envoy_headers_, clock_.Now(),
                          [&answer](std::string_view name, std::string_view value) {
                            answer.headers.emplace_back(name, value);
                          });
        }
        std::move(deliver)(std::move(answer));
      });
}

void HttpApi::Auth(const HttpRequest& request, std::string_view peer, Reply reply) {
  auto fail = [&](const absl::Status& status) { Send(std::move(reply), Failure(status, request)); };
  const std::string_view domain_name = DomainInQuery(request.target());
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
  // No domain (or not the one named) defines 'auth': nothing limits the request, which is
  // admitted, as envoyproxy/ratelimit admits a domain it has no rules for. An error here would
  // reach nginx's clients as 500 (auth_request passes only 2xx, 401 and 403).
  if (domain == nullptr) {
    Send(std::move(reply),
         JsonResponse(http::status::ok, ResultText(CheckResult{.unmatched = true}), request));
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
    Send(std::move(reply),
         JsonResponse(http::status::ok, ResultText(CheckResult{.unmatched = true}), request));
    return;
  }
  service_.CheckAsync(std::move(check),
                      Deliver<CheckResult>(request, std::move(reply), &AuthAnswer));
}

// Whether decisions can be made, and by what: {"status": "ok" | "degraded" | "unavailable",
// "store": ..., "error": why, when unavailable}; 200, or 503 when unavailable.
HttpResponse HttpApi::Healthz(const HttpRequest& request) const {
  if (!health_) {
    return JsonResponse(http::status::ok, Json{{"status", "ok"}}, request);
  }
  const HealthReport report = health_();
  const bool ok = report.decisions.ok();
  Json body = {{"status", !ok ? "unavailable" : report.degraded ? "degraded" : "ok"}};
  for (const auto& [name, value] : report.store) {
    body[name] = value;
  }
  if (!ok) {
    body["error"] = std::string(report.decisions.message());
  }
  return JsonResponse(ok ? http::status::ok : http::status::service_unavailable, body, request);
}

// As envoyproxy/ratelimit answers it (Kubernetes probes call it): 200 "OK" in plain text, or
// 500, here with the reason as the body (theirs has none).
HttpResponse HttpApi::HealthCheck(const HttpRequest& request) const {
  const absl::Status health = health_ ? health_().serving : absl::OkStatus();
  if (health.ok()) {
    return TextResponse(http::status::ok, "OK", request);
  }
  return TextResponse(http::status::internal_server_error, std::string(health.message()) + "\n",
                      request);
}

HttpResponse HttpApi::Top(const HttpRequest& request, bool admin) {
  if (std::optional<HttpResponse> refused = RefuseAdmin(request, "GET /v1/top", admin)) {
    metrics_.CountAdminRefused();
    return *std::move(refused);
  }
  absl::StatusOr<TopQuery> query = ParseTopQuery(request.target());
  if (!query.ok()) {
    return Failure(query.status(), request);
  }
  return TopAnswer(metrics_.top().Top(query->rule, query->by, query->n, clock_.Now()), query->by,
                   service_.key_names(), request);
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
