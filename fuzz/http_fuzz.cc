// The HTTP API from the wire up: bytes parsed as sluiced's server parses a request (Beast's
// parser, with the server's default header and body limits), and a request that parses
// answered by the API's routing and handlers (fuzz/api_world.h). Methods, targets, queries
// and headers are the fuzzer's; json_fuzz.cc goes deeper into the bodies.

#include <cstddef>
#include <cstdint>

#include "fuzz/api_world.h"

#include "server/http/server.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace http = boost::beast::http;
  const sluice::server::HttpServerOptions defaults;
  http::request_parser<http::string_body> parser;
  parser.eager(true);
  parser.body_limit(defaults.max_body_bytes);
  parser.header_limit(static_cast<uint32_t>(defaults.max_header_bytes));
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(data, size), ec);
  if (ec || !parser.is_done()) {
    return 0;
  }
  sluice::fuzz::ApiWorld world;
  world.Serve(parser.get());
  return 0;
}
