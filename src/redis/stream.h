#pragma once

// The byte stream under one connection to Redis, however the server is reached: TCP, a unix
// socket (unix://), or TLS over TCP (rediss://, through asio::ssl and OpenSSL: Debian's
// hiredis 0.14 has no TLS of its own, and hiredis only reads replies here). Connect resolves,
// connects and, over TLS, shakes hands and verifies the server; ReadSome and Write then move
// bytes, whichever the transport.
//
// A stream is held by a shared_ptr, and each operation in flight holds it too: a connection
// that fails drops its stream and opens a new one later, while what the old one started
// completes (operation_aborted) with the stream still there (over TLS, the completion reads
// the stream's state).
//
// Not thread-safe: streams live on their store's I/O thread.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "boost/asio/buffer.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/local/stream_protocol.hpp"
#include "boost/asio/ssl/context.hpp"
#include "boost/asio/ssl/error.hpp"
#include "boost/asio/ssl/stream.hpp"
#include "boost/asio/write.hpp"

#include "sluice/redis_store.h"

namespace sluice::internal {

// The TLS settings every rediss:// connection of a store shares: the CAs, the client's
// certificate. Built by RedisStore::Create on the caller's thread, so that the files are read
// there and not on the I/O thread. InvalidArgument naming a file that is wrong
// (src/tls/pem_files.h), or TLS files given for a URL that is not rediss://.
absl::StatusOr<std::unique_ptr<boost::asio::ssl::context>> RedisTlsContext(
    const RedisTlsOptions& options);

class RedisStream final : public std::enable_shared_from_this<RedisStream> {
 public:
  // A stream to `endpoint`: over TLS with `tls` (which must outlive it), else plain TCP or the
  // endpoint's unix socket.
  RedisStream(boost::asio::io_context& io, const RedisEndpoint& endpoint,
              boost::asio::ssl::context* tls, bool verify_hostname);

  // Resolves the host, connects and, over TLS, shakes hands; `done` hears OK, or Unavailable
  // naming the endpoint and the step that failed.
  void Connect(absl::AnyInvocable<void(absl::Status)> done);

  // asio's async_read_some and async_write on whichever socket this is. A peer that closes a
  // TLS stream without TLS's own goodbye (as Redis does when it stops) reads as eof.
  template <typename Handler>
  void ReadSome(boost::asio::mutable_buffer buffer, Handler handler);
  template <typename Handler>
  void Write(boost::asio::const_buffer buffer, Handler handler);

  // Closes the socket (and stops a resolution): what is in flight completes with
  // operation_aborted.
  void Close();

 private:
  using Tcp = boost::asio::ip::tcp;
  using Unix = boost::asio::local::stream_protocol;
  using Tls = boost::asio::ssl::stream<Tcp::socket>;
  using Socket = std::variant<Tcp::socket, Unix::socket, Tls>;

  static Socket MakeSocket(boost::asio::io_context& io, const RedisEndpoint& endpoint,
                           boost::asio::ssl::context* tls);
  Tcp::socket& TcpSocket();  // The TCP socket, under TLS or not.
  void Handshake(absl::AnyInvocable<void(absl::Status)> done);

  const RedisEndpoint endpoint_;
  const bool verify_hostname_;
  Socket socket_;
  Tcp::resolver resolver_;
};

// Bytes for one RedisStream, written a batch at a time: what is queued while a write is under
// way goes out with the next. Its owner (a connection, the sentinel client) closes streams and
// opens new ones; `current`, asked as each write completes, says whether the stream written to
// is still the owner's, and when it is not the queue is left alone (the owner has cleared it).
// I/O thread only.
class WriteQueue {
 public:
  void Append(std::string_view bytes) { out_ += bytes; }
  // Drops what is queued and what was being written: the stream is closed.
  void Clear() {
    out_.clear();
    writing_.clear();
    writing_now_ = false;
  }
  // Writes what is queued on `stream` unless a write is under way, then what was queued
  // meanwhile. `current()` -> bool as above; `failed(ec)` hears a write that failed.
  template <typename Current, typename Failed>
  void Flush(RedisStream& stream, Current current, Failed failed);

 private:
  std::string out_;      // Not yet written.
  std::string writing_;  // Being written.
  bool writing_now_ = false;
};

template <typename Handler>
void RedisStream::ReadSome(boost::asio::mutable_buffer buffer, Handler handler) {
  std::visit(
      [&](auto& socket) {
        socket.async_read_some(buffer, [self = shared_from_this(), h = std::move(handler)](
                                           boost::system::error_code ec, size_t n) mutable {
          if (ec == boost::asio::ssl::error::stream_truncated) {
            ec = boost::asio::error::eof;
          }
          h(ec, n);
        });
      },
      socket_);
}

template <typename Handler>
void RedisStream::Write(boost::asio::const_buffer buffer, Handler handler) {
  std::visit(
      [&](auto& socket) {
        boost::asio::async_write(socket, buffer,
                                 [self = shared_from_this(), h = std::move(handler)](
                                     boost::system::error_code ec, size_t n) mutable { h(ec, n); });
      },
      socket_);
}

template <typename Current, typename Failed>
void WriteQueue::Flush(RedisStream& stream, Current current, Failed failed) {
  if (writing_now_ || out_.empty()) {
    return;
  }
  writing_now_ = true;
  writing_.swap(out_);
  stream.Write(boost::asio::buffer(writing_),
               [this, &stream, current, failed](boost::system::error_code ec, size_t) {
                 if (!current()) {
                   return;
                 }
                 writing_now_ = false;
                 writing_.clear();
                 if (ec) {
                   failed(ec);
                   return;
                 }
                 Flush(stream, current, failed);
               });
}

}  // namespace sluice::internal
