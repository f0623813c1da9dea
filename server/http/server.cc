#include "server/http/server.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "boost/asio/dispatch.hpp"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/strand.hpp"
#include "boost/asio/write.hpp"
#include "boost/beast/core.hpp"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

#include "server/http/answers.h"
#include "sluice/duration.h"

namespace sluice::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Tcp = asio::ip::tcp;
// A connection's socket and timer name their loop's executor type, not the polymorphic
// any_io_executor: every operation on them then skips a type-erased executor's copies and
// queries (7% of the instructions of a check).
using LoopExecutor = asio::io_context::executor_type;
using Socket = Tcp::socket::rebind_executor<LoopExecutor>::other;
using Timer = asio::steady_timer::rebind_executor<LoopExecutor>::other;

// One client connection: wait for a request's first bytes (idle timeout), read the rest of it
// (read timeout), answer, and again while the client keeps the connection alive. The timeouts
// are a timer of the session's own that cancels the read rather than closing the socket, so a
// request that timed out can still be told why.
class Session : public std::enable_shared_from_this<Session> {
 public:
  // `connections` counts the open connections of the session's loop: the caller has counted
  // this one in, and the session counts it out when it ends.
  Session(Socket socket, HttpHandler& api, const HttpServerOptions& options,
          std::atomic<int64_t>& in_flight, const std::atomic<bool>& stopping,
          std::atomic<int64_t>& connections)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        api_(api),
        options_(options),
        in_flight_(in_flight),
        stopping_(stopping),
        connections_(connections) {}
  ~Session() { connections_.fetch_sub(1, std::memory_order_relaxed); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  LoopExecutor executor() { return socket_.get_executor(); }

  // Closes the connection at once. Only from the session's loop, or once no thread runs it.
  void Shut() {
    if (!closed_) {
      Close();
    }
  }

  void Start() {
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

// The pause before accepting again after a failed accept, and between looks for free
// descriptors while they are short.
constexpr std::chrono::milliseconds kAcceptPause{50};
// A shortage of descriptors is over once connections have been accepted this long without a
// pause. Not at the first free descriptor: a server held at its limit by waiting clients (each
// place freed, by a client or the idle timeout, taken at once from the backlog) resumes and
// pauses again at every freed place, and that is one episode, said once.
constexpr std::chrono::seconds kShortageOver{10};

// The number the next descriptor opened would get, the lowest free (found by duplicating `fd`);
// INT_MAX when none is free.
int LowestFreeDescriptor(int fd) {
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) {
    return INT_MAX;
  }
  ::close(copy);
  return copy;
}

// The same connection, its descriptor moved from its loop's reactor to `context`'s.
Socket MoveTo(Socket socket, asio::io_context& context, beast::error_code& ec) {
  Socket moved(context);
  const Tcp::endpoint local = socket.local_endpoint(ec);
  if (ec) {
    return moved;
  }
  const int fd = socket.release(ec);
  if (ec) {
    return moved;
  }
  if (moved.assign(local.protocol(), fd, ec); ec) {
    ::close(fd);
  }
  return moved;
}

}  // namespace

struct HttpServer::Loop {
  // Its open connections (sessions alive), read by the first loop when it accepts. First, so
  // that it outlives the sessions the context still holds when it is destroyed.
  std::atomic<int64_t> connections{0};
  asio::io_context context{1};
  // Keeps run() going while the loop has no connection yet.
  asio::executor_work_guard<asio::io_context::executor_type> work{context.get_executor()};
  Tcp::acceptor acceptor{context};
  // First loop only: a pause after a failed accept, or while descriptors are short; and the end
  // of a shortage (kShortageOver).
  asio::steady_timer accept_retry{context};
  asio::steady_timer shortage_over{context};
  std::thread thread;
  // The loop's connections, for Stop to close; touched only by the loop's thread (and by Stop
  // once that thread has ended). Expired entries are dropped as the list doubles.
  std::vector<std::weak_ptr<Session>> sessions;
  size_t prune_at = 64;

