// HttpServer's sockets: where accepted connections go. Real sockets on a free port of
// 127.0.0.1, and a handler that answers every request 204; the counts are waited for, never
// timed.

#include "server/http/server.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "boost/asio/connect.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "gtest/gtest.h"

namespace sluice::server {
namespace {

using Tcp = boost::asio::ip::tcp;

class NoContent final : public HttpHandler {
 public:
  void Handle(const HttpRequest&, std::string_view, Respond respond, CancelWait*) override {
    std::move(respond)([] { return HttpResponse(); });
  }
  void CountMalformed() override {}
};

int64_t Sum(const std::vector<int64_t>& counts) {
  int64_t sum = 0;
  for (int64_t c : counts) {
    sum += c;
  }
  return sum;
}

// Waits until the loops hold `total` connections between them (the accepts run on the first
// loop's thread), for up to a minute.
std::vector<int64_t> WaitForTotal(const HttpServer& server, int64_t total) {
  std::vector<int64_t> counts = server.connections_per_loop();
  for (int i = 0; i < 6000 && Sum(counts) != total; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    counts = server.connections_per_loop();
  }
  return counts;
}

// Connections from one thread come in on one core (or a few): each still goes to a loop that
// held at most kLoopSlack more than the fewest, so the loops end at most kLoopSlack + 1 apart.
// Closed, they are counted out.
TEST(HttpServerTest, ConnectionsStayWithinTheSlackOfTheFewest) {
  NoContent handler;
  HttpServer server(handler, HttpServerOptions{.host = "127.0.0.1", .port = 0, .threads = 3});
  ASSERT_TRUE(server.Start().ok());
  boost::asio::io_context client;
  const Tcp::endpoint endpoint(boost::asio::ip::make_address("127.0.0.1"), server.port());
  constexpr int kConnections = 3 * static_cast<int>(HttpServer::kLoopSlack) + 20;
  std::vector<std::unique_ptr<Tcp::socket>> sockets;
  for (int i = 0; i < kConnections; ++i) {
    sockets.push_back(std::make_unique<Tcp::socket>(client));
    sockets.back()->connect(endpoint);
  }
  std::vector<int64_t> counts = WaitForTotal(server, kConnections);
  ASSERT_EQ(Sum(counts), kConnections);
  ASSERT_EQ(counts.size(), 3U);
  const auto [fewest, most] = std::minmax_element(counts.begin(), counts.end());
  EXPECT_LE(*most - *fewest, HttpServer::kLoopSlack + 1)
      << counts[0] << " " << counts[1] << " " << counts[2];

  sockets.clear();
  counts = WaitForTotal(server, 0);
  EXPECT_EQ(Sum(counts), 0);
  server.Stop(Micros{0});
}

}  // namespace
}  // namespace sluice::server
