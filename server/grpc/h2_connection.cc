#include "server/grpc/h2_connection.h"

#include <array>
#include <chrono>
#include <optional>
#include <type_traits>
#include <utility>

#include "boost/asio/dispatch.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/ssl/stream.hpp"
#include "boost/asio/write.hpp"
#include "spdlog/spdlog.h"

#include "server/grpc/h2_session.h"
#include "server/grpc/h2_tls.h"

namespace sluice::server {
namespace {

using net::Socket;
namespace asio = boost::asio;

// One write carries at most about this much of what the session has to send; the rest goes in
// the next.
constexpr size_t kWriteChunk = size_t{64} * 1024;

SteadyTime Now() { return std::chrono::steady_clock::now(); }

using TlsStream = asio::ssl::stream<Socket>;

// The stream, the timer and the writes around a GrpcH2Session (h2_session.h). `Stream` is the
// socket (h2c) or a TLS stream over it.
template <typename Stream>
class H2Connection final : public Connection,
                           public std::enable_shared_from_this<H2Connection<Stream>> {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

  // Plaintext.
  H2Connection(Socket socket, GrpcUnaryService& service, const H2Options& options,
               ConnectionShared shared) requires(!kTls)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        service_(service),
        options_(options),
        shared_(shared) {}

  // TLS with `context` (H2Tls::context), and `tls` to admit the client after its handshake.
  H2Connection(Socket socket, GrpcUnaryService& service, const H2Options& options,
               ConnectionShared shared, std::shared_ptr<asio::ssl::context> context,
               const H2Tls& tls) requires kTls : context_(std::move(context)),
                                                 tls_(&tls),
                                                 socket_(std::move(socket), *context_),
                                                 timer_(socket_.get_executor()),
                                                 service_(service),
                                                 options_(options),
                                                 shared_(shared) {}

  ~H2Connection() override {
    SetBusy(false);
    shared_.connections.fetch_sub(1, std::memory_order_relaxed);
  }
  H2Connection(const H2Connection&) = delete;
  H2Connection& operator=(const H2Connection&) = delete;

  net::LoopExecutor executor() override { return socket_.get_executor(); }

  void Start() override {
    boost::system::error_code ec;
    socket_.lowest_layer().set_option(net::Tcp::no_delay(true), ec);
    if constexpr (kTls) {
      // The handshake within the preface's time: the timer closes a connection still without
      // a session then.
      ArmTimer(Now() + options_.preface_timeout);
      socket_.async_handshake(asio::ssl::stream_base::server, [self = this->shared_from_this()](
                                                                  boost::system::error_code ec) {
        if (ec || self->closed_ || !self->tls_->Admits(self->socket_.native_handle())) {
          self->Close();  // Refused, or a client the SAN does not name.
          return;
        }
        self->StartSession();
      });
    } else {
      StartSession();
    }
  }

  // The GOAWAY's write starts now, and counts the connection busy: the server's drain waits
  // for it (HttpServer::Stop).
  void Drain() override {
    if (!closed_ && session_) {
      session_->Drain();
      Flush();
    }
  }

  void Shut() override { Close(); }

 private:
  void StartSession() {
    // A reply may come from the store's thread: it is handed to the session on this loop, and
    // written with every other reply of this pass (one write for them all).
    session_.emplace(
        service_, options_,
        [weak = this->weak_from_this()](int32_t id) -> GrpcUnaryService::Done {
          return [weak, id](GrpcReply reply) mutable {
            const std::shared_ptr<H2Connection> self = weak.lock();
            if (self == nullptr) {
              return;  // Closed and gone: nobody to tell.
            }
            asio::dispatch(self->executor(), [self, id, reply = std::move(reply)]() mutable {
              if (!self->closed_) {
                self->session_->Answer(id, std::move(reply));
                self->ScheduleFlush();
              }
            });
          };
        },
        Now());
    if (!session_->ok()) {
      Close();
      return;
    }
    if (shared_.stopping.load()) {
      session_->Drain();
    }
    timer_at_.reset();
    timer_.cancel();  // The handshake's deadline, if any: the session's ticks from now on.
    ArmTimer(session_->NextTick());
    Flush();  // Our SETTINGS.
    Read();
  }

  void Read() {
    socket_.async_read_some(asio::buffer(in_), [self = this->shared_from_this()](
                                                   boost::system::error_code ec, size_t n) {
      if (ec || self->closed_) {
        self->Close();  // The client went away, or we closed.
        return;
      }
      self->Received(n);
    });
  }

  void Received(size_t n) {
    if (!session_->Receive({in_.data(), n}, Now())) {
      // Not HTTP/2, or a flood: what the session queued (a GOAWAY saying why) is written,
      // then the connection closes.
      closing_ = true;
      Flush();
      return;
    }
    Flush();
    UpdateBusy();
    if (!closed_) {
      ArmTimer(session_->NextTick());  // Sooner, when a call of this read has a grpc-timeout.
      Read();
    }
  }

  void ScheduleFlush() {
    if (!flush_scheduled_ && !closed_) {
      flush_scheduled_ = true;
      asio::post(executor(), [self = this->shared_from_this()] {
        self->flush_scheduled_ = false;
        self->Flush();
      });
    }
  }

  // Writes what the session has to send; once written, writes again or closes.
  void Flush() {
    if (writing_ || closed_) {
      return;
    }
    out_.clear();
    if (!session_->Send(out_, kWriteChunk)) {
      Close();
      return;
    }
    if (out_.empty()) {
      if (closing_ || session_->Finished()) {
        Close();
      }
      UpdateBusy();
      return;
    }
    writing_ = true;
    UpdateBusy();
    asio::async_write(socket_, asio::buffer(out_),
                      [self = this->shared_from_this()](boost::system::error_code ec, size_t) {
                        self->writing_ = false;
                        if (ec) {
                          self->Close();
                          return;
                        }
                        self->Flush();
                      });
  }

  void ArmTimer(SteadyTime at) {
    if (timer_at_ && *timer_at_ <= at) {
      return;  // It wakes earlier anyway, and is set again then.
    }
    timer_at_ = at;
    timer_.expires_at(at);
    timer_.async_wait([self = this->shared_from_this()](boost::system::error_code ec) {
      if (ec == asio::error::operation_aborted || self->closed_) {
        return;  // Set again for an earlier time, or closing.
      }
      self->timer_at_.reset();
      if (!self->session_ || !self->session_->Tick(Now())) {  // No session: handshake too slow.
        self->Close();
        return;
      }
      self->ScheduleFlush();
      self->ArmTimer(self->session_->NextTick());
    });
  }

  // Counted in the server's in-flight requests while calls are open or bytes unwritten, so
  // that a drain waits for them.
  void SetBusy(bool busy) {
    if (busy != busy_) {
      busy_ = busy;
      shared_.in_flight.fetch_add(busy ? 1 : -1);
    }
  }
  void UpdateBusy() { SetBusy(!closed_ && (writing_ || (session_ && session_->Busy()))); }

  void Close() {
    if (closed_) {
      return;
    }
    closed_ = true;
    boost::system::error_code ec;
    timer_.cancel();
    socket_.lowest_layer().shutdown(net::Tcp::socket::shutdown_both, ec);
    socket_.lowest_layer().close(ec);
    UpdateBusy();
  }

  std::shared_ptr<asio::ssl::context> context_;  // TLS: outlives the stream.
  const H2Tls* tls_ = nullptr;
  Stream socket_;
  net::Timer timer_;
  std::optional<SteadyTime> timer_at_;  // When the timer is set to wake.
  GrpcUnaryService& service_;
  const H2Options& options_;
  ConnectionShared shared_;
  std::optional<GrpcH2Session> session_;
  std::array<uint8_t, 16 * 1024> in_{};
  std::string out_;
  bool writing_ = false;
  bool flush_scheduled_ = false;
  bool busy_ = false;
  bool closed_ = false;
  bool closing_ = false;  // The session failed: write what it queued, then close.
};

}  // namespace

ConnectionMaker H2ConnectionMaker(GrpcUnaryService& service, const H2Options& options,
                                  const H2Tls* tls) {
  if (tls != nullptr) {
    return [&service, &options, tls](Socket socket, ConnectionShared shared) {
      return std::make_shared<H2Connection<TlsStream>>(std::move(socket), service, options, shared,
                                                       tls->context(), *tls);
    };
  }
  return [&service, &options](Socket socket, ConnectionShared shared) {
    return std::make_shared<H2Connection<Socket>>(std::move(socket), service, options, shared);
  };
}

}  // namespace sluice::server
