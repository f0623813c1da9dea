#include "src/redis/connection.h"

#include <algorithm>
#include <utility>

#include "fmt/format.h"

#include "src/core/status.h"
#include "src/redis/errors.h"
#include "src/redis/sentinel.h"

namespace sluice {
namespace {

namespace asio = boost::asio;
using internal::Command;
using internal::ReplyPtr;

}  // namespace

RedisStore::Impl::Connection::Connection(Impl& store, Node& node)
    : store_(store), node_(node), retry_(store.io_), backoff_(store.options_.backoff_min) {}

RedisStore::Impl::Connection::~Connection() {
  if (reader_ != nullptr) {
    redisReaderFree(reader_);
  }
}

std::optional<internal::SteadyTime> RedisStore::Impl::Connection::deadline() const {
  std::optional<SteadyTime> earliest;
  for (const Pending& p : pending_) {
    earliest = earliest ? std::min(*earliest, p.deadline) : p.deadline;
  }
  if (!earliest && state_ == State::kOpening) {
    return open_deadline_;
  }
  return earliest;
}

void RedisStore::Impl::Connection::Connect() {
  state_ = State::kOpening;
  open_deadline_ =
      store_.SteadyNow() +
      std::max<SteadyClock::duration>(store_.options_.timeout, std::chrono::milliseconds(250));
  const uint64_t generation = generation_;
  stream_ = std::make_shared<internal::RedisStream>(store_.io_, node_.endpoint, store_.tls_.get(),
                                                    store_.options_.tls.verify_hostname);
  stream_->Connect([this, generation](absl::Status status) {
    if (generation != generation_) {
      return;
    }
    if (!status.ok()) {
      Fail(status);
      return;
    }
    OnConnected();
  });
  store_.ArmTimer();
}

bool RedisStore::Impl::Connection::ClockReady(SteadyTime now) {
  const bool due = time_refused_at_ ? now - *time_refused_at_ >= internal::kRedisClockReread
                                    : !redis_clock_ || now - redis_clock_->read_at >=
                                                           internal::kRedisClockReread;
  if (due && !clock_asked_) {
    clock_asked_ = true;
    Control(Pending::Kind::kTime, Command({"TIME"}), now + store_.options_.timeout);
  }
  const bool fresh = OnRedisClock(now, now).has_value();  // A reading under kRedisClockStale.
  // Else wait for the TIME on its way, unless Redis refused the last one.
  return fresh || !clock_asked_ || time_refused_at_.has_value();
}

void RedisStore::Impl::Connection::Send(Pending batch, bool asking) {
  batch.asking = asking;
  if (asking) {
    Control(Pending::Kind::kAsking, Command({"ASKING"}), batch.deadline);
  }
  ++batches_;
  store_.script_calls_.fetch_add(1, std::memory_order_relaxed);
  writes_.Append(batch.command);
  pending_.push_back(std::move(batch));
  Flush();
}

std::optional<int64_t> RedisStore::Impl::Connection::OnRedisClock(SteadyTime now,
                                                                  SteadyTime deadline) const {
  if (!redis_clock_ || now - redis_clock_->read_at >= internal::kRedisClockStale) {
    return std::nullopt;
  }
  return redis_clock_->At(deadline);
}

std::optional<int64_t> RedisStore::Impl::Connection::Expires(SteadyTime now,
                                                             SteadyTime deadline) const {
  const std::optional<SteadyTime> in_flight = this->deadline();
  return OnRedisClock(now, in_flight ? std::min(deadline, *in_flight) : deadline);
}

void RedisStore::Impl::Connection::AskSlots() {
  Control(Pending::Kind::kSlots, Command({"CLUSTER", "SLOTS"}),
          store_.SteadyNow() + store_.options_.timeout);
}

void RedisStore::Impl::Connection::Fail(const absl::Status& status, bool refusing) {
  store_.last_error_ = std::string(status.message());
  if (!store_.stopping_) {
    store_.health_.Lost(Name(), internal::Message(status), refusing, store_.SteadyNow());
  }
  Close(status);
  if (store_.stopping_) {
    return;
  }
  if (store_.sentinel_ != nullptr) {
    store_.sentinel_->AskAgain();  // The master may have moved: lost, timed out, demoted.
  }
  retry_.expires_after(backoff_);
  backoff_ = std::min(backoff_ * 2, store_.options_.backoff_max);
  retry_.async_wait([this](boost::system::error_code ec) {
    // Still closed: a Restart may have opened it since (and a cancel cannot recall a wait
    // that has already fired).
    if (!ec && !store_.stopping_ && state_ == State::kClosed) {
      store_.reconnects_.fetch_add(1, std::memory_order_relaxed);
      Connect();
    }
  });
  store_.Dispatch();  // Fails fast what waits, if no other connection can take it.
}

void RedisStore::Impl::Connection::Close(const absl::Status& status) {
  ++generation_;  // Handlers of the old socket see a new generation and do nothing.
  if (state_ == State::kReady) {
    store_.ready_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (stream_ != nullptr) {
    stream_->Close();
  }
  if (store_.stopping_) {
    retry_.cancel();
  }
  state_ = State::kClosed;
  redis_clock_.reset();  // The next handshake may reach another server (a failover).
  clock_asked_ = false;
  time_refused_at_.reset();
  writes_.Clear();
  batches_ = 0;
  if (reader_ != nullptr) {
    redisReaderFree(reader_);
    reader_ = nullptr;
  }
  std::deque<Pending> pending;
  pending.swap(pending_);
  for (Pending& p : pending) {
    if (p.kind == Pending::Kind::kSlots) {
      store_.slots_asked_ = false;
    }
    store_.FailAll(p.calls, status);
  }
}

void RedisStore::Impl::Connection::Restart(const absl::Status& status) {
  Close(status);
  retry_.cancel();
  backoff_ = store_.options_.backoff_min;
  Connect();
}

void RedisStore::Impl::Connection::OnConnected() {
  reader_ = internal::CreateReader();
  const RedisStoreOptions& o = store_.options_;
  if (!o.password.empty()) {
    Control(Pending::Kind::kAuth,
            o.user.empty() ? Command({"AUTH", o.password}) : Command({"AUTH", o.user, o.password}),
            open_deadline_);
  }
  if (o.database != 0) {
    Control(Pending::Kind::kSelect, Command({"SELECT", std::to_string(o.database)}),
            open_deadline_);
  }
  if (store_.sentinel_ != nullptr) {
    Control(Pending::Kind::kRole, Command({"ROLE"}), open_deadline_);  // Still the master?
  }
  Control(Pending::Kind::kTime, Command({"TIME"}), open_deadline_);
  Control(Pending::Kind::kScriptLoad, Command({"SCRIPT", "LOAD", Script()}), open_deadline_);
  Read();
}

void RedisStore::Impl::Connection::Control(Pending::Kind kind, std::string command,
                                           SteadyTime deadline) {
  writes_.Append(command);
  pending_.push_back({.kind = kind, .deadline = deadline});
  Flush();
}

// What a connection that fails as it opens over TLS may mean: TLS 1.3 ends the client's
// handshake before the server has checked the client's certificate, so a Redis that refuses
// it (tls-auth-clients) is heard only as the first read or write fails.
std::string RedisStore::Impl::Connection::Hint() const {
  if (state_ != State::kOpening || store_.tls_ == nullptr) {
    return "";
  }
  return store_.options_.tls.cert_file.empty()
             ? " (over TLS: does Redis want a client certificate? tls-auth-clients)"
             : " (over TLS: does Redis refuse this client certificate? tls-auth-clients)";
}

void RedisStore::Impl::Connection::Flush() {
  if (stream_ == nullptr) {
    return;  // Closed: nothing is queued then.
  }
  const uint64_t generation = generation_;
  writes_.Flush(
      *stream_, [this, generation] { return generation == generation_; },
      [this](boost::system::error_code ec) {
        Fail(absl::UnavailableError(fmt::format("writing to Redis at {}: {}{}",
                                                RedisEndpointName(node_.endpoint), ec.message(),
                                                Hint())));
      });
}

void RedisStore::Impl::Connection::Read() {
  const uint64_t generation = generation_;
  stream_->ReadSome(asio::buffer(in_), [this, generation](boost::system::error_code ec, size_t n) {
    if (generation != generation_) {
      return;
    }
    if (ec) {
      const std::string at = RedisEndpointName(node_.endpoint);
      Fail(absl::UnavailableError(
          ec == asio::error::eof
              ? fmt::format("Redis at {} closed the connection{}", at, Hint())
              : fmt::format("reading from Redis at {}: {}{}", at, ec.message(), Hint())));
      return;
    }
    auto same = [this, generation] { return generation == generation_; };
    if (!internal::ReadReplies(
            *reader_, in_.data(), n, [this](ReplyPtr r) { OnReply(std::move(r)); }, same)) {
      Fail(absl::UnavailableError(
          fmt::format("Redis at {} sent what is not RESP", RedisEndpointName(node_.endpoint))));
      return;
    }
    if (same()) {
      Read();
    }
  });
}

void RedisStore::Impl::Connection::OnReply(ReplyPtr reply) {
  if (pending_.empty()) {
    Fail(absl::UnavailableError("Redis sent a reply nobody asked for"));
    return;
  }
  Pending p = std::move(pending_.front());
  pending_.pop_front();
  const bool error = reply->type == REDIS_REPLY_ERROR;
  const std::string_view text =
      reply->str != nullptr ? std::string_view(reply->str, reply->len) : std::string_view();
  switch (p.kind) {
    case Pending::Kind::kAuth:
    case Pending::Kind::kSelect:
      if (error) {
        Fail(absl::UnavailableError(fmt::format(
            "Redis refused {}: {}", p.kind == Pending::Kind::kAuth ? "AUTH" : "SELECT", text)));
      }
      return;
    case Pending::Kind::kAsking:
      return;  // +OK; the batch behind it carries the answer.
    case Pending::Kind::kTime:
      OnTime(*reply, text, store_.SteadyNow());
      return;
    case Pending::Kind::kRole:
      if (!internal::IsMasterRole(*reply)) {  // A sentinel named a server since demoted.
        Fail(absl::UnavailableError(fmt::format("Redis at {} is not a master (ROLE): {}",
                                                RedisEndpointName(node_.endpoint),
                                                error ? text : "a replica")));
      }
      return;
    case Pending::Kind::kSlots:
      if (error) {
        store_.OnSlotsRefused(text);
      } else {
        store_.OnSlots(*reply, node_.endpoint);
      }
      store_.Dispatch();
      return;
    case Pending::Kind::kScriptLoad:
      if (error || reply->type != REDIS_REPLY_STRING) {
        Fail(absl::UnavailableError(fmt::format("Redis refused SCRIPT LOAD: {}", text)));
        return;
      }
      store_.sha_ = std::string(text);
      if (state_ == State::kOpening) {
        state_ = State::kReady;
        if (!not_master_) {
          backoff_ = store_.options_.backoff_min;
        }
        store_.ready_.fetch_add(1, std::memory_order_relaxed);
        store_.health_.Connected(Name(), store_.SteadyNow());
        if (store_.options_.cluster && !store_.slots_known_) {
          store_.RefreshSlots();  // Learn the map before the first call needs it.
        }
        store_.Dispatch();
      }
      return;
    case Pending::Kind::kBatch:
      OnBatchReply(std::move(p), *reply, error, text);
      return;
  }
}

void RedisStore::Impl::Connection::OnBatchReply(Pending p, const redisReply& reply, bool error,
                                                std::string_view text) {
  --batches_;
  if (error && text.starts_with("NOSCRIPT") && !p.retried) {
    // The script cache was flushed (SCRIPT FLUSH, a restart, a failover): load it again
    // and resend, in order, on this connection.
    p.retried = true;
    Control(Pending::Kind::kScriptLoad, Command({"SCRIPT", "LOAD", Script()}), p.deadline);
    if (p.asking) {
      Control(Pending::Kind::kAsking, Command({"ASKING"}), p.deadline);
    }
    ++batches_;
    writes_.Append(p.command);
    pending_.push_back(std::move(p));
    Flush();
    return;
  }
  const bool redirected =
      text.starts_with("MOVED ") || text.starts_with("ASK ") || text.starts_with("TRYAGAIN");
  if (error && redirected && store_.options_.cluster) {
    store_.Redirect(std::move(p), text);
  } else if (error && redirected) {
    store_.FailAll(p.calls, absl::UnavailableError(
                                fmt::format("redis: {}: this server is a Redis Cluster node; use "
                                            "redis+cluster:// to follow its redirections",
                                            text)));
  } else if (error && text.starts_with(internal::kExpired) && store_.SteadyNow() < p.deadline) {
    // Redis read the call past its `expires` before its deadline here: Redis's clock has been
    // stepped forward since this connection read it. The policy answers; a new connection
    // reads it again.
    store_.FailAll(p.calls, internal::RedisErrorStatus(text));
    Fail(absl::UnavailableError(fmt::format("Redis at {}'s clock moved: {}", Name(), text)));
  } else if (error) {
    // The whole call failed: Redis cannot decide now (OOM, BUSY, LOADING, READONLY...), which
    // the policy answers, or the call is wrong (errors.h).
    const internal::RedisErrorKind kind = internal::ClassifyRedisError(text);
    store_.FailAll(p.calls, internal::RedisErrorStatus(text));
    if (kind != internal::RedisErrorKind::kCall) {
      Refused(text, kind == internal::RedisErrorKind::kNotMaster);
    }
  } else {
    // A command of the script may have been refused for the same reasons, per call.
    const BatchOutcome outcome = store_.CompleteBatch(p.calls, reply);
    if (outcome.refusal) {
      Refused(*outcome.refusal, outcome.not_master);
    } else if (outcome.answered) {
      if (not_master_) {
        not_master_ = false;
        backoff_ = store_.options_.backoff_min;
      }
      store_.health_.Answered(Name(), store_.SteadyNow());
    }
  }
  store_.Dispatch();
}

void RedisStore::Impl::Connection::Refused(std::string_view text, bool not_master) {
  if (!not_master) {
    store_.health_.Lost(Name(), text, /*refusing=*/true, store_.SteadyNow());
    return;
  }
  if (store_.options_.cluster) {
    store_.health_.Lost(Name(), text, /*refusing=*/true, store_.SteadyNow());
    store_.RefreshSlots();  // A failover: the fresh map names the slot's new master.
    return;
  }
  // Demoted: drop the connection. Its reconnection asks the sentinels again (Fail), or
  // resolves the host's name again (a DNS name that follows the master); until it finds a
  // master, its backoff grows as a connection that fails to open does.
  not_master_ = true;
  Fail(absl::UnavailableError(fmt::format("Redis at {} is not a master: {}", Name(), text)),
       /*refusing=*/true);
}

void RedisStore::Impl::Connection::OnTime(const redisReply& reply, std::string_view text,
                                          SteadyTime now) {
  clock_asked_ = false;
  const RedisLogSink& log = store_.options_.log;
  if (std::optional<internal::RedisClock> clock = internal::ReadRedisClock(reply, now)) {
    redis_clock_ = clock;
    time_refused_at_.reset();
    if (node_.time_refused_said) {
      node_.time_refused_said = false;
      if (log) {
        log(RedisLogLevel::kInfo, fmt::format("Redis at {} answers TIME again: its calls carry "
                                              "their deadline on its clock",
                                              Name()));
      }
    }
  } else {
    // Like a handshake whose TIME is refused: the last reading serves while it is younger
    // than kRedisClockStale, then calls go without `expires` (Redis may then decide a call
    // after its caller was answered: charged, never admitted), and TIME is asked again
    // kRedisClockReread later rather than before each batch.
    time_refused_at_ = now;
    if (!node_.time_refused_said) {
      node_.time_refused_said = true;
      if (log) {
        log(RedisLogLevel::kWarning,
            fmt::format("Redis at {} refused TIME ({}): its calls carry no deadline on its "
                        "clock once the last reading is {} s old; TIME is asked again every {} s",
                        Name(), text.empty() ? "not TIME's reply" : text,
                        internal::kRedisClockStale.count(), internal::kRedisClockReread.count()));
      }
    }
  }
  if (state_ == State::kReady) {
    store_.Dispatch();  // Batches may have waited for this reading.
  }
}

std::string RedisStore::Impl::Connection::Name() const { return RedisEndpointName(node_.endpoint); }

}  // namespace sluice