  void Adopt(const std::shared_ptr<Session>& session) {
    if (sessions.size() >= prune_at) {
      std::erase_if(sessions, [](const std::weak_ptr<Session>& s) { return s.expired(); });
      prune_at = std::max<size_t>(64, 2 * sessions.size());
    }
    sessions.push_back(session);
  }
};

HttpServer::HttpServer(HttpHandler& api, HttpServerOptions options)
    : api_(api), options_(std::move(options)) {}

HttpServer::~HttpServer() {
  try {
    Stop(Micros{0});
  } catch (...) {
    std::abort();  // A loop thread that cannot be joined: nothing sane is left to do.
  }
}

absl::Status HttpServer::Start() {
  beast::error_code ec;
  const asio::ip::address address = asio::ip::make_address(options_.host, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        fmt::format("--http: '{}' is not an IP address", options_.host));
  }
  for (int i = 0; i < std::max(1, options_.threads); ++i) {
    loops_.push_back(std::make_unique<Loop>());
  }
  // One listening socket, on the first loop; each accepted connection is handed to the loop of
  // the core its packets came in on (SO_INCOMING_CPU), within kLoopSlack of the loop with the
  // fewest, and lives there (Destination). (SO_REUSEPORT, a socket per loop, would also let a
  // second sluiced bind the same port and silently split the traffic and the counts.)
  Tcp::acceptor& acceptor = loops_.front()->acceptor;
  const Tcp::endpoint endpoint(address, options_.port);
  auto failed = [&](std::string_view step) {
    loops_.clear();
    return absl::UnavailableError(fmt::format("cannot {} HTTP on {}:{}: {}", step, options_.host,
                                              options_.port, ec.message()));
  };
  if (acceptor.open(endpoint.protocol(), ec); ec) {
    return failed("open");
  }
  acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (acceptor.bind(endpoint, ec); ec) {
    return failed("bind");
  }
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec); ec) {
    return failed("listen on");
  }
  port_ = acceptor.local_endpoint().port();
  // Linux gives a new descriptor the lowest free number, so a connection on descriptor n means
  // that the n below it are all taken: comparing that number with a ceiling costs an accept
  // nothing, and counts the descriptors of every part of the process, not only this server's.
  if (rlimit limit{}; ::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const int64_t soft = static_cast<int64_t>(std::min<rlim_t>(limit.rlim_cur, INT_MAX));
    const int64_t spare = std::min<int64_t>(kSpareDescriptors, soft / 4);
    descriptor_limit_ = soft;
    descriptor_ceiling_ = static_cast<int>(soft - spare);
  }
  Accept();
  for (auto& loop : loops_) {
    loop->thread = std::thread([raw = loop.get()] { raw->context.run(); });
  }
  return absl::OkStatus();
}

std::optional<int> IncomingCpu(int fd) {
  int cpu = -1;
  socklen_t size = sizeof(cpu);
  if (::getsockopt(fd, SOL_SOCKET, SO_INCOMING_CPU, &cpu, &size) != 0 || cpu < 0) {
    return std::nullopt;
  }
  return cpu;
}

size_t ChooseLoop(std::optional<int> cpu, size_t in_turn, std::span<const int64_t> connections,
                  int64_t slack) {
  const size_t preferred =
      (cpu.has_value() ? static_cast<size_t>(*cpu) : in_turn) % connections.size();
  const size_t fewest = static_cast<size_t>(
      std::min_element(connections.begin(), connections.end()) - connections.begin());
  return connections[preferred] > connections[fewest] + slack ? fewest : preferred;
}

// On loopback, and with receive flow steering, a connection's packets come in on the core
// its client sent from: the loop numbered as that core (modulo the loops) then serves a client
// thread's connections on one loop, which the scheduler keeps on the client's core. Requests
// then cross no cores, each crossing a wait for another core that, with the cores busy, can
// last up to a scheduler tick (docs/server.md, "The two-loop tail"). The slack keeps clients
// that all send from one core from putting everything on one loop. The choice is ChooseLoop,
// pure, so that its cases are tested without steering packets to cores.
HttpServer::Loop& HttpServer::Destination(int fd) {
  const std::optional<int> cpu = IncomingCpu(fd);
  const size_t in_turn = cpu.has_value() ? 0 : next_loop_++;  // Not known: in turn.
  absl::InlinedVector<int64_t, 8> connections;
  for (const auto& loop : loops_) {
    connections.push_back(loop->connections.load(std::memory_order_relaxed));
  }
  return *loops_[ChooseLoop(cpu, in_turn, connections, kLoopSlack)];
}

std::vector<int64_t> HttpServer::connections_per_loop() const {
  std::vector<int64_t> counts;
  for (const auto& loop : loops_) {
    counts.push_back(loop->connections.load(std::memory_order_relaxed));
  }
  return counts;
}

void HttpServer::Accept() {
  Loop& first = *loops_.front();
  first.acceptor.async_accept(first.context, [this, &first](beast::error_code ec, Socket socket) {
    if (ec == asio::error::operation_aborted || !first.acceptor.is_open()) {
      return;
    }
    if (ec) {
      AcceptFailed(ec);
      return;
    }
    const int fd = socket.native_handle();
    Loop& next = Destination(fd);
    if (&next != &first) {
      beast::error_code move_ec;
      socket = MoveTo(std::move(socket), next.context, move_ec);
      if (move_ec) {
        spdlog::warn("handing a connection to another event loop failed: {}; closed it",
                     move_ec.message());
        Accept();
        return;
      }
    }
    next.connections.fetch_add(1, std::memory_order_relaxed);
    auto session = std::make_shared<Session>(std::move(socket), api_, options_, in_flight_,
                                             stopping_, next.connections);
    asio::post(session->executor(), [session, &next] {
      next.Adopt(session);
      session->Start();
    });
    if (fd >= descriptor_ceiling_) {
      PauseAccepting(fmt::format("a new connection took descriptor {}", fd));
      return;
    }
    Accept();
  });
}

