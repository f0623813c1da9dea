#include "server/http/debug.h"

#include <utility>

#include "fmt/format.h"

#include "server/http/answers.h"
#include "server/rules/rules.h"

namespace sluice::server {

namespace http = boost::beast::http;

void DebugApi::Handle(const HttpRequest& request, std::string_view peer, Respond respond,
                      CancelWait* cancel) {
  const std::string_view target = request.target();
  const std::string_view path = target.substr(0, target.find('?'));
  const bool get = request.method() == http::verb::get || request.method() == http::verb::head;
  if (path == "/json" && api_ != nullptr) {
    api_->Handle(request, peer, std::move(respond), cancel);
    return;
  }
  HttpResponse response;
  if ((path == "/" || path == "/rlconfig") && !get) {
    response = ErrorResponse(http::status::method_not_allowed,
                             fmt::format("{} accepts GET and HEAD", path), request.version(),
                             request.keep_alive());
    response.set(http::field::allow, "GET, HEAD");
  } else if (path == "/") {
    response = TextResponse(
        http::status::ok,
        api_ != nullptr ? "/rlconfig: print out the currently loaded configuration for debugging\n"
                          "/json: POST Envoy's request in JSON (\"explain\": true explains it)\n"
                        : "/rlconfig: print out the currently loaded configuration for debugging\n",
        request);
  } else if (path == "/rlconfig") {
    response = TextResponse(http::status::ok, DumpRules(*service_.rules()), request);
  } else {
    response = ErrorResponse(http::status::not_found, fmt::format("no page {}", path),
                             request.version(), request.keep_alive());
  }
  if (request.method() == http::verb::head) {
    response.body().clear();  // The headers alone (Content-Length stays as for GET).
  }
  std::move(respond)([response = std::move(response)]() mutable { return std::move(response); });
}

}  // namespace sluice::server
