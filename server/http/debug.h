#pragma once

// DebugApi: the pages of sluiced's debug listener (--debug HOST:PORT), as envoyproxy/ratelimit's
// debug port has them, served by an HttpServer of its own so that they stay off the API's port:
//
//   GET /          the list of pages
//   GET /rlconfig  the rules in force, one line per limit, in their format (DumpRules)
//   POST /json     the API's POST /json (sluice's own): Envoy's request in JSON, which may ask
//                  "explain", for an operator whose clients speak gRPC, where Envoy's message
//                  has no field for it
//
// Thread-safe: Handle may run on every event-loop thread.

#include <string_view>

#include "server/http/handler.h"
#include "server/service/service.h"

namespace sluice::server {

class DebugApi final : public HttpHandler {
 public:
  // `service` (whose rules are shown) and `api` (which answers POST /json; none when null)
  // must outlive the api.
  explicit DebugApi(const RateLimitService& service, HttpHandler* api = nullptr)
      : service_(service), api_(api) {}

  // Answers at once (HttpHandler), but POST /json, which `api` answers.
  void Handle(const HttpRequest& request, std::string_view peer, Respond respond,
              CancelWait* cancel) override;
  void CountMalformed() override {}

 private:
  const RateLimitService& service_;
  HttpHandler* api_;
};

}  // namespace sluice::server
