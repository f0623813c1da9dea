#pragma once

// One connection of RedisStore's to one Redis server (over TCP, a unix socket or TLS: its
// RedisStream): handshake (AUTH, SELECT, SCRIPT LOAD), then pipelined script calls, their replies
// read back in order by hiredis's redisReader and handed to the store. A connection that fails
// closes, fails what it carried, and reconnects after a backoff that doubles up to
// options.backoff_max.
//
// Not thread-safe: a connection lives on its store's I/O thread (redis_store_impl.h), and
// every function here runs there.

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "boost/asio/steady_timer.hpp"
#include <hiredis/hiredis.h>

#include "src/redis/call.h"
#include "src/redis/redis_store_impl.h"
#include "src/redis/resp.h"
#include "src/redis/stream.h"

namespace sluice {

class RedisStore::Impl::Connection {
 public:
  // Both must outlive the connection: the store owns its nodes, and each node its connections.
  Connection(Impl& store, Node& node);
  ~Connection();

  bool ready() const { return state_ == State::kReady; }
  bool opening() const { return state_ == State::kOpening; }
  int batches() const { return batches_; }

  // The deadline of the oldest thing this connection waits for. A NOSCRIPT or ASK resend puts
  // an older batch behind newer ones, so look at them all (at most `pipeline`, and a few
  // commands of the store's own).
  std::optional<SteadyTime> deadline() const;

  // Opens a new stream to the node (resolves, connects, shakes hands over TLS), and starts
  // Redis's handshake.
  void Connect();
  // Whether a batch built `now` may go out on this connection, as far as Redis's clock goes:
  // yes on a reading younger than kRedisClockStale, or when Redis refuses TIME (the batch
  // then carries no `expires`); no while a TIME asked for a reading that old is on its way
  // (its answer dispatches again). Asks TIME again (once) when the reading is
  // kRedisClockReread old, or kRedisClockReread after Redis refused it.
  bool ClockReady(SteadyTime now);
  // Sends a batch; after ASKING when an ASK redirected it here.
  void Send(Pending batch, bool asking);
  // `deadline` on Redis's clock (microseconds of its TIME), for BatchCommand's `expires`: a
  // little early, never late (what TIME showed, less its round trip, plus the steady time
  // since); nullopt without a reading younger than kRedisClockStale at `now` (before the
  // handshake has read it, or once Redis refuses TIME).
  std::optional<int64_t> OnRedisClock(SteadyTime now, SteadyTime deadline) const;
  // The `expires` of a batch with `deadline` sent on this connection `now`: OnRedisClock of
  // the earlier of `deadline` and deadline(). When the oldest thing in flight times out, Fail
  // answers every call on the connection at once, some before their own deadline; Redis,
  // awake again, reads what the closed socket had delivered, and must refuse those too.
  // (An ASK resend sent after newer batches, with an older deadline, is the exception: the
  // batches before it keep their own deadline.)
  std::optional<int64_t> Expires(SteadyTime now, SteadyTime deadline) const;
  // Asks for the cluster's slot map; the store hears the answer (OnSlots).
  void AskSlots();
  // Closes the socket and fails everything in flight with `status`; reconnects after the
  // backoff unless the store is stopping. The server is lost (src/core/health_log.h) for that
  // reason; `refusing`: it answers, but cannot decide.
  void Fail(const absl::Status& status, bool refusing = false);
  // The first half of Fail, and all of it when the store shuts down: closes the socket and
  // fails everything in flight with `status`.
  void Close(const absl::Status& status);
  // Sentinel: the node moved to another server. Closes (failing what is in flight with
  // `status`) and connects to the node's new endpoint at once, the backoff forgotten.
  void Restart(const absl::Status& status);

 private:
  enum class State { kClosed, kOpening, kReady };

  void OnConnected();
  // A command of the store's own (not a batch), answered in order with the rest.
  void Control(Pending::Kind kind, std::string command, SteadyTime deadline);
  void Flush();
  // What to add to the message of a failure as the connection opens, if anything.
  std::string Hint() const;
  void Read();
  // TIME's reply, arrived at `now`: a new reading, or a refusal (said once per node).
  void OnTime(const redisReply& reply, std::string_view text, SteadyTime now);
  // A reply, to the oldest command in flight.
  void OnReply(internal::ReplyPtr reply);
  // A reply to a batch: its decisions, a NOSCRIPT, a redirection or a failure of the batch.
  // `error` and `text` are the reply's: whether it is an error, and its text.
  void OnBatchReply(Pending p, const redisReply& reply, bool error, std::string_view text);
  // Redis answered `text`, an error that says it cannot decide now (errors.h): the server
  // cannot decide, and when `not_master` the master must be found again.
  void Refused(std::string_view text, bool not_master);
  std::string Name() const;  // The server's, for messages.

  Impl& store_;
  Node& node_;
  std::shared_ptr<internal::RedisStream> stream_;  // A new one for each Connect.
  boost::asio::steady_timer retry_;
  std::chrono::milliseconds backoff_;
  // The last failure was a server that is not a master (READONLY): a handshake, which such a
  // server completes, does not end the backoff; a call it decides does.
  bool not_master_ = false;
  // Redis's clock (call.h), read at each handshake and again every kRedisClockReread while
  // calls are sent: the two clocks drift apart (tens of parts per million, seconds a day), and
  // Redis's own may be stepped.
  std::optional<internal::RedisClock> redis_clock_;
  bool clock_asked_ = false;  // A TIME after the handshake's is in flight.
  // When Redis last refused TIME (an ACL, a reply that is not TIME's), if it has not answered
  // it since: asked again kRedisClockReread later, not before every batch.
  std::optional<SteadyTime> time_refused_at_;
  State state_ = State::kClosed;
  uint64_t generation_ = 0;
  SteadyTime open_deadline_;
  std::deque<Pending> pending_;
  int batches_ = 0;
  internal::WriteQueue writes_;  // Commands not yet written, and being written.
  std::array<char, 16384> in_;
  redisReader* reader_ = nullptr;
};

}  // namespace sluice
