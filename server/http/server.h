#pragma once

// HttpServer: the sockets behind an HttpHandler (sluiced's HttpApi, the debug listener's
// DebugApi). One event loop (an Asio io_context on a thread of its own) per thread asked for;
// connections are accepted on the first and handed to the loop of the core they came in on
// (so a client thread's connections share a loop), unless that loop holds more than
// kLoopSlack connections beyond the loop with the fewest, which then takes it. Each connection
// lives on one loop and no lock is shared between them. Keep-alive, a bound on header and body
// size, and a read timeout per request: a request too large or too slow gets a 400 naming the
// problem, then the connection closes.
//
// Connections never take the process's last descriptors: once a new connection's descriptor
// comes within kSpareDescriptors of RLIMIT_NOFILE (or accept finds none left), accepting pauses
// and new connections wait in the listen backlog until descriptors are free again. The rest of
// the process (the rules file, the snapshot, Redis and gRPC connections, the sanitizers'
// runtimes) keeps what it needs. One warning when a shortage begins, one line when it is over.
//
// Start() and Stop() are called from one control thread.

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "boost/asio/io_context.hpp"
#include "boost/system/error_code.hpp"

#include "server/http/connection.h"
#include "server/http/handler.h"
#include "sluice/clock.h"

namespace sluice::server {

struct HttpServerOptions {
  std::string protocol = "HTTP";  // What its log lines and errors call it.
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0 picks a free port; port() tells which.
  int threads = 1;
  size_t max_body_bytes = size_t{64} * 1024;
  size_t max_header_bytes = size_t{16} * 1024;
  Micros read_timeout{10'000'000};  // For a whole request, from its first byte.
  Micros idle_timeout{60'000'000};  // For a keep-alive connection waiting for a request.
};

// The core the packets of the connection on `fd` came in on (SO_INCOMING_CPU); nullopt when
// the kernel does not say: getsockopt fails (not a socket, a kernel without the option) or
// gives a negative core (no packet seen yet).
std::optional<int> IncomingCpu(int fd);

// Where HttpServer hands a connection it has just accepted: the index of the loop, given each
// loop's open connections (`connections`, one count per loop, in order). The loop of the
// core its packets came in on (`cpu` modulo the loops: more cores than loops share them),
// unless that loop holds more than `slack` connections beyond the loop with the fewest (the
// first of them, if several), which then takes it. When the core is not known, the loop
// `in_turn` (modulo the loops) stands for the core's. Pure: the caller reads the counts.
// REQUIRES: !connections.empty(), slack >= 0.
size_t ChooseLoop(std::optional<int> cpu, size_t in_turn, std::span<const int64_t> connections,
                  int64_t slack);

class HttpServer {
 public:
  // HTTP/1.1 answered by `api`, which must outlive the server.
  HttpServer(HttpHandler& api, HttpServerOptions options);
  // Connections of another protocol (gRPC over HTTP/2: server/grpc/h2_server.h), each made by
  // `make`; the options' HTTP/1 bounds and timeouts are then the maker's to use or not.
  HttpServer(ConnectionMaker make, HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts the loops. Errors: Unavailable naming the address and the reason.
  absl::Status Start();
  uint16_t port() const { return port_; }

  // Stops accepting, lets requests in flight finish (up to `drain`), then stops the loops. A
  // store may still answer a request that outlived the drain: the answer is dropped, and the
  // store must be done (RateLimitService::WaitIdle) before the server is destroyed.
  void Stop(Micros drain);

  // Requests being handled now (read, not yet answered).
  int64_t in_flight() const { return in_flight_.load(); }

  // The open connections of each loop (empty before Start). A new connection never goes to a
  // loop that holds more than kLoopSlack connections beyond the loop with the fewest.
  std::vector<int64_t> connections_per_loop() const;
  static constexpr int64_t kLoopSlack = 32;

  // Descriptors left to the rest of the process: at most this many, and at most a quarter of
  // RLIMIT_NOFILE's soft limit.
  static constexpr int kSpareDescriptors = 64;

 private:
  struct Loop;
  void Accept();  // Accepts the next connection, on the first loop.
  // The first loop's answer to an accept that failed: a pause, then another accept.
  void AcceptFailed(const boost::system::error_code& ec);
  // Pauses accepting until a descriptor below descriptor_ceiling_ is free. `why` began the
  // pause; it is said when the pause is the first of a shortage.
  void PauseAccepting(std::string_view why);
  void LookForDescriptors();  // Accepts again once descriptors are free; looks again if not.
  // Says that the shortage under way is over: accepting went on for kShortageOver (server.cc)
  // without a pause.
  void EndShortage();
  // The loop for the connection just accepted on `fd`.
  Loop& Destination(int fd);

  ConnectionMaker make_;
  HttpServerOptions options_;
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<Loop>> loops_;
  size_t next_loop_ = 0;  // When a connection's core is not known. First loop's thread only.
  std::atomic<int64_t> in_flight_{0};
  std::atomic<bool> stopping_{false};
  bool stopped_ = false;  // Stop has run; the loops are kept until the destructor.
  // Set by Start. Accepting pauses once a connection's descriptor number reaches the ceiling.
  int64_t descriptor_limit_ = 0;  // RLIMIT_NOFILE's soft limit; 0 when there is none.
  int descriptor_ceiling_ = INT_MAX;
  // The shortage of descriptors under way: when it began, when accepting last resumed, and
  // the pauses it made. First loop's thread only.
  std::optional<std::chrono::steady_clock::time_point> short_since_;
  std::chrono::steady_clock::time_point short_resumed_;
  int64_t short_pauses_ = 0;
};

}  // namespace sluice::server
