#pragma once

// DebugApi: the pages of sluiced's debug listener (--debug HOST:PORT), as envoyproxy/ratelimit's
// debug port has them, served by an HttpServer of its own so that they stay off the API's port:
//
//   GET /          the list of pages
//   GET /rlconfig  the rules in force, one line per limit, in their format (DumpRules)
//
// Thread-safe: Handle may run on every event-loop thread.

#include <string_view>

#include "server/http/handler.h"
#include "server/service/service.h"

namespace sluice::server {

class DebugApi final : public HttpHandler {
 public:
  // `service` (whose rules are shown) must outlive the api.
  explicit DebugApi(const RateLimitService& service) : service_(service) {}

  // Answers at once (HttpHandler); `peer` and `cancel` are not used.
  void Handle(const HttpRequest& request, std::string_view peer, Respond respond,
              CancelWait* cancel) override;
  void CountMalformed() override {}

 private:
  const RateLimitService& service_;
};

}  // namespace sluice::server
