#pragma once

// OperatorPage: sluiced's page for operators (`--ui`), one page at /ui/ on the HTTP listener,
// served beside the API it wraps: every request that is not the page's goes to the api as it
// came.
//
//   GET  /ui/               the page; GET /ui/<file> its script and style (server/ui/page/,
//                           built into the binary: no CDN, works offline)
//   GET  /ui/api/series     admitted and denied per second per rule limit over the last 15
//                           minutes (RateHistory); ?seconds=N for fewer
//   GET  /ui/api/rules      GET /v1/rules
//   GET  /ui/api/health     GET /healthz (its status: 200 or 503)
//   GET  /ui/api/top        GET /v1/top, with its query
//   POST /ui/api/check      POST /v1/check (the page asks at cost 0 with "explain": true)
//   GET  /ui/api/simulate   ?rule=PATH&burst=N: the rule's limits against a burst, as SVG
//                           (burst_picture.h)
//
// Who may: everything under /ui needs the admin token, shown as "Authorization: Bearer
// <token>" or as a browser's Basic credential (any user name, the token as password): a 401
// asks for Basic, so that a browser prompts for it and then sends it with every request of
// the page. Because a browser also sends it with requests other sites make it send (CSRF),
// only the page's paths take Basic, and its one POST must carry Content-Type
// application/json (which a cross-site form cannot send, and a cross-site fetch cannot
// without a preflight that gets no CORS answer) and no Sec-Fetch-Site other than
// same-origin. Every answer under /ui forbids framing and any script, style or image that is
// not the page's own (Content-Security-Policy).
//
// Thread-safe: Handle may run on every event-loop thread.

#include <memory>
#include <string>
#include <string_view>

#include "server/http/admin_token.h"
#include "server/http/api.h"
#include "server/http/handler.h"
#include "server/service/service.h"
#include "server/stats/metrics.h"
#include "server/stats/rate_history.h"
#include "sluice/clock.h"

namespace sluice::server {

class OperatorPage final : public HttpHandler {
 public:
  // Every argument must outlive the page.
  OperatorPage(HttpApi& api, const RateLimitService& service, const RateHistory& history,
               Metrics& metrics, AdminToken token, Clock& clock)
      : api_(api),
        service_(service),
        history_(history),
        metrics_(metrics),
        token_(std::move(token)),
        clock_(clock) {}

  void Handle(const HttpRequest& request, std::string_view peer, Respond respond,
              CancelWait* cancel) override;
  void CountMalformed() override { api_.CountMalformed(); }

 private:
  // The page's answer to `request` (under /ui), when it has one at hand; else it went to
  // the api, through `respond`.
  void HandlePage(const HttpRequest& request, std::string_view path, std::string_view peer,
                  Respond& respond);
  // `request` answered by the api as `target` would be, as an administrator.
  void Forward(const HttpRequest& request, std::string target, std::string_view peer,
               Respond respond);
  HttpResponse Series(const HttpRequest& request) const;
  HttpResponse Simulate(const HttpRequest& request) const;

  HttpApi& api_;
  const RateLimitService& service_;
  const RateHistory& history_;
  Metrics& metrics_;
  const AdminToken token_;
  Clock& clock_;
};

}  // namespace sluice::server
