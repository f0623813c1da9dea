// HttpServer's sockets: where accepted connections go (ChooseLoop's cases by hand, then real
// connections), and keep-alive connections closed when idle. Real sockets on a free port of
// 127.0.0.1, and a handler that answers every request 200 with no body; the counts and closes
// are waited for, never timed.

#include "server/http/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
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

// ---------------------------------------------------------------------------------------------
// ChooseLoop: the core's loop, within the slack of the fewest.

constexpr int64_t kSlack = HttpServer::kLoopSlack;

TEST(ChooseLoopTest, TheCoresLoopWhileWithinTheSlackOfTheFewest) {
  const std::array<int64_t, 3> counts = {4, 4 + kSlack, 7};
  EXPECT_EQ(ChooseLoop(0, 0, counts, kSlack), 0U);
  EXPECT_EQ(ChooseLoop(1, 0, counts, kSlack), 1U);  // Exactly the slack beyond: still its own.
  EXPECT_EQ(ChooseLoop(2, 0, counts, kSlack), 2U);
}

TEST(ChooseLoopTest, TheFewestWhenTheCoresLoopIsBeyondTheSlack) {
  const std::array<int64_t, 3> counts = {9, 5 + kSlack + 1, 5};
  EXPECT_EQ(ChooseLoop(1, 0, counts, kSlack), 2U);
  EXPECT_EQ(ChooseLoop(0, 0, counts, kSlack), 0U);  // 4 beyond the fewest: its own.
  // Several with the fewest: the first of them.
  const std::array<int64_t, 4> tied = {3, 3 + kSlack + 1, 3, 3};
  EXPECT_EQ(ChooseLoop(1, 0, tied, kSlack), 0U);
}

TEST(ChooseLoopTest, CoresBeyondTheLoopsShareThemInTurn) {
  const std::array<int64_t, 2> counts = {0, 0};
  EXPECT_EQ(ChooseLoop(2, 0, counts, kSlack), 0U);
  EXPECT_EQ(ChooseLoop(5, 0, counts, kSlack), 1U);
  EXPECT_EQ(ChooseLoop(1023, 0, counts, kSlack), 1U);
  const std::array<int64_t, 1> one = {100};
  EXPECT_EQ(ChooseLoop(7, 0, one, kSlack), 0U);
  // Beyond the slack as its own core's loop would be.
  const std::array<int64_t, 3> busy = {0, 0, kSlack + 1};
  EXPECT_EQ(ChooseLoop(5, 0, busy, kSlack), 0U);
}

TEST(ChooseLoopTest, AnUnknownCoreGoesInTurnWithinTheSlack) {
  const std::array<int64_t, 3> counts = {1, 2, 3};
  for (size_t turn = 0; turn < 7; ++turn) {
    EXPECT_EQ(ChooseLoop(std::nullopt, turn, counts, kSlack), turn % 3) << turn;
  }
  const std::array<int64_t, 3> busy = {kSlack + 2, 1, 2};
  EXPECT_EQ(ChooseLoop(std::nullopt, 3, busy, kSlack), 1U);  // Its turn, loop 0: too full.
}

// The core comes from getsockopt; when that fails, or names no core, it is not known.
TEST(IncomingCpuTest, KnownForAConnectionThatReceivedAndNotOtherwise) {
  EXPECT_EQ(IncomingCpu(-1), std::nullopt);  // EBADF.
  std::array<int, 2> pipe_fds{};
  ASSERT_EQ(pipe(pipe_fds.data()), 0);
  EXPECT_EQ(IncomingCpu(pipe_fds[0]), std::nullopt);  // ENOTSOCK.
  close(pipe_fds[0]);
  close(pipe_fds[1]);

  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(IncomingCpu(listener), std::nullopt);  // A socket no packet reached: -1.
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof(address);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), size), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &size), 0);
  const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&address), size), 0);
  ASSERT_EQ(send(client, "x", 1, MSG_NOSIGNAL), 1);
  const int accepted = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(accepted, 0);
  char byte = 0;
  ASSERT_EQ(recv(accepted, &byte, 1, 0), 1);
  const std::optional<int> cpu = IncomingCpu(accepted);
  ASSERT_TRUE(cpu.has_value());
  EXPECT_LT(*cpu, static_cast<int>(sysconf(_SC_NPROCESSORS_CONF)));
  close(accepted);
  close(client);
  close(listener);
}

