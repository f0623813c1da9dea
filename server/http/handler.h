#pragma once

// HttpHandler: what HttpServer (server/http/server.h) serves, a function from a parsed request
// to a response. Two implement it: HttpApi (server/http/api.h), sluiced's API, and DebugApi
// (server/http/debug.h), the debug listener's few pages. A handler must be thread-safe: Handle
// runs on every event-loop thread of its server.

#include <string_view>

#include "absl/functional/any_invocable.h"

#include "server/http/request.h"
#include "server/http/response.h"

namespace sluice::server {

class HttpHandler {
 public:
  virtual ~HttpHandler() = default;

  // Builds a response; run it on the thread that writes the response.
  using Build = absl::AnyInvocable<HttpResponse() &&>;
  // Receives the answer to a request, once: a function that builds the response. Called
  // before Handle returns when the answer is at hand, else later on another thread (the
  // store's): so building is left to the caller, which runs it on its own thread.
  using Respond = absl::AnyInvocable<void(Build) &&>;
  // Gives up a request that waits (POST /v1/acquire) when its client has gone.
  using CancelWait = absl::AnyInvocable<void()>;

  // Answers `request` through `respond`, never blocking. `request` must stay alive and
  // unchanged until the response is built. `peer` is the client's address. For a request that
  // may wait long, `cancel`, when given, receives the function that gives it up.
  virtual void Handle(const HttpRequest& request, std::string_view peer, Respond respond,
                      CancelWait* cancel) = 0;

  // Counts a request the server answered 400 before it could be parsed (too large, too slow,
  // not HTTP).
  virtual void CountMalformed() = 0;
};

}  // namespace sluice::server