void HttpServer::AcceptFailed(const beast::error_code& ec) {
  // Told apart by category and value, with no virtual call on the category (ec.message(), or a
  // comparison with an error_condition): while no descriptor is free, UBSan's vptr check of a
  // virtual call it has not seen before cannot open the pipe it reads the vtable through, and
  // reports a valid object's vptr as invalid (issue 32).
  if (ec.category() == asio::error::get_system_category() &&
      (ec.value() == EMFILE || ec.value() == ENFILE)) {
    PauseAccepting(ec.value() == EMFILE ? "no descriptor was left to accept a connection (EMFILE)"
                                        : "the system's table of open files is full (ENFILE)");
    return;
  }
  spdlog::warn("accepting a connection failed: {}; retrying in {} ms", ec.message(),
               kAcceptPause.count());
  Loop& first = *loops_.front();
  first.accept_retry.expires_after(kAcceptPause);
  first.accept_retry.async_wait([this](beast::error_code wait_ec) {
    if (!wait_ec) {
      Accept();
    }
  });
}

void HttpServer::PauseAccepting(std::string_view why) {
  Loop& first = *loops_.front();
  first.shortage_over.cancel();  // Paused again: the shortage goes on.
  ++short_pauses_;
  if (!short_since_) {
    short_since_ = std::chrono::steady_clock::now();
    int64_t open = 0;
    for (const auto& loop : loops_) {
      open += loop->connections.load(std::memory_order_relaxed);
    }
    spdlog::warn(
        "HTTP on {}:{}: {} (the descriptor limit, RLIMIT_NOFILE, is {}; {} connection(s) "
        "open): accepting paused while fewer than {} descriptors are free; new connections wait "
        "in the listen backlog",
        options_.host, port_, why, descriptor_limit_, open,
        descriptor_limit_ - descriptor_ceiling_);
  }
  LookForDescriptors();
}

void HttpServer::LookForDescriptors() {
  Loop& first = *loops_.front();
  first.accept_retry.expires_after(kAcceptPause);
  first.accept_retry.async_wait([this, &first](beast::error_code ec) {
    if (ec || !first.acceptor.is_open()) {
      return;
    }
    if (LowestFreeDescriptor(first.acceptor.native_handle()) >= descriptor_ceiling_) {
      LookForDescriptors();
      return;
    }
    short_resumed_ = std::chrono::steady_clock::now();
    Accept();
    first.shortage_over.expires_after(kShortageOver);
    first.shortage_over.async_wait([this](beast::error_code over_ec) {
      if (!over_ec) {
        EndShortage();
      }
    });
  });
}

void HttpServer::EndShortage() {
  if (!short_since_) {
    return;
  }
  const std::chrono::duration<double> lasted = short_resumed_ - *short_since_;
  spdlog::info(
      "HTTP on {}:{}: accepting connections again: the shortage of descriptors (RLIMIT_NOFILE "
      "{}) lasted {:.1f} s, {} pause(s)",
      options_.host, port_, descriptor_limit_, lasted.count(), short_pauses_);
  short_since_.reset();
  short_pauses_ = 0;
}

void HttpServer::Stop(Micros drain) {
  if (loops_.empty() || stopped_) {
    return;
  }
  stopping_.store(true);
  asio::post(loops_.front()->context, [this] {
    beast::error_code ec;
    loops_.front()->acceptor.close(ec);
    loops_.front()->accept_retry.cancel();
    loops_.front()->shortage_over.cancel();
  });
  // Requests in flight finish; idle keep-alive connections are closed with their loop.
  const auto deadline = std::chrono::steady_clock::now() + drain;
  while (in_flight_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (const int64_t left = in_flight_.load(); left > 0) {
    spdlog::warn("the drain ({}) ended with {} HTTP request(s) in flight: closed unanswered",
                 FormatDuration(drain), left);
  }
  for (auto& loop : loops_) {
    loop->context.stop();
  }
  for (auto& loop : loops_) {
    if (loop->thread.joinable()) {
      loop->thread.join();
    }
  }
  // No thread runs the loops now: close the listening socket and every connection here. The
  // loops' contexts stay until the server is destroyed, so that an answer a store still owes
  // (past the drain) is handed to a stopped loop, which drops it, rather than to a freed one.
  for (auto& loop : loops_) {
    beast::error_code ignored;
    loop->acceptor.close(ignored);
    for (const std::weak_ptr<Session>& weak : loop->sessions) {
      if (std::shared_ptr<Session> session = weak.lock()) {
        session->Shut();
      }
    }
    loop->sessions.clear();
  }
  stopped_ = true;
}

}  // namespace sluice::server