// ---------------------------------------------------------------------------------------------
// Keep-alive connections: closed when idle for idle_timeout, served while they send.

// A client connection of raw bytes, so that the test sees exactly when the server closes it.
class RawClient {
 public:
  explicit RawClient(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~RawClient() { close(fd_); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }

  // Sends a GET and reads its answer's head (the handler's answers have no body): the status
  // line, or "" when the connection was closed instead.
  std::string Get() {
    static constexpr std::string_view kRequest = "GET / HTTP/1.1\r\nHost: test\r\n\r\n";
    if (send(fd_, kRequest.data(), kRequest.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(kRequest.size())) {
      return "";
    }
    std::string head;
    while (head.find("\r\n\r\n") == std::string::npos) {
      if (!Readable(std::chrono::seconds(60))) {  // A watchdog, not a measure.
        return "";
      }
      char chunk[512];
      const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
      if (n <= 0) {
        return "";
      }
      head.append(chunk, static_cast<size_t>(n));
    }
    return head.substr(0, head.find("\r\n"));
  }

  // Whether the server has closed the connection (a read finds its end), waiting up to `wait`.
  bool ClosedByServer(std::chrono::milliseconds wait) {
    if (!Readable(wait)) {
      return false;
    }
    char byte = 0;
    return recv(fd_, &byte, 1, MSG_PEEK) <= 0;
  }

 private:
  bool Readable(std::chrono::milliseconds wait) {
    pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
    return poll(&p, 1, static_cast<int>(wait.count())) == 1;
  }

  int fd_ = -1;
  bool connected_ = false;
};

// A connection that sends nothing, and one that sent a request and then nothing, are both
// closed once idle; one that keeps sending requests all the while (longer than idle_timeout
// in all: its first request came before the idle ones connected) is served throughout, its
// deadline moved by each request. The read timeout is long, so that only the idle timeout can
// close a connection within the watchdog; a busy machine only delays the closes, which are
// waited for. The idle timeout is what the busy client's rounds (about 10 ms each) must stay
// within: 5 s, so that only a thread stalled for seconds (not a loaded or sanitized run's
// scheduling) could make the busy connection idle; the test takes about that long.
TEST(HttpServerTest, AnIdleKeepAliveConnectionIsClosedAndABusyOneServed) {
  NoContent handler;
  HttpServer server(handler, HttpServerOptions{.host = "127.0.0.1",
                                               .port = 0,
                                               .threads = 2,
                                               .read_timeout = std::chrono::hours(1),
                                               .idle_timeout = std::chrono::seconds(5)});
  ASSERT_TRUE(server.Start().ok());
  RawClient busy(server.port());
  ASSERT_TRUE(busy.connected());
  ASSERT_EQ(busy.Get(), "HTTP/1.1 200 OK");
  RawClient silent(server.port());
  RawClient served_once(server.port());
  ASSERT_TRUE(silent.connected());
  ASSERT_TRUE(served_once.connected());
  ASSERT_EQ(served_once.Get(), "HTTP/1.1 200 OK");

  int requests = 1;
  bool silent_closed = false;
  bool served_once_closed = false;
  // Until both idle ones are closed: rounds of 10 ms or more, the closes due after about 500
  // (fewer on a slow machine); a watchdog of 6000.
  for (int i = 0; i < 6000 && !(silent_closed && served_once_closed); ++i) {
    ASSERT_EQ(busy.Get(), "HTTP/1.1 200 OK") << "request " << requests;
    ++requests;
    silent_closed = silent_closed || silent.ClosedByServer(std::chrono::milliseconds(5));
    served_once_closed =
        served_once_closed || served_once.ClosedByServer(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(silent_closed);
  EXPECT_TRUE(served_once_closed);
  // Still served after them.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(busy.Get(), "HTTP/1.1 200 OK");
  }
  EXPECT_EQ(Sum(WaitForTotal(server, 1)), 1);  // Only the busy one is left open.
  server.Stop(Micros{0});
}

}  // namespace
}  // namespace sluice::server
