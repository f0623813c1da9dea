#pragma once

// HttpApi: sluiced's HTTP endpoints as a function from a parsed request to a response, so that
// they can be tested without sockets. HttpServer (server/http/server.h) owns the sockets.
//
//   POST /v1/check   rules-mode or ad-hoc check, 200 or 429 with RateLimit-* headers
//   POST /v1/acquire as check, but answered once the request may go ahead (up to max_wait)
//   POST /v1/release gives back the lease of a concurrency limit
//   POST /v1/settle  settles a check's receipt at the request's real cost
//   POST /v1/reset   forgets keys (admin token)
//   GET  /v1/top     each rule's top offenders (admin token)
//   POST /json       envoyproxy/ratelimit's JSON endpoint
//   GET  /v1/auth    for nginx auth_request: descriptors from configured request headers
//   GET  /healthz    the store and its state: 200 while decisions can be made, else 503
//   GET  /metrics, GET /v1/rules
//   GET  /healthcheck envoyproxy/ratelimit's: 200 "OK" while sluiced can decide, else 500
//
// docs/server.md documents each. Thread-safe: Handle may run on every event-loop thread.
// This file routes and handles; the bodies are read by server/http/request.h and the answers
// written by server/http/answers.h.
//
// A decision waits for the store without holding the caller's thread: Handle returns at once
// and the answer arrives through a callback.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"

#include "server/http/admin_token.h"
#include "server/http/handler.h"
#include "server/http/request.h"
#include "server/http/response.h"
#include "server/service/rate_limit_headers.h"
#include "server/service/service.h"
#include "server/stats/metrics.h"

namespace sluice::server {

struct AnswerHeaders;  // answers.h

class HttpApi final : public HttpHandler {
 public:
  // What sluiced says of its health, asked at each probe on the event-loop threads (so it
  // must be cheap: what the store knows, never a call to Redis).
  struct HealthReport {
    // GET /healthz: whether decisions can be made now (200, or 503 saying why: Redis cannot
    // be reached under --redis-on-failure deny).
    absl::Status decisions;
    // Decisions are made, but not all by the store (Redis lost, the failure policy deciding):
    // /healthz's status says "degraded" (still 200).
    bool degraded = false;
    // GET /healthcheck (envoyproxy/ratelimit's): `decisions`, and not stopping, and rules
    // loaded when they are needed; 200 "OK", or 500 saying why.
    absl::Status serving;
    // /healthz's body beside its status: the store and its state ("store": "redis",
    // "redis": "lost", ...).
    std::vector<std::pair<std::string, std::string>> store;
  };
  using Health = std::function<HealthReport()>;

  // `service` and `metrics` must outlive the api. `store_metrics` returns extra Prometheus
  // lines about the store (keys, evictions), appended to GET /metrics; it may be empty.
  // `health` may be empty: /healthz and /healthcheck then always answer OK.
  // `headers`: how decisions are told in their RateLimit headers (rate_limit_headers.h).
  HttpApi(RateLimitService& service, Metrics& metrics, Clock& clock,
          std::function<std::string()> store_metrics, Health health = nullptr,
          HeaderOptions headers = {});

  // POST /v1/acquire's wait when the request names none.
  static constexpr Micros kDefaultMaxWait = std::chrono::seconds(30);

  // Answers `request` through `respond` (HttpHandler), never waiting for the store. `peer` is
  // used for the ":remote_addr" source of /v1/auth; `cancel` receives the function that gives
  // up a /v1/acquire.
  void Handle(const HttpRequest& request, std::string_view peer, Respond respond,
              CancelWait* cancel = nullptr) override;

  // As Handle, with the admin token taken as shown: for a handler that has judged the request's
  // credential itself (the operator's page, server/ui/, which takes a browser's Basic one).
  void HandleAsAdmin(const HttpRequest& request, std::string_view peer, Respond respond) {
    Route(request, peer, std::move(respond), nullptr, /*admin=*/true);
  }

  // The token of the endpoints that act on others' keys (POST /v1/reset); without one they
  // are off. Set it before serving.
  void SetAdminToken(std::optional<AdminToken> admin) { admin_ = std::move(admin); }
  // POST /json's responseHeadersToAdd in `headers`' format, as the Envoy API's gRPC answers
  // carry them (--response-headers; envoy_headers.h); none when not set. Before serving.
  void SetEnvoyHeaders(std::optional<HeaderOptions> headers) { envoy_headers_ = headers; }

  // Counts a request the server answered 400 before it could be parsed (too large, too slow,
  // not HTTP), as Handle counts its own 400s.
  void CountMalformed() override { metrics_.CountBadRequest(); }

 private:
  // A request being answered: when it came, what it is, where its answer goes.
  struct Reply {
    Timestamp start;
    bool head = false;      // HEAD: the answer's headers alone.
    bool decision = false;  // Asks the service (its latency is recorded).
    bool admin = false;     // The admin token was judged shown already (HandleAsAdmin).
    Respond respond;
  };
  template <typename Result>
  struct Decided;

  // Handle's, and HandleAsAdmin's with `admin`.
  void Route(const HttpRequest& request, std::string_view peer, Respond respond, CancelWait* cancel,
             bool admin);
  // The steps every answer takes before it leaves: a 400 counted, a HEAD's body dropped, a
  // decision's latency recorded.
  HttpResponse Finish(HttpResponse response, const Reply& reply);
  // Answers with `response`, built already.
  void Send(Reply reply, HttpResponse response);
  // The callback that takes the service's decision back to `reply`, formatted by `format`.
  template <typename Result>
  RateLimitService::Done<absl::StatusOr<Result>> Deliver(
      const HttpRequest& request, Reply reply,
      HttpResponse (*format)(const Result&, const HttpRequest&, const AnswerHeaders&));

  void Check(const HttpRequest& request, Reply reply);
  void Acquire(const HttpRequest& request, Reply reply, CancelWait* cancel);
  void Release(const HttpRequest& request, Reply reply);
  void Settle(const HttpRequest& request, Reply reply);
  void Reset(const HttpRequest& request, Reply reply);
  void Feedback(const HttpRequest& request, Reply reply);
  // The answer to `request` for `what` (an admin endpoint, or what only an administrator may
  // ask, named in the message) when it may not have it (401, or 403); empty when it may, or
  // when `admin` (the token judged already).
  std::optional<HttpResponse> RefuseAdmin(const HttpRequest& request, std::string_view what,
                                          bool admin) const;
  void EnvoyJson(const HttpRequest& request, Reply reply);
  void Auth(const HttpRequest& request, std::string_view peer, Reply reply);
  HttpResponse Rules(const HttpRequest& request);
  HttpResponse Top(const HttpRequest& request, bool admin);
  HttpResponse Healthz(const HttpRequest& request) const;
  HttpResponse HealthCheck(const HttpRequest& request) const;

  RateLimitService& service_;
  Metrics& metrics_;
  Clock& clock_;
  std::function<std::string()> store_metrics_;
  Health health_;
  const HeaderOptions headers_;
  std::optional<AdminToken> admin_;
  std::optional<HeaderOptions> envoy_headers_;
};

}  // namespace sluice::server
