// The JSON bodies of every endpoint, and GET /v1/auth's query: the first byte names the
// endpoint, the rest is its body (or query), read by server/http/request.h and answered by the
// API (fuzz/api_world.h): POST /v1/check (rules mode and ad hoc), /v1/acquire (with max_wait),
// /v1/release, /json (Envoy's RateLimitRequest) and GET /v1/auth?... with the headers its
// rules read.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/api_world.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace http = boost::beast::http;
  static constexpr std::array<const char*, 4> kPosts = {"/v1/check", "/v1/acquire", "/v1/release",
                                                        "/json"};
  if (size == 0) {
    return 0;
  }
  const size_t endpoint = data[0] % (kPosts.size() + 1);
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  sluice::server::HttpRequest request;
  request.version(11);
  if (endpoint < kPosts.size()) {
    request.method(http::verb::post);
    request.target(kPosts[endpoint]);
    request.set(http::field::content_type, "application/json");
    request.body() = rest;
  } else {
    request.method(http::verb::get);
    request.target("/v1/auth?" + rest);
    request.set("x-api-key", "k1");
  }
  request.prepare_payload();
  sluice::fuzz::ApiWorld world;
  world.Serve(request);
  return 0;
}
