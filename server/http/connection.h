#pragma once

// What HttpServer (server.h) runs on its loops: one accepted connection, whatever protocol it
// speaks. HTTP/1.1 (session.h, the JSON API) is one; gRPC over HTTP/2 (server/grpc/h2_*.h) is
// the other. HttpServer owns the listening, the choice of a loop, the budget of descriptors and
// the drain; a Connection owns its socket from its first byte to its close.

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/functional/any_invocable.h"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/steady_timer.hpp"

// The loops' socket types, for the connections' files (namespace net: not
// sluice::server::internal, which would hide sluice::internal from every file including this).
namespace sluice::server::net {

namespace asio = boost::asio;
using Tcp = asio::ip::tcp;
// A connection's socket and timers name their loop's executor type, not the polymorphic
// any_io_executor: every operation on them then skips a type-erased executor's copies and
// queries (7% of the instructions of a check).
using LoopExecutor = asio::io_context::executor_type;
using Socket = Tcp::socket::rebind_executor<LoopExecutor>::other;
using Timer = asio::steady_timer::rebind_executor<LoopExecutor>::other;

}  // namespace sluice::server::net

namespace sluice::server {

// What a connection shares with its server; all outlive it.
struct ConnectionShared {
  std::atomic<int64_t>& in_flight;    // Requests read and not yet answered, server-wide.
  const std::atomic<bool>& stopping;  // The server is draining: answer, then close.
  std::atomic<int64_t>& connections;  // Its loop's open connections: counted out at its end.
};

// One accepted connection. Every call comes on the connection's own loop (executor()), or
// once no thread runs the loops.
class Connection {
 public:
  virtual ~Connection() = default;

  virtual net::LoopExecutor executor() = 0;
  virtual void Start() = 0;
  // The server begins to drain: take no new requests (HTTP/2 says GOAWAY), answer those read.
  virtual void Drain() = 0;
  // Closes the connection at once.
  virtual void Shut() = 0;
};

// Makes the connection for a socket just accepted. Called on the accepting loop's thread; the
// connection is started on its own loop.
using ConnectionMaker =
    absl::AnyInvocable<std::shared_ptr<Connection>(net::Socket socket, ConnectionShared shared)>;

}  // namespace sluice::server
