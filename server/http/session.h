#pragma once

// One client connection of HttpServer (server.cc): a request read, answered by the
// HttpHandler, and again while the client keeps the connection alive, with its idle and read
// timeouts. Private to server/http: server.cc makes a Session for each connection it accepts
// and keeps it on its loop; nothing else does.

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

#include "server/http/answers.h"
#include "server/http/connection.h"
#include "server/http/handler.h"
#include "server/http/server.h"
#include "sluice/duration.h"

namespace sluice::server::internal {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using net::LoopExecutor;
using net::Socket;
using net::Tcp;
using net::Timer;

// One client connection: wait for a request's first bytes (idle timeout), read the rest of it
// (read timeout), answer, and again while the client keeps the connection alive. The timeouts
// are a timer of the session's own that cancels the read rather than closing the socket, so a
// request that timed out can still be told why.
class Session final : public Connection, public std::enable_shared_from_this<Session> {
 public:
  // The caller has counted this connection into `shared.connections`; the session counts it
  // out when it ends.
  Session(Socket socket, HttpHandler& api, const HttpServerOptions& options,
          ConnectionShared shared)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        api_(api),
        options_(options),
        in_flight_(shared.in_flight),
        stopping_(shared.stopping),
        connections_(shared.connections) {}
  ~Session() override { connections_.fetch_sub(1, std::memory_order_relaxed); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  LoopExecutor executor() override { return socket_.get_executor(); }

  // Closes the connection at once. Only from the session's loop, or once no thread runs it.
  void Shut() override {
    if (!closed_) {
      Close();
    }
  }

  // A request in flight is answered with "Connection: close" (Send reads stopping_); an idle
  // keep-alive connection is closed with its loop.
  void Drain() override {}

  void Start() override {
    beast::error_code ec;
    socket_.set_option(Tcp::no_delay(true), ec);
    const Tcp::endpoint peer = socket_.remote_endpoint(ec);
    if (!ec) {
      peer_ =
          peer.address().is_v6() && peer.address().to_v6().is_v4_mapped()
              ? asio::ip::make_address_v4(asio::ip::v4_mapped, peer.address().to_v6()).to_string()
              : peer.address().to_string();
    }
    AwaitRequest();
  }

 private:
  // Cancels the socket's operation in flight when `timeout` passes first. The timer is lazy:
  // arming only moves the deadline, and a timer that wakes before it sleeps again, so a
  // request costs no timer operations (three per request otherwise, each a cancellation).
  // The timer never sleeps longer than the shortest timeout, so a new deadline (at least that
  // far off) is never earlier than its wake-up.
  void Arm(Micros timeout) {
    timed_out_ = false;
    deadline_ = std::chrono::steady_clock::now() + timeout;
    if (!timer_waiting_) {
      timer_waiting_ = true;
      AwaitDeadline();
    }
  }

  void AwaitDeadline() {
    timer_.expires_at(std::min(
        deadline_,
        std::chrono::steady_clock::now() + std::min(options_.idle_timeout, options_.read_timeout)));
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || self->closed_) {
        self->timer_waiting_ = false;  // The session is closing.
        return;
      }
      if (std::chrono::steady_clock::now() < self->deadline_) {
        self->AwaitDeadline();  // The deadline moved on while the timer slept.
        return;
      }
      self->timer_waiting_ = false;
      self->timed_out_ = true;
      // Cancel what is waiting now, and make every later read fail at once: a read that had
      // already completed when the timer fired would otherwise start another, with no timer
      // left to stop it. Writing the 400 still works.
      beast::error_code ignored;
      self->socket_.cancel(ignored);
      self->socket_.shutdown(Tcp::socket::shutdown_receive, ignored);
    });
  }

  void AwaitRequest() {
    if (buffer_.size() > 0) {
      ReadRequest();  // Pipelined: the next request has begun already.
      return;
    }
    Arm(options_.idle_timeout);
    socket_.async_read_some(
        buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
          self->buffer_.commit(n);
          if (ec) {
            self->Close();  // Idle timeout, or the client went away: nothing to answer.
            return;
          }
          self->ReadRequest();
        });
  }

  void ReadRequest() {
    BeginRequest();
    timed_out_ = false;  // Arm() clears it too, but a request parsed at once never arms here.
    parser_.emplace();
    parser_->body_limit(options_.max_body_bytes);
    parser_->header_limit(static_cast<uint32_t>(options_.max_header_bytes));
    // A small request usually comes whole in one read: parse what is here first, and answer at
    // once when it is all here, sparing Beast's asynchronous read its round trip through the
    // loop. What is missing is read as before, by the same parser.
    beast::error_code ec;
    while (!parser_->is_done() && buffer_.size() > 0) {
      const size_t used = parser_->put(buffer_.data(), ec);
      buffer_.consume(used);
      if (ec == http::error::need_more) {
        ec = {};
        break;
      }
      if (ec || used == 0) {
        break;
      }
    }
    if (ec || parser_->is_done()) {
      OnRead(ec);
      return;
    }
    Arm(options_.read_timeout);
    http::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  // A client that asked for "100 Continue" waits for it before it sends the body.
  void OnHeader(beast::error_code ec) {
    if (ec || parser_->is_done()) {
      OnRead(ec);
      return;
    }
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(socket_, asio::buffer(kContinue.data(), kContinue.size()),
                        [self = shared_from_this()](beast::error_code write_ec, size_t) {
                          if (write_ec) {
                            self->Close();
                            return;
                          }
                          self->ReadBody();
                        });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    http::async_read(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  // A drain (HttpServer::Stop) waits for every request from its first byte to its answer.
  void BeginRequest() {
    if (!counted_) {
      counted_ = true;
      in_flight_.fetch_add(1);
    }
  }
  void EndRequest() {
    if (counted_) {
      counted_ = false;
      in_flight_.fetch_sub(1);
    }
  }

  void OnRead(beast::error_code ec) {
    if (!timed_out_ && (ec == http::error::end_of_stream || ec == asio::error::eof ||
                        ec == asio::error::connection_reset)) {
      Close();
      return;
    }
    if (ec) {
      // The request cannot be answered normally; say why, then close.
      std::string message;
      if (timed_out_) {
        message =
            fmt::format("request not received within {} ms", options_.read_timeout.count() / 1000);
      } else if (ec == http::error::body_limit) {
        message = fmt::format("body larger than {} bytes", options_.max_body_bytes);
      } else if (ec == http::error::header_limit) {
        message = fmt::format("headers larger than {} bytes", options_.max_header_bytes);
      } else {
        message = fmt::format("malformed HTTP request: {}", ec.message());
      }
      api_.CountMalformed();
      Send(ErrorResponse(http::status::bad_request, message, 11, /*keep_alive=*/false));
      return;
    }
    // Read whole: the time left for the answer starts now (a decision may wait for Redis).
    Arm(options_.read_timeout);
    answered_ = false;
    try {
      api_.Handle(
          parser_->get(), peer_,
          [self = shared_from_this()](HttpHandler::Build build) {
            // The answer may come from the store's thread: build and write it on this loop.
            asio::dispatch(self->executor(), [self, build = std::move(build)]() mutable {
              self->Answer(std::move(build));
            });
          },
          &cancel_wait_);
    } catch (const std::exception& e) {
      Send(InternalError(e));
      return;
    }
    if (answered_) {
      cancel_wait_ = nullptr;  // Answered at once, inside Handle: nothing waits.
    } else if (cancel_wait_) {
      // An acquire, which may wait up to its max_wait: give it that long, and watch for the
      // client leaving meanwhile, which gives its place in line back.
      Arm(options_.read_timeout + kMaxAcquireWait);
      WatchForDeparture();
    }
  }

  // While a request waits (acquire), the connection is idle: readable only if the client
  // closed it (a read would return 0) or sent its next request early. The first cancels the
  // wait; the second ends the watch (the request is read after this answer).
  void WatchForDeparture() {
    socket_.async_wait(Tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      if (ec || !self->cancel_wait_) {
        return;  // Answered (the watch was cancelled), or closing.
      }
      char byte = 0;
      const ssize_t n = ::recv(self->socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        self->WatchForDeparture();
        return;
      }
      if (n <= 0) {
        std::exchange(self->cancel_wait_, nullptr)();
      }
    });
  }

  // Builds the answer to the request just read and sends it.
  void Answer(HttpHandler::Build build) {
    answered_ = true;
    if (cancel_wait_) {
      cancel_wait_ = nullptr;
      beast::error_code ignored;
      socket_.cancel(ignored);  // Ends the departure watch; nothing else is pending now.
    }
    HttpResponse response;
    try {
      response = std::move(build)();
    } catch (const std::exception& e) {
      response = InternalError(e);
    }
    Send(std::move(response));
  }

  // A bug, not an input error (the API reports those as statuses): answer 500 and keep serving
  // everyone else rather than end the process.
  HttpResponse InternalError(const std::exception& e) {
    spdlog::error("{} {} failed: {}", std::string_view(parser_->get().method_string()),
                  std::string_view(parser_->get().target()), e.what());
    return ErrorResponse(http::status::internal_server_error, "internal error", 11,
                         /*keep_alive=*/false);
  }

  void Send(HttpResponse response) {
    if (stopping_.load()) {
      response.keep_alive(false);
    }
    const bool keep_alive = response.keep_alive();
    wire_.clear();
    response.AppendTo(wire_);
    Arm(options_.read_timeout);
    asio::async_write(socket_, asio::buffer(wire_),
                      [self = shared_from_this(), keep_alive](beast::error_code ec, size_t) {
                        self->EndRequest();
                        if (ec || !keep_alive) {
                          self->Close();
                          return;
                        }
                        self->AwaitRequest();
                      });
  }

  void Close() {
    if (cancel_wait_) {
      std::exchange(cancel_wait_, nullptr)();  // Nobody is left to tell: end the wait now.
    }
    EndRequest();
    closed_ = true;
    beast::error_code ec;
    timer_.cancel();
    socket_.shutdown(Tcp::socket::shutdown_send, ec);
    socket_.close(ec);
  }

  Socket socket_;
  Timer timer_;
  std::chrono::steady_clock::time_point deadline_;
  bool timer_waiting_ = false;
  bool timed_out_ = false;
  bool closed_ = false;
  bool counted_ = false;  // In in_flight_.
  beast::flat_buffer buffer_;
  std::string wire_;  // The response being written; its capacity stays for the next.
  HttpHandler::CancelWait cancel_wait_;  // Set while a request waits (acquire).
  bool answered_ = false;                // The request just read has its answer.
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string peer_;
  HttpHandler& api_;
  const HttpServerOptions& options_;
  std::atomic<int64_t>& in_flight_;
  const std::atomic<bool>& stopping_;
  std::atomic<int64_t>& connections_;
};

}  // namespace sluice::server::internal
