#include "server/http_server.h"

#include <chrono>
#include <utility>

#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/strand.hpp"
#include "boost/beast/core.hpp"
#include "fmt/format.h"

namespace sluice::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using ReusePort = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

// One client connection: wait for a request's first bytes (idle timeout), read the rest of it
// (read timeout), answer, and again while the client keeps the connection alive.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpApi& api, const HttpServerOptions& options,
          std::atomic<int64_t>& in_flight, const std::atomic<bool>& stopping)
      : stream_(std::move(socket)),
        api_(api),
        options_(options),
        in_flight_(in_flight),
        stopping_(stopping) {}

  void Start() {
    beast::error_code ec;
    stream_.socket().set_option(tcp::no_delay(true), ec);
    const tcp::endpoint peer = stream_.socket().remote_endpoint(ec);
    if (!ec) {
      peer_ = peer.address().is_v6() && peer.address().to_v6().is_v4_mapped()
                  ? asio::ip::make_address_v4(asio::ip::v4_mapped, peer.address().to_v6())
                        .to_string()
                  : peer.address().to_string();
    }
    AwaitRequest();
  }

 private:
  void AwaitRequest() {
    if (buffer_.size() > 0) {
      ReadRequest();  // Pipelined: the next request has begun already.
      return;
    }
    stream_.expires_after(options_.idle_timeout);
    stream_.async_read_some(
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
    parser_.emplace();
    parser_->body_limit(options_.max_body_bytes);
    parser_->header_limit(static_cast<uint32_t>(options_.max_header_bytes));
    stream_.expires_after(options_.read_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->OnRead(ec);
                     });
  }

  void OnRead(beast::error_code ec) {
    if (ec == http::error::end_of_stream || ec == asio::error::eof ||
        ec == asio::error::connection_reset) {
      Close();
      return;
    }
    if (ec) {
      // The request cannot be answered normally; say why, then close.
      std::string message;
      if (ec == beast::error::timeout) {
        message = fmt::format("request not received within {} ms",
                              options_.read_timeout.count() / 1000);
      } else if (ec == http::error::body_limit) {
        message = fmt::format("body larger than {} bytes", options_.max_body_bytes);
      } else if (ec == http::error::header_limit) {
        message = fmt::format("headers larger than {} bytes", options_.max_header_bytes);
      } else {
        message = fmt::format("malformed HTTP request: {}", ec.message());
      }
      Send(ErrorResponse(http::status::bad_request, message, 11, /*keep_alive=*/false));
      return;
    }
    in_flight_.fetch_add(1);
    HttpResponse response = api_.Handle(parser_->get(), peer_);
    if (stopping_.load()) {
      response.keep_alive(false);
    }
    in_flight_.fetch_sub(1);
    Send(std::move(response));
  }

  void Send(HttpResponse response) {
    in_flight_.fetch_add(1);  // Until written: a drain waits for it.
    auto owned = std::make_shared<HttpResponse>(std::move(response));
    stream_.expires_after(options_.read_timeout);
    http::async_write(stream_, *owned,
                      [self = shared_from_this(), owned](beast::error_code ec, size_t) {
                        self->in_flight_.fetch_sub(1);
                        if (ec || !owned->keep_alive()) {
                          self->Close();
                          return;
                        }
                        self->AwaitRequest();
                      });
  }

  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string peer_;
  HttpApi& api_;
  const HttpServerOptions& options_;
  std::atomic<int64_t>& in_flight_;
  const std::atomic<bool>& stopping_;
};

}  // namespace

struct HttpServer::Loop {
  asio::io_context context{1};
  tcp::acceptor acceptor{context};
  std::thread thread;
};

HttpServer::HttpServer(HttpApi& api, HttpServerOptions options)
    : api_(api), options_(std::move(options)) {}

HttpServer::~HttpServer() { Stop(Micros{0}); }

absl::Status HttpServer::Start() {
  beast::error_code ec;
  const asio::ip::address address = asio::ip::make_address(options_.host, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        fmt::format("--http: '{}' is not an IP address", options_.host));
  }
  port_ = options_.port;
  for (int i = 0; i < std::max(1, options_.threads); ++i) {
    auto loop = std::make_unique<Loop>();
    const tcp::endpoint endpoint(address, port_);
    auto failed = [&](std::string_view step) {
      return absl::UnavailableError(fmt::format("cannot {} HTTP on {}:{}: {}", step,
                                                options_.host, port_, ec.message()));
    };
    if (loop->acceptor.open(endpoint.protocol(), ec); ec) {
      return failed("open");
    }
    loop->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    loop->acceptor.set_option(ReusePort(true), ec);
    if (loop->acceptor.bind(endpoint, ec); ec) {
      return failed("bind");
    }
    if (loop->acceptor.listen(asio::socket_base::max_listen_connections, ec); ec) {
      return failed("listen on");
    }
    port_ = loop->acceptor.local_endpoint().port();
    loops_.push_back(std::move(loop));
  }
  for (auto& loop : loops_) {
    Loop* const raw = loop.get();
    auto accept = [this, raw](auto& self) -> void {
      raw->acceptor.async_accept([this, raw, self](beast::error_code ec, tcp::socket socket) {
        if (ec == asio::error::operation_aborted || !raw->acceptor.is_open()) {
          return;
        }
        if (!ec) {
          std::make_shared<Session>(std::move(socket), api_, options_, in_flight_, stopping_)
              ->Start();
        }
        self(self);
      });
    };
    accept(accept);
    raw->thread = std::thread([raw] { raw->context.run(); });
  }
  return absl::OkStatus();
}

void HttpServer::Stop(Micros drain) {
  if (loops_.empty()) {
    return;
  }
  stopping_.store(true);
  for (auto& loop : loops_) {
    asio::post(loop->context, [raw = loop.get()] {
      beast::error_code ec;
      raw->acceptor.close(ec);
    });
  }
  // Requests in flight finish; idle keep-alive connections are closed with their loop.
  const auto deadline = std::chrono::steady_clock::now() + drain;
  while (in_flight_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& loop : loops_) {
    loop->context.stop();
  }
  for (auto& loop : loops_) {
    if (loop->thread.joinable()) {
      loop->thread.join();
    }
  }
  loops_.clear();
}

}  // namespace sluice::server
