#pragma once

// HttpResponse: an HTTP/1.x response as sluiced sends it. The headers are kept as the text that
// goes on the wire, in one buffer, so a response costs no allocation per header and is written
// out with a copy. (Beast's message type, an allocation per header placed through a name
// table, cost about a tenth of the instructions of a check; sluiced only ever builds whole
// responses and writes them out, and Beast still parses the requests.)
//
//   HttpResponse response{http::status::ok, request.version()};
//   response.set(http::field::content_type, "application/json");
//   response.keep_alive(request.keep_alive());
//   response.body() = "{}";
//   response.prepare_payload();
//   response.AppendTo(wire);

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "boost/beast/http/field.hpp"
#include "boost/beast/http/status.hpp"
#include "boost/container/small_vector.hpp"

namespace sluice::server {

class HttpResponse {
 public:
  using Status = boost::beast::http::status;
  using Field = boost::beast::http::field;

  // 200, HTTP/1.1, keep-alive, no headers, an empty body.
  HttpResponse() = default;
  // `version` as Beast counts it: 11 for HTTP/1.1, 10 for HTTP/1.0. The connection stays open
  // by the version's default (1.1 keeps it, 1.0 closes it) until keep_alive() says otherwise.
  HttpResponse(Status status, unsigned version)
      : status_(status), version_(version), keep_alive_(version >= 11) {}

  Status result() const { return status_; }
  unsigned version() const { return version_; }

  // Whether the connection stays open after this response: written as "Connection: close"
  // (HTTP/1.1) or "Connection: keep-alive" (HTTP/1.0) where that is not the version's default.
  bool keep_alive() const { return keep_alive_; }
  void keep_alive(bool keep_alive) { keep_alive_ = keep_alive; }

  // Sets header `name` to `value`, replacing the value it had. Names compare ignoring case; a
  // header keeps the place where it was first set. Neither may hold CR or LF, nor the name a
  // colon (sluiced's own headers never do): set throws std::invalid_argument rather than write
  // a header that is not one line.
  void set(std::string_view name, std::string_view value);
  void set(Field name, std::string_view value) { set(boost::beast::http::to_string(name), value); }

  // Header `name`'s value, or "" when it has none.
  std::string_view operator[](std::string_view name) const;
  std::string_view operator[](Field name) const {
    return (*this)[boost::beast::http::to_string(name)];
  }
  bool has(std::string_view name) const;

  std::string& body() { return body_; }
  const std::string& body() const { return body_; }

  // Sets Content-Length to the body's size. (A HEAD answer clears the body afterwards and keeps
  // the length of the body it would have had.)
  void prepare_payload();

  // Appends the response as it goes on the wire: status line, headers, blank line, body.
  void AppendTo(std::string& out) const;

 private:
  // A header's line in headers_: "Name: value\r\n" from `at`.
  struct Line {
    uint32_t at;
    uint32_t name_size;
  };
  // The index in lines_ of header `name`'s line, or lines_.size().
  size_t Find(std::string_view name) const;
  // The value of lines_[i], as [start, end) in headers_.
  std::pair<size_t, size_t> ValueOf(size_t i) const;

  Status status_ = Status::ok;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  std::string headers_;  // "Name: value\r\n" for each header, in the order they were set.
  boost::container::small_vector<Line, 10> lines_;  // Found by length first, then by name.
  std::string body_;
};

}  // namespace sluice::server
