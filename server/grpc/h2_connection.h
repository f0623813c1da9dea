#pragma once

// H2Connection: one client connection of the gRPC engine on sluiced's own loops
// (--grpc-engine h2). HttpServer (server/http/server.h) accepts the connections, spreads them
// over its loops, keeps descriptors spare and drains; H2ConnectionMaker makes one per
// connection, which runs a GrpcH2Session (h2_session.h: HTTP/2 by Debian's libnghttp2, gRPC's
// unary calls on it) over the socket, each call handed to a GrpcUnaryService.
//
// A pass of the loop reads what the socket holds, gives all of it to the session at once
// (every frame in it handled, every call whose request is whole dispatched) and then writes
// what the session has to send in one write: many calls on one connection cost one read and
// one write. Replies that come later, from the store's thread, are handed to the session on
// the loop and written together likewise.
//
// Bounds, each against an attack on HTTP/2 servers (docs/server.md, "gRPC engines"):
//   streams    SETTINGS_MAX_CONCURRENT_STREAMS; a stream opened past it is refused, as is one
//              opened past the last stream of our GOAWAY while draining.
//   resets     a client resetting streams faster than nghttp2's reset rate limit (rapid reset,
//              CVE-2023-44487) loses its connection (GOAWAY).
//   headers    a header list over max_header_bytes (counted as HTTP/2 counts one) resets its
//              stream; CONTINUATION frames past nghttp2's bound (CVE-2024-28182) end the
//              connection; HPACK's table is the default 4 KiB.
//   floods     SETTINGS and PING (anything that asks for an acknowledgement) beyond nghttp2's
//              bounds on queued acknowledgements end the connection.
//   messages   a request message over max_message_bytes is answered RESOURCE_EXHAUSTED as soon
//              as its prefix says so; nothing past it is kept. A connection's requests hold at
//              most 16 MiB together (past it, the stream that asks for more is refused), and a
//              request not whole within preface_timeout of its headers is reset.
//   silence    a connection that has not sent HTTP/2's preface within preface_timeout is
//              closed; one that answers no keep-alive PING within ping_timeout too.
//   sockets    the HTTP server's: accepting pauses before the process runs out of descriptors.
//   TLS        (h2_tls.h) the handshake within preface_timeout.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/any_invocable.h"

#include "server/grpc/grpc_wire.h"
#include "server/http/connection.h"
#include "sluice/clock.h"

namespace sluice::server {

// What the engine serves: unary gRPC methods by path.
class GrpcUnaryService {
 public:
  virtual ~GrpcUnaryService() = default;

  // Receives a call's reply, once, on any thread.
  using Done = absl::AnyInvocable<void(GrpcReply) &&>;
  // Answers a call to `path` ("/package.Service/Method") with the request message `request`
  // (valid only until Call returns) through `done`, at once or later; never blocks. An unknown
  // path is answered UNIMPLEMENTED.
  virtual void Call(std::string_view path, std::string_view request, Done done) = 0;
};

struct H2Options {
  uint32_t max_concurrent_streams = 100;  // As gRPC's servers commonly set it.
  size_t max_message_bytes = kMaxGrpcMessageBytes;
  size_t max_header_bytes = size_t{16} * 1024;
  Micros preface_timeout{10'000'000};
  // Keep-alive: a connection silent this long is sent a PING, and closed when its
  // acknowledgement is not in within ping_timeout (gRPC's server defaults: 2 h, 20 s).
  Micros ping_interval{int64_t{2} * 3600 * 1'000'000};
  Micros ping_timeout{20'000'000};
};

class H2Tls;

// Makes an H2Connection for each connection accepted: a ConnectionMaker for HttpServer; over
// TLS (h2_tls.h) when `tls` is given. `service`, `options` and `tls` must outlive the server.
ConnectionMaker H2ConnectionMaker(GrpcUnaryService& service, const H2Options& options,
                                  const H2Tls* tls = nullptr);

}  // namespace sluice::server
