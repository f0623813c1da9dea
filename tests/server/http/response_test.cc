#include "server/http/response.h"

#include <stdexcept>
#include <string>

#include "boost/beast/core/flat_buffer.hpp"
#include "boost/beast/http/parser.hpp"
#include "boost/beast/http/string_body.hpp"
#include "gtest/gtest.h"

namespace sluice::server {
namespace {

namespace http = boost::beast::http;

std::string Wire(const HttpResponse& response) {
  std::string out;
  response.AppendTo(out);
  return out;
}

// The wire text read back by Beast's own parser, as a client would read it.
http::response<http::string_body> ParseBack(const std::string& wire, bool head = false) {
  http::response_parser<http::string_body> parser;
  parser.eager(true);
  parser.skip(head);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(wire), ec);
  EXPECT_FALSE(ec) << ec.message() << "\n" << wire;
  EXPECT_TRUE(parser.is_done()) << wire;
  return parser.release();
}

TEST(HttpResponseTest, WritesStatusHeadersInOrderAndBody) {
  HttpResponse response{http::status::too_many_requests, 11};
  response.set(http::field::content_type, "application/json");
  response.set("RateLimit-Remaining", "0");
  response.body() = R"({"allowed":false})";
  response.prepare_payload();
  EXPECT_EQ(Wire(response),
            "HTTP/1.1 429 Too Many Requests\r\n"
            "Content-Type: application/json\r\n"
            "RateLimit-Remaining: 0\r\n"
            "Content-Length: 17\r\n"
            "\r\n"
            R"({"allowed":false})");
  const auto back = ParseBack(Wire(response));
  EXPECT_EQ(back.result(), http::status::too_many_requests);
  EXPECT_EQ(back["RateLimit-Remaining"], "0");
  EXPECT_EQ(back.body(), R"({"allowed":false})");
  EXPECT_TRUE(back.keep_alive());
}

TEST(HttpResponseTest, SettingAHeaderAgainReplacesItWhereItWas) {
  HttpResponse response;
  response.set("RateLimit-Limit", "10");
  response.set("Retry-After", "1");
  response.set("ratelimit-limit", "100");  // Another case: the same header.
  response.set(http::field::retry_after, "30");
  EXPECT_EQ(response["RateLimit-Limit"], "100");
  EXPECT_EQ(response["RATELIMIT-LIMIT"], "100");
  EXPECT_EQ(response[http::field::retry_after], "30");
  EXPECT_EQ(Wire(response), "HTTP/1.1 200 OK\r\nRateLimit-Limit: 100\r\nRetry-After: 30\r\n\r\n");
}

TEST(HttpResponseTest, AHeaderIsFoundByItsWholeNameOnly) {
  HttpResponse response;
  response.set("RateLimit-Remaining", "4");
  response.set("Remaining", "5");
  EXPECT_FALSE(response.has("RateLimit"));
  EXPECT_FALSE(response.has("Limit-Remaining"));
  EXPECT_EQ(response["RateLimit"], "");
  EXPECT_EQ(response["Remaining"], "5");
  response.set("RateLimit", "6");  // A prefix of a name already there is a header of its own.
  EXPECT_EQ(response["RateLimit-Remaining"], "4");
  EXPECT_EQ(response["RateLimit"], "6");
}

TEST(HttpResponseTest, AValueMayHoldAColonAndBeEmpty) {
  HttpResponse response;
  response.set("RateLimit-Policy", "10;w=1, 1000;w=86400");
  response.set("X-Empty", "");
  response.set("Location", "http://h:1/p");
  response.set("RateLimit-Policy", "5;w=1");
  response.prepare_payload();
  EXPECT_EQ(response["RateLimit-Policy"], "5;w=1");
  EXPECT_TRUE(response.has("X-Empty"));
  EXPECT_EQ(response["X-Empty"], "");
  EXPECT_EQ(response["Location"], "http://h:1/p");
  EXPECT_EQ(ParseBack(Wire(response))["Location"], "http://h:1/p");
}

TEST(HttpResponseTest, ConnectionHeaderOnlyWhereTheVersionDefaultIsOverridden) {
  HttpResponse closing{http::status::bad_request, 11};
  closing.keep_alive(false);
  closing.prepare_payload();
  EXPECT_NE(Wire(closing).find("\r\nConnection: close\r\n"), std::string::npos);
  EXPECT_FALSE(ParseBack(Wire(closing)).keep_alive());

  HttpResponse old_keeping{http::status::ok, 10};
  old_keeping.keep_alive(true);
  old_keeping.prepare_payload();
  EXPECT_EQ(Wire(old_keeping).rfind("HTTP/1.0 200 OK\r\n", 0), 0U);
  EXPECT_NE(Wire(old_keeping).find("\r\nConnection: keep-alive\r\n"), std::string::npos);
  EXPECT_TRUE(ParseBack(Wire(old_keeping)).keep_alive());

  HttpResponse old_closing{http::status::ok, 10};  // HTTP/1.0 closes unless told otherwise.
  EXPECT_FALSE(old_closing.keep_alive());
  EXPECT_EQ(Wire(old_closing).find("Connection"), std::string::npos);
  HttpResponse keeping{http::status::ok, 11};
  EXPECT_EQ(Wire(keeping).find("Connection"), std::string::npos);
}

TEST(HttpResponseTest, AHeadAnswerKeepsTheLengthOfTheBodyItLeavesOut) {
  HttpResponse response;
  response.body() = "twelve bytes";
  response.prepare_payload();
  response.body().clear();
  EXPECT_EQ(response["Content-Length"], "12");
  EXPECT_EQ(Wire(response), "HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n");
  EXPECT_TRUE(ParseBack(Wire(response), /*head=*/true).body().empty());
}

TEST(HttpResponseTest, RefusesAHeaderThatWouldNotBeOneLine) {
  HttpResponse response;
  EXPECT_THROW(response.set("X-Split", "a\r\nInjected: yes"), std::invalid_argument);
  EXPECT_THROW(response.set("X-Split", "a\nb"), std::invalid_argument);
  EXPECT_THROW(response.set("X-Bad:Name", "a"), std::invalid_argument);
  EXPECT_THROW(response.set("X-Bad\r\nName", "a"), std::invalid_argument);
  EXPECT_EQ(Wire(response), "HTTP/1.1 200 OK\r\n\r\n");
}

}  // namespace
}  // namespace sluice::server
