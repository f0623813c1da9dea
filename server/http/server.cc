#include "server/http/server.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
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

#include "server/http/session.h"
#include "sluice/duration.h"

namespace sluice::server {
namespace {

using internal::Session;
using net::LoopExecutor;
using net::Socket;
using net::Tcp;
namespace asio = boost::asio;
namespace beast = boost::beast;

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
  std::vector<std::weak_ptr<Connection>> sessions;
  size_t prune_at = 64;

  void Adopt(const std::shared_ptr<Connection>& session) {
    if (sessions.size() >= prune_at) {
      std::erase_if(sessions, [](const std::weak_ptr<Connection>& s) { return s.expired(); });
      prune_at = std::max<size_t>(64, 2 * sessions.size());
    }
    sessions.push_back(session);
  }
};

HttpServer::HttpServer(HttpHandler& api, HttpServerOptions options) : options_(std::move(options)) {
  make_ = [&api, this](Socket socket, ConnectionShared shared) {
    return std::make_shared<Session>(std::move(socket), api, options_, shared);
  };
}

HttpServer::HttpServer(ConnectionMaker make, HttpServerOptions options)
    : make_(std::move(make)), options_(std::move(options)) {}

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
    return absl::UnavailableError(fmt::format("cannot {} {} on {}:{}: {}", step, options_.protocol,
                                              options_.host, options_.port, ec.message()));
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
    std::shared_ptr<Connection> session =
        make_(std::move(socket),
              {.in_flight = in_flight_, .stopping = stopping_, .connections = next.connections});
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
        "{} on {}:{}: {} (the descriptor limit, RLIMIT_NOFILE, is {}; {} connection(s) "
        "open): accepting paused while fewer than {} descriptors are free; new connections wait "
        "in the listen backlog",
        options_.protocol, options_.host, port_, why, descriptor_limit_, open,
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
      "{} on {}:{}: accepting connections again: the shortage of descriptors (RLIMIT_NOFILE "
      "{}) lasted {:.1f} s, {} pause(s)",
      options_.protocol, options_.host, port_, descriptor_limit_, lasted.count(), short_pauses_);
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
  // Each connection told on its own loop (HTTP/2: GOAWAY, whose write then counts in
  // in_flight_); the drain below begins once every loop has told its own.
  std::atomic<size_t> told{0};
  for (auto& loop : loops_) {
    asio::post(loop->context, [raw = loop.get(), &told] {
      for (const std::weak_ptr<Connection>& weak : raw->sessions) {
        if (std::shared_ptr<Connection> connection = weak.lock()) {
          connection->Drain();
        }
      }
      told.fetch_add(1);
    });
  }
  // Requests in flight finish; idle keep-alive connections are closed with their loop.
  const auto deadline = std::chrono::steady_clock::now() + drain;
  while (told.load() < loops_.size() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  while (in_flight_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (const int64_t left = in_flight_.load(); left > 0) {
    spdlog::warn("the drain ({}) ended with {} {} request(s) in flight: closed unanswered",
                 FormatDuration(drain), left, options_.protocol);
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
    for (const std::weak_ptr<Connection>& weak : loop->sessions) {
      if (std::shared_ptr<Connection> session = weak.lock()) {
        session->Shut();
      }
    }
    loop->sessions.clear();
  }
  stopped_ = true;
}

}  // namespace sluice::server
