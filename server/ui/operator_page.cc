#include "server/ui/operator_page.h"

#include <charconv>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

#include "server/http/answers.h"
#include "server/http/request.h"
#include "server/ui/assets.h"
#include "server/ui/burst_picture.h"

namespace sluice::server {
namespace {

namespace http = boost::beast::http;

// The page's own files and its data from its own origin, nothing else: an injected script,
// style or image has nowhere to come from, and no other site may frame the page.
constexpr std::string_view kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

void Protect(HttpResponse& response) {
  response.set("Content-Security-Policy", kContentSecurityPolicy);
  response.set("X-Content-Type-Options", "nosniff");
  response.set("Referrer-Policy", "no-referrer");
  response.set(http::field::cache_control, "no-store");
}

HttpResponse AssetResponse(const Asset& asset, const HttpRequest& request) {
  HttpResponse response{http::status::ok, request.version()};
  response.set(http::field::content_type, asset.content_type);
  response.keep_alive(request.keep_alive());
  response.body() = asset.body;
  response.prepare_payload();
  return response;
}

const Asset* FindAsset(std::string_view name) {
  for (const Asset& asset : PageAssets()) {
    if (asset.name == name) {
      return &asset;
    }
  }
  return nullptr;
}

// A whole decimal number in [low, high], or nullopt.
std::optional<int64_t> NumberIn(std::string_view text, int64_t low, int64_t high) {
  int64_t n = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (error != std::errc() || end != text.data() + text.size() || n < low || n > high) {
    return std::nullopt;
  }
  return n;
}

// Why the page's POST may not be the page's own (CSRF), or empty.
std::string_view ForeignPost(const HttpRequest& request) {
  const std::string_view type = HeaderOf(request, http::field::content_type);
  if (!absl::StartsWithIgnoreCase(absl::string_view(type.data(), type.size()),
                                  "application/json")) {
    return "POST /ui/api/check needs Content-Type: application/json";
  }
  return {};  // (Sec-Fetch-Site is judged for every /ui/api/ path.)
}

}  // namespace

void OperatorPage::Handle(const HttpRequest& request, std::string_view peer, Respond respond,
                          CancelWait* cancel) {
  const std::string_view target = request.target();
  const std::string_view path = target.substr(0, target.find('?'));
  if (path != "/ui" && !path.starts_with("/ui/")) {
    api_.Handle(request, peer, std::move(respond), cancel);
    return;
  }
  HandlePage(request, path, peer, respond);
}

void OperatorPage::HandlePage(const HttpRequest& request, std::string_view path,
                              std::string_view peer, Respond& respond) {
  const auto send = [&](HttpResponse response) {
    Protect(response);
    if (request.method() == http::verb::head) {
      response.body().clear();  // The headers alone (Content-Length stays as for GET).
    }
    std::move(respond)([response = std::move(response)]() mutable { return std::move(response); });
  };
  const AdminToken::Verdict verdict = token_.Judge(HeaderOf(request, http::field::authorization),
                                                   AdminToken::Schemes::kBearerOrBasic);
  if (verdict != AdminToken::Verdict::kGranted) {
    metrics_.CountAdminRefused();
    // 401 for a wrong token too: a browser then asks again rather than stay refused.
    HttpResponse refused = ErrorResponse(
        http::status::unauthorized,
        verdict == AdminToken::Verdict::kWrong
            ? "the admin token is wrong"
            : "the operator's page needs the admin token (as the password; any user name)",
        request.version(), request.keep_alive());
    refused.set(http::field::www_authenticate, R"(Basic realm="sluiced", charset="UTF-8")");
    send(std::move(refused));
    return;
  }
  // The page's data is for the page: another site's <img> or form (which a browser sends with
  // the Basic credential it holds) gets nothing, nor makes sluiced draw (a burst costs ms).
  if (path.starts_with("/ui/api/")) {
    const std::string_view site = HeaderOf(request, std::string_view("Sec-Fetch-Site"));
    if (!site.empty() && site != "same-origin" && site != "none") {
      send(ErrorResponse(http::status::forbidden,
                         "/ui/api/ is for the page itself (Sec-Fetch-Site is not same-origin)",
                         request.version(), request.keep_alive()));
      return;
    }
  }
  const bool get = request.method() == http::verb::get || request.method() == http::verb::head;
  const bool post = request.method() == http::verb::post;
  const std::string_view query = request.target().substr(path.size());
  if (path == "/ui/api/check" && post) {
    if (const std::string_view why = ForeignPost(request); !why.empty()) {
      send(ErrorResponse(http::status::forbidden, why, request.version(), request.keep_alive()));
      return;
    }
    Forward(request, "/v1/check", peer, std::move(respond));
    return;
  }
  if (!get || path == "/ui/api/check") {
    HttpResponse refused = ErrorResponse(
        http::status::method_not_allowed,
        fmt::format("{} accepts {}", path, path == "/ui/api/check" ? "POST" : "GET and HEAD"),
        request.version(), request.keep_alive());
    refused.set(http::field::allow, path == "/ui/api/check" ? "POST" : "GET, HEAD");
    send(std::move(refused));
    return;
  }
  if (path == "/ui/api/rules" || path == "/ui/api/health" || path == "/ui/api/top") {
    const std::string_view to = path == "/ui/api/rules"    ? "/v1/rules"
                                : path == "/ui/api/health" ? "/healthz"
                                                           : "/v1/top";
    Forward(request, std::string(to) + std::string(query), peer, std::move(respond));
    return;
  }
  if (path == "/ui") {
    HttpResponse moved{http::status::permanent_redirect, request.version()};
    moved.set(http::field::location, "/ui/");
    moved.keep_alive(request.keep_alive());
    moved.prepare_payload();
    send(std::move(moved));
  } else if (path == "/ui/api/series") {
    send(Series(request));
  } else if (path == "/ui/api/simulate") {
    send(Simulate(request));
  } else if (const Asset* asset = FindAsset(path == "/ui/" ? "index.html" : path.substr(4))) {
    send(AssetResponse(*asset, request));
  } else {
    send(ErrorResponse(http::status::not_found, fmt::format("no page {}", path), request.version(),
                       request.keep_alive()));
  }
}

void OperatorPage::Forward(const HttpRequest& request, std::string target, std::string_view peer,
                           Respond respond) {
  // The api reads the request until its answer is built: this copy lives as long.
  auto forwarded = std::make_shared<HttpRequest>(request);
  forwarded->target(target);
  api_.HandleAsAdmin(*forwarded, peer,
                     [forwarded, respond = std::move(respond)](Build build) mutable {
                       std::move(respond)([forwarded, build = std::move(build)]() mutable {
                         HttpResponse response = std::move(build)();
                         Protect(response);
                         return response;
                       });
                     });
}

HttpResponse OperatorPage::Series(const HttpRequest& request) const {
  int seconds = RateHistory::kSeconds;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> parameters =
      ParseQuery(request.target());
  if (!parameters.ok()) {
    return Failure(parameters.status(), request);
  }
  for (const auto& [name, value] : *parameters) {
    const std::optional<int64_t> n = NumberIn(value, 1, RateHistory::kSeconds);
    if (name != "seconds" || !n) {
      return Failure(absl::InvalidArgumentError(fmt::format("the one parameter is seconds, 1 to {}",
                                                            RateHistory::kSeconds)),
                     request);
    }
    seconds = static_cast<int>(*n);
  }
  const RateHistory::Window window = history_.Recent(seconds);
  Json series = Json::array();
  for (const RateHistory::Series& s : window.series) {
    series.push_back({{"name", s.name}, {"admitted", s.admitted}, {"denied", s.denied}});
  }
  const int64_t end_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(window.end.time_since_epoch()).count();
  return JsonResponse(http::status::ok,
                      Json{{"end_ms", end_ms},
                           {"seconds", seconds},
                           {"series", std::move(series)},
                           {"untracked", window.untracked}},
                      request);
}

HttpResponse OperatorPage::Simulate(const HttpRequest& request) const {
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> parameters =
      ParseQuery(request.target());
  if (!parameters.ok()) {
    return Failure(parameters.status(), request);
  }
  std::optional<std::string> rule;
  std::optional<int64_t> burst;
  for (const auto& [name, value] : *parameters) {
    if (name == "rule") {
      rule = value;
      continue;
    }
    burst = NumberIn(value, 1, kMaxBurst);
    if (name != "burst" || !burst) {
      return Failure(absl::InvalidArgumentError(fmt::format(
                         "the parameters are rule (a rule's path) and burst (1 to {})", kMaxBurst)),
                     request);
    }
  }
  if (!rule || !burst) {
    return Failure(absl::InvalidArgumentError("rule and burst are both needed"), request);
  }
  absl::StatusOr<std::string> svg = BurstPicture(
      *service_.rules(), *rule, *burst, std::chrono::floor<std::chrono::seconds>(clock_.Now()));
  if (!svg.ok()) {
    return Failure(svg.status(), request);
  }
  HttpResponse response{http::status::ok, request.version()};
  response.set(http::field::content_type, "image/svg+xml");
  response.keep_alive(request.keep_alive());
  response.body() = *std::move(svg);
  response.prepare_payload();
  return response;
}

}  // namespace sluice::server
