#pragma once

// GrpcH2Session: HTTP/2 (Debian's libnghttp2) and gRPC's unary calls over it, as bytes in and
// bytes out, with no socket and no clock of its own: H2Connection (h2_connection.h) feeds it
// what its socket reads and writes what it gives, and the fuzz target (fuzz/h2_fuzz.cc) feeds
// it anything.
//
// Each call whose request is whole (END_STREAM) is checked (content-type, one uncompressed
// message within the bound) and handed to the GrpcUnaryService with a Done made by the
// Responder; the reply comes back through Answer, and is sent as HEADERS, one DATA and the
// trailers (or, for an error, one HEADERS frame: gRPC's trailers-only response).
//
// Not thread-safe: one thread at a time (the connection's loop).

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"

#include "server/grpc/h2_connection.h"

struct nghttp2_session;

namespace sluice::server {

using SteadyTime = std::chrono::steady_clock::time_point;

class GrpcH2Session {
 public:
  // Makes the Done that answers stream `id`: the connection's hands the reply back to this
  // session's Answer on its loop, whichever thread the service replies from.
  using Responder = absl::AnyInvocable<GrpcUnaryService::Done(int32_t id)>;

  // `service` and `options` must outlive the session.
  GrpcH2Session(GrpcUnaryService& service, const H2Options& options, Responder responder,
                SteadyTime now);
  ~GrpcH2Session();
  GrpcH2Session(const GrpcH2Session&) = delete;
  GrpcH2Session& operator=(const GrpcH2Session&) = delete;

  // False when nghttp2 could not make its session (out of memory): close at once.
  bool ok() const { return session_ != nullptr; }

  // Reads what the client sent: every frame handled, every call whose request is whole handed
  // to the service. False: the connection must end (not HTTP/2, a flood, a protocol error);
  // what Send gives then says why where HTTP/2 can (GOAWAY).
  bool Receive(std::span<const uint8_t> bytes, SteadyTime now);
  // Appends to `out` what is to be sent, until it holds at least `max` bytes or nothing is
  // left. False on a fatal error.
  bool Send(std::string& out, size_t max);

  // The reply of stream `id`, unless it was answered or reset meanwhile.
  void Answer(int32_t id, GrpcReply reply);
  // Takes no new calls (GOAWAY); those begun are answered.
  void Drain();

  // Time passes: calls past their grpc-timeout are answered DEADLINE_EXCEEDED; after
  // ping_interval of silence a PING is sent. False: the connection must end (no preface within
  // preface_timeout, no PING acknowledged within ping_timeout).
  bool Tick(SteadyTime now);
  // When Tick has something to do next (deadlines of calls already answered left out).
  SteadyTime NextTick();

  // Nothing is left to do: nghttp2 wants neither to read nor to write, or a drain has answered
  // every call. Checked once Send gives nothing.
  bool Finished() const;
  // Calls are open (read, not yet answered and sent).
  bool Busy() const { return !streams_.empty(); }

 private:
  // One call: its request as it comes in, then its reply as it goes out.
  struct Stream {
    std::string path;
    std::string content_type;
    std::string body;         // The DATA frames so far.
    size_t header_bytes = 0;  // As HTTP/2 counts a header list: name, value and 32 per field.
    std::optional<SteadyTime> deadline;
    bool refused = false;  // Answered before its request was whole (too large): rest ignored.
    bool dispatched = false;
    bool answered = false;
    std::string out;  // The framed response message, sent from `sent`.
    size_t sent = 0;
  };
  struct Callbacks;  // nghttp2's, in h2_session.cc.

  // When a stream's request must be whole (`whole`), or its call answered (its grpc-timeout).
  struct Deadline {
    SteadyTime at;
    int32_t stream = 0;
    bool whole = false;
    bool operator>(const Deadline& other) const { return at > other.at; }
  };

  bool Make();
  void Dispatch(int32_t id, Stream& stream);
  // Lets go of a stream's request bytes (counted in buffered_).
  void Forget(Stream& stream);

  GrpcUnaryService& service_;
  const H2Options& options_;
  Responder responder_;
  nghttp2_session* session_ = nullptr;
  absl::flat_hash_map<int32_t, Stream> streams_;
  // Deadlines of streams, earliest first; a stream gone or answered meanwhile is skipped.
  std::priority_queue<Deadline, std::vector<Deadline>, std::greater<>> deadlines_;
  size_t buffered_ = 0;      // Request bytes held, over all streams.
  int32_t goaway_last_ = 0;  // Draining: the last stream our GOAWAY serves.
  SteadyTime started_;
  SteadyTime last_read_;
  SteadyTime now_;  // Of the last Receive or Tick: when a grpc-timeout starts.
  bool preface_seen_ = false;
  bool draining_ = false;
  std::optional<SteadyTime> ping_sent_;  // A keep-alive PING awaiting its acknowledgement.
};

}  // namespace sluice::server
