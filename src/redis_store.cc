#include "sluice/redis_store.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <cctype>
#include <deque>
#include <future>
#include <limits>
#include <optional>
#include <thread>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "boost/asio/connect.hpp"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/write.hpp"
#include "fmt/format.h"
#include <hiredis/hiredis.h>

#include "sluice/algorithms.h"
#include "sluice/memory_store.h"
#include "src/mutex.h"

namespace sluice {
namespace internal {
extern const std::string_view kRedisDecideScript;  // src/redis_decide.lua, built in by CMake.
}  // namespace internal

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;
using SteadyTime = SteadyClock::time_point;

// The largest B x P' the script keeps exact (its sums of two such values stay below 2^53).
constexpr int64_t kMaxExactProduct = int64_t{1} << 52;
// One script call reads every bucket of a sliding_buckets key; keep that bounded.
constexpr int64_t kMaxRedisBuckets = 10'000;

// ---------------------------------------------------------------------------------------------
// URLs

std::string PercentDecode(std::string_view s, bool& ok) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      ok = false;
      return out;
    }
    out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
    i += 2;
  }
  return out;
}

absl::StatusOr<RedisEndpoint> ParseEndpoint(std::string_view url, std::string_view text) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(fmt::format("redis URL '{}': {}", url, why));
  };
  RedisEndpoint endpoint;
  std::string_view port;
  if (text.starts_with('[')) {  // [IPv6]:port
    const size_t close = text.find(']');
    if (close == std::string_view::npos) {
      return bad("an IPv6 address needs its closing ']'");
    }
    endpoint.host = std::string(text.substr(1, close - 1));
    text.remove_prefix(close + 1);
    if (!text.empty() && !text.starts_with(':')) {
      return bad("expected ':port' after ']'");
    }
    port = text.empty() ? "" : text.substr(1);
  } else {
    const size_t colon = text.find(':');
    endpoint.host = std::string(text.substr(0, colon));
    port = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  }
  if (endpoint.host.empty()) {
    return bad("no host");
  }
  if (!port.empty()) {
    int value = 0;
    for (char c : port) {
      if (!std::isdigit(static_cast<unsigned char>(c)) || value > 65535) {
        return bad(fmt::format("port '{}' is not a number from 1 to 65535", port));
      }
      value = value * 10 + (c - '0');
    }
    if (value < 1 || value > 65535) {
      return bad(fmt::format("port '{}' is not a number from 1 to 65535", port));
    }
    endpoint.port = static_cast<uint16_t>(value);
  }
  return endpoint;
}

// ---------------------------------------------------------------------------------------------
// Keys and arguments

// The hash tag Redis Cluster would take from `key`: the text between the first '{' and the
// first '}' after it, if not empty.
std::optional<std::string_view> HashTag(std::string_view key) {
  const size_t open = key.find('{');
  if (open == std::string_view::npos) {
    return std::nullopt;
  }
  const size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) {
    return std::nullopt;
  }
  return key.substr(open + 1, close - open - 1);
}

// FNV-1a: a hash every server of a fleet computes alike (absl::Hash is seeded per process).
uint64_t StableHash(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325;
  for (char c : s) {
    h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3;
  }
  return h;
}

char AlgorithmLetter(Algorithm a) {
  switch (a) {
    case Algorithm::kFixedWindow:
      return 'f';
    case Algorithm::kSlidingLog:
      return 'l';
    case Algorithm::kSlidingWindow:
      return 'w';
    case Algorithm::kSlidingBuckets:
      return 'k';
    case Algorithm::kTokenBucket:
      return 't';
    case Algorithm::kGcra:
      return 'g';
    case Algorithm::kLeakyBucket:
      return 'q';
  }
  return '?';
}

// RESP, the protocol's framing of one argument: "$<length>\r\n<bytes>\r\n". Written by hand
// rather than with hiredis's redisFormatCommandArgv, which allocates a whole command per call:
// a batch is assembled from the pieces of many calls.
void AppendBulk(std::string& out, std::string_view arg) {
  out += '$';
  out += fmt::format_int(arg.size()).str();
  out += "\r\n";
  out += arg;
  out += "\r\n";
}
void AppendBulk(std::string& out, int64_t n) { AppendBulk(out, fmt::format_int(n).str()); }

std::string Command(std::initializer_list<std::string_view> args) {
  std::string out = fmt::format("*{}\r\n", args.size());
  for (std::string_view a : args) {
    AppendBulk(out, a);
  }
  return out;
}

// A transport failure: the policy decides. Anything else is the call's own error.
bool IsTransportFailure(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

// One decision request on its way to Redis.
struct Call {
  std::vector<Limit> limits;      // For the local fallback and the reply's size.
  std::vector<std::string> keys;  // The caller's keys, for the local fallback.
  std::string keys_resp;          // The Redis keys, framed.
  std::string args_resp;          // This request's part of ARGV, framed.
  int64_t cost = 0;
  Timestamp now;
  std::span<Decision> each;
  DecideDone done;
  SteadyTime deadline;
};
using CallPtr = std::unique_ptr<Call>;
constexpr int kArgsPerLimit = 7;
constexpr int kArgsPerCall = 3;

// Script calls in flight on a connection, and the handshake before them.
struct Pending {
  enum class Kind { kAuth, kSelect, kScriptLoad, kBatch };
  Kind kind;
  std::vector<CallPtr> calls;  // kBatch
  std::string command;         // kBatch: sent again after a NOSCRIPT.
  bool retried = false;
  SteadyTime deadline;
};

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

}  // namespace

std::string_view FailurePolicyName(FailurePolicy policy) {
  switch (policy) {
    case FailurePolicy::kAllow:
      return "allow";
    case FailurePolicy::kDeny:
      return "deny";
    case FailurePolicy::kLocal:
      return "local";
  }
  return "?";
}

absl::StatusOr<FailurePolicy> ParseFailurePolicy(std::string_view name) {
  for (FailurePolicy p : {FailurePolicy::kAllow, FailurePolicy::kDeny, FailurePolicy::kLocal}) {
    if (name == FailurePolicyName(p)) {
      return p;
    }
  }
  return absl::InvalidArgumentError(
      fmt::format("unknown failure policy '{}': use allow, deny or local", name));
}

absl::StatusOr<RedisStoreOptions> ParseRedisUrl(std::string_view url) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(fmt::format("redis URL '{}': {}", RedactRedisUrl(url), why));
  };
  RedisStoreOptions options;
  std::string_view rest = url;
  if (rest.starts_with("redis://")) {
    rest.remove_prefix(8);
  } else if (rest.starts_with("redis+cluster://")) {
    rest.remove_prefix(16);
    options.cluster = true;
  } else {
    return bad("expected redis://host:port[/db] or redis+cluster://host:port,host:port");
  }
  const size_t at = rest.rfind('@');
  if (at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    rest.remove_prefix(at + 1);
    const size_t colon = userinfo.find(':');
    bool ok = true;
    if (colon == std::string_view::npos) {
      options.password = PercentDecode(userinfo, ok);  // redis://secret@host, as redis-cli reads it
    } else {
      options.user = PercentDecode(userinfo.substr(0, colon), ok);
      options.password = PercentDecode(userinfo.substr(colon + 1), ok);
    }
    if (!ok) {
      return bad("a '%' in the user or password must be followed by two hex digits");
    }
  }
  const size_t slash = rest.find('/');
  std::string_view hosts = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (options.cluster && !db.empty()) {
      return bad("a cluster has only database 0");
    }
    if (!db.empty()) {
      int value = 0;
      for (char c : db) {
        if (!std::isdigit(static_cast<unsigned char>(c)) || value > 1'000'000) {
          return bad(fmt::format("database '{}' is not a number", db));
        }
        value = value * 10 + (c - '0');
      }
      options.database = value;
    }
  }
  while (true) {
    const size_t comma = hosts.find(',');
    absl::StatusOr<RedisEndpoint> endpoint =
        ParseEndpoint(RedactRedisUrl(url), hosts.substr(0, comma));
    if (!endpoint.ok()) {
      return endpoint.status();
    }
    options.endpoints.push_back(*std::move(endpoint));
    if (comma == std::string_view::npos) {
      break;
    }
    hosts.remove_prefix(comma + 1);
  }
  if (!options.cluster && options.endpoints.size() > 1) {
    return bad("several hosts are for redis+cluster://");
  }
  return options;
}

std::string RedactRedisUrl(std::string_view url) {
  const size_t scheme = url.find("://");
  const size_t at = url.rfind('@');
  if (scheme == std::string_view::npos || at == std::string_view::npos || at < scheme) {
    return std::string(url);
  }
  const std::string_view userinfo = url.substr(scheme + 3, at - scheme - 3);
  const size_t colon = userinfo.find(':');
  const std::string_view user = colon == std::string_view::npos ? "" : userinfo.substr(0, colon);
  return fmt::format("{}{}:***{}", url.substr(0, scheme + 3), user, url.substr(at));
}

// ---------------------------------------------------------------------------------------------
// The I/O engine: one thread, its io_context, the connections.

class RedisStore::Impl {
 public:
  explicit Impl(RedisStoreOptions options)
      : options_(std::move(options)),
        work_(asio::make_work_guard(io_)),
        timer_(io_),
        margin_ms_(fmt::format_int(options_.expiry_margin.count()).str()) {
    for (int i = 0; i < options_.connections; ++i) {
      connections_.push_back(std::make_unique<Connection>(*this, options_.endpoints.front()));
    }
    thread_ = std::thread([this] { io_.run(); });
    asio::post(io_, [this] {
      for (auto& c : connections_) {
        c->Connect();
      }
    });
  }

  ~Impl() {
    asio::post(io_, [this] { Shutdown(); });
    work_.reset();
    thread_.join();
  }

  const RedisStoreOptions& options() const { return options_; }
  const MemoryStore& local() const { return local_; }

  std::string RedisKey(const Limit& limit, std::string_view key) const {
    std::string out = options_.key_prefix;
    out += AlgorithmLetter(limit.algorithm());
    out += fmt::format("{}/{}", limit.limit(), limit.period().count());
    if (UsesBurst(limit.algorithm())) {
      out += fmt::format("b{}", limit.burst());
    }
    if (limit.algorithm() == Algorithm::kSlidingBuckets) {
      out += fmt::format("k{}", limit.buckets());
    }
    out += ':';
    if (HashTag(key)) {
      out += key;  // The caller chose the slot.
    } else if (key.find('}') == std::string_view::npos) {
      out += '{';
      out += key;
      out += '}';
    } else {
      // No tag and a '}' that would end one early: tag with a digest of the key instead.
      out += fmt::format("{{{:016x}}}", StableHash(key));
      out += key;
    }
    return out;
  }

  void Submit(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
              std::span<Decision> each, DecideDone done) {
    calls_.fetch_add(1, std::memory_order_relaxed);
    auto call = std::make_unique<Call>();
    call->cost = cost;
    call->now = now;
    call->each = each;
    call->done = std::move(done);
    call->deadline = SteadyClock::now() + options_.timeout;
    call->limits.reserve(requests.size());
    call->keys.reserve(requests.size());
    if (options_.use_caller_time) {
      AppendBulk(call->args_resp, now.time_since_epoch().count());
    } else {
      AppendBulk(call->args_resp, "");
    }
    AppendBulk(call->args_resp, cost);
    AppendBulk(call->args_resp, static_cast<int64_t>(requests.size()));
    for (const LimitedKey& r : requests) {
      const Limit& l = *r.limit;
      AppendBulk(call->keys_resp, RedisKey(l, r.key));
      AppendBulk(call->args_resp, static_cast<int64_t>(l.algorithm()));
      AppendBulk(call->args_resp, l.limit());
      AppendBulk(call->args_resp, l.period().count());
      AppendBulk(call->args_resp, l.burst());
      AppendBulk(call->args_resp, l.buckets());
      AppendBulk(call->args_resp, l.rate_units());
      AppendBulk(call->args_resp, l.rate_period_us());
      call->limits.push_back(l);
      call->keys.emplace_back(r.key);
    }
    {
      internal::MutexLock lock(incoming_mu_);
      incoming_.push_back(std::move(call));
      if (take_scheduled_) {
        return;
      }
      take_scheduled_ = true;
    }
    asio::post(io_, [this] { TakeIncoming(); });
  }

  RedisStoreStats Stats() const {
    return {.calls = calls_.load(std::memory_order_relaxed),
            .script_calls = script_calls_.load(std::memory_order_relaxed),
            .failures = failures_.load(std::memory_order_relaxed),
            .fallbacks = fallbacks_.load(std::memory_order_relaxed),
            .reconnects = reconnects_.load(std::memory_order_relaxed),
            .connections_ready = ready_.load(std::memory_order_relaxed)};
  }

 private:
  class Connection;

  // Completes a call: with Redis's answer, or with a failure the policy turns into one.
  void Complete(Call& call, absl::StatusOr<Decision> result) {
    if (!result.ok() && IsTransportFailure(result.status())) {
      failures_.fetch_add(1, std::memory_order_relaxed);
      switch (options_.on_failure) {
        case FailurePolicy::kDeny:
          break;
        case FailurePolicy::kAllow:
          fallbacks_.fetch_add(1, std::memory_order_relaxed);
          std::fill(call.each.begin(), call.each.end(), Decision{.allowed = true});
          result = Combine(call.each);
          break;
        case FailurePolicy::kLocal: {
          fallbacks_.fetch_add(1, std::memory_order_relaxed);
          absl::InlinedVector<LimitedKey, 4> requests;
          for (size_t i = 0; i < call.limits.size(); ++i) {
            requests.push_back({&call.limits[i], call.keys[i]});
          }
          result = local_.DecideAll(requests, call.cost, call.now, call.each);
          break;
        }
      }
    }
    if (!result.ok()) {
      // One failure is handed to many calls, whose callers may be on other threads: give each
      // a Status of its own rather than a share of one reference-counted message (shared
      // ones are thread-safe, but Debian's Abseil is not built for ThreadSanitizer, which
      // then sees the count's atomics as plain writes).
      result = absl::Status(result.status().code(), result.status().message());
    }
    std::move(call.done)(std::move(result));
  }

  void TakeIncoming() {
    std::vector<CallPtr> taken;
    {
      internal::MutexLock lock(incoming_mu_);
      taken.swap(incoming_);
      take_scheduled_ = false;
    }
    for (CallPtr& c : taken) {
      if (stopping_) {
        Complete(*c, absl::CancelledError("the Redis store is shutting down"));
      } else {
        queue_.push_back(std::move(c));
      }
    }
    Dispatch();
  }

  // Sends what waits on the connections that have room, a batch per script call.
  void Dispatch() {
    while (!queue_.empty()) {
      Connection* best = nullptr;
      for (auto& c : connections_) {
        if (c->ready() && c->batches() < options_.pipeline &&
            (best == nullptr || c->batches() < best->batches())) {
          best = c.get();
        }
      }
      if (best == nullptr) {
        break;
      }
      Pending batch{.kind = Pending::Kind::kBatch};
      const size_t n = std::min<size_t>(queue_.size(), static_cast<size_t>(options_.batch));
      for (size_t i = 0; i < n; ++i) {
        batch.calls.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      batch.command = BatchCommand(batch.calls);
      batch.deadline = batch.calls.front()->deadline;
      script_calls_.fetch_add(1, std::memory_order_relaxed);
      best->Send(std::move(batch));
    }
    if (!queue_.empty() && std::none_of(connections_.begin(), connections_.end(),
                                        [](const auto& c) { return c->opening() || c->ready(); })) {
      // Every connection is waiting out a backoff: fail now rather than at the deadline.
      FailQueued(absl::UnavailableError(fmt::format("no connection to Redis: {}", last_error_)));
    }
    ArmTimer();
  }

  std::string BatchCommand(const std::vector<CallPtr>& calls) const {
    size_t keys = 0;
    size_t args = 2;
    size_t bytes = 128;
    for (const CallPtr& c : calls) {
      keys += c->limits.size();
      args += kArgsPerCall + kArgsPerLimit * c->limits.size();
      bytes += c->keys_resp.size() + c->args_resp.size();
    }
    std::string out;
    out.reserve(bytes);
    out += fmt::format("*{}\r\n", 3 + keys + args);
    AppendBulk(out, "EVALSHA");
    AppendBulk(out, sha_);
    AppendBulk(out, static_cast<int64_t>(keys));
    for (const CallPtr& c : calls) {
      out += c->keys_resp;
    }
    AppendBulk(out, margin_ms_);
    AppendBulk(out, static_cast<int64_t>(calls.size()));
    for (const CallPtr& c : calls) {
      out += c->args_resp;
    }
    return out;
  }

  void FailQueued(const absl::Status& status) {
    std::deque<CallPtr> queue;
    queue.swap(queue_);
    for (CallPtr& c : queue) {
      Complete(*c, status);
    }
  }

  // One timer for every deadline: the earliest among the queue's front and each connection's
  // oldest script call or connection attempt (each list is in deadline order).
  void ArmTimer() {
    std::optional<SteadyTime> earliest;
    auto consider = [&](std::optional<SteadyTime> t) {
      if (t && (!earliest || *t < *earliest)) {
        earliest = t;
      }
    };
    if (!queue_.empty()) {
      consider(queue_.front()->deadline);
    }
    for (auto& c : connections_) {
      consider(c->deadline());
    }
    if (!earliest || (timer_armed_ && timer_.expiry() <= *earliest)) {
      return;
    }
    timer_armed_ = true;
    timer_.expires_at(*earliest);
    timer_.async_wait([this](boost::system::error_code ec) {
      if (ec == asio::error::operation_aborted) {
        return;  // Re-armed earlier, or shutting down.
      }
      timer_armed_ = false;
      OnTimer();
    });
  }

  void OnTimer() {
    const SteadyTime now = SteadyClock::now();
    const std::string timeout =
        fmt::format("Redis did not answer within {} ms", options_.timeout.count());
    for (auto& c : connections_) {
      if (std::optional<SteadyTime> d = c->deadline(); d && *d <= now) {
        c->Fail(absl::DeadlineExceededError(timeout));
      }
    }
    while (!queue_.empty() && queue_.front()->deadline <= now) {
      CallPtr c = std::move(queue_.front());
      queue_.pop_front();
      Complete(*c, absl::DeadlineExceededError(timeout));
    }
    ArmTimer();
  }

  void Shutdown() {
    stopping_ = true;
    timer_.cancel();
    for (auto& c : connections_) {
      c->Close(absl::CancelledError("the Redis store is shutting down"));
    }
    FailQueued(absl::CancelledError("the Redis store is shutting down"));
  }

  // The replies to one batch, given to its calls in order.
  void CompleteBatch(std::vector<CallPtr>& calls, const redisReply& reply) {
    size_t at = 0;
    for (CallPtr& c : calls) {
      if (reply.type != REDIS_REPLY_ARRAY || at >= reply.elements ||
          reply.element[at]->type != REDIS_REPLY_INTEGER) {
        Complete(*c, absl::InternalError("redis: the script's reply is malformed"));
        continue;
      }
      if (reply.element[at]->integer == 0) {
        const redisReply* message = at + 1 < reply.elements ? reply.element[at + 1] : nullptr;
        Complete(*c, absl::InternalError(fmt::format(
                         "redis: {}", message && message->str ? message->str : "script error")));
        at += 2;
        continue;
      }
      ++at;
      if (at + 5 * c->limits.size() > reply.elements) {
        Complete(*c, absl::InternalError("redis: the script's reply is short"));
        continue;
      }
      for (size_t i = 0; i < c->limits.size(); ++i, at += 5) {
        c->each[i] = {.allowed = reply.element[at]->integer != 0,
                      .remaining = reply.element[at + 1]->integer,
                      .reset_after = Micros{reply.element[at + 2]->integer},
                      .retry_after = Micros{reply.element[at + 3]->integer},
                      .delay = Micros{reply.element[at + 4]->integer}};
      }
      Complete(*c, Combine(c->each));
    }
  }

  // One TCP connection: handshake (AUTH, SELECT, SCRIPT LOAD), then pipelined script calls.
  class Connection {
   public:
    Connection(Impl& store, RedisEndpoint endpoint)
        : store_(store),
          endpoint_(std::move(endpoint)),
          socket_(store.io_),
          resolver_(store.io_),
          retry_(store.io_),
          backoff_(store.options_.backoff_min) {}
    ~Connection() {
      if (reader_ != nullptr) {
        redisReaderFree(reader_);
      }
    }

    bool ready() const { return state_ == State::kReady; }
    bool opening() const { return state_ == State::kOpening; }
    int batches() const { return batches_; }

    // The deadline of the oldest thing this connection waits for.
    std::optional<SteadyTime> deadline() const {
      if (state_ == State::kOpening && pending_.empty()) {
        return open_deadline_;
      }
      if (!pending_.empty()) {
        return pending_.front().deadline;
      }
      return std::nullopt;
    }

    void Connect() {
      state_ = State::kOpening;
      open_deadline_ =
          SteadyClock::now() +
          std::max<SteadyClock::duration>(store_.options_.timeout, std::chrono::milliseconds(250));
      const uint64_t generation = generation_;
      resolver_.async_resolve(
          endpoint_.host, std::to_string(endpoint_.port),
          [this, generation](boost::system::error_code ec, tcp::resolver::results_type results) {
            if (generation != generation_) {
              return;
            }
            if (ec) {
              Fail(absl::UnavailableError(
                  fmt::format("cannot resolve {}: {}", endpoint_.host, ec.message())));
              return;
            }
            asio::async_connect(
                socket_, results,
                [this, generation](boost::system::error_code ec, const tcp::endpoint&) {
                  if (generation != generation_) {
                    return;
                  }
                  if (ec) {
                    Fail(absl::UnavailableError(fmt::format("cannot connect to {}:{}: {}",
                                                            endpoint_.host, endpoint_.port,
                                                            ec.message())));
                    return;
                  }
                  OnConnected();
                });
          });
      store_.ArmTimer();
    }

    void Send(Pending batch) {
      ++batches_;
      out_ += batch.command;
      pending_.push_back(std::move(batch));
      Flush();
    }

    // Closes the socket and fails everything in flight with `status`; reconnects after the
    // backoff unless the store is stopping.
    void Fail(const absl::Status& status) {
      if (state_ == State::kReady) {
        store_.ready_.fetch_sub(1, std::memory_order_relaxed);
      }
      store_.last_error_ = std::string(status.message());
      Close(status);
      if (store_.stopping_) {
        return;
      }
      retry_.expires_after(backoff_);
      backoff_ = std::min(backoff_ * 2, store_.options_.backoff_max);
      retry_.async_wait([this](boost::system::error_code ec) {
        if (!ec && !store_.stopping_) {
          store_.reconnects_.fetch_add(1, std::memory_order_relaxed);
          Connect();
        }
      });
      store_.Dispatch();  // Fails fast what waits, if no other connection can take it.
    }

    void Close(const absl::Status& status) {
      ++generation_;  // Handlers of the old socket see a new generation and do nothing.
      boost::system::error_code ignored;
      socket_.close(ignored);
      resolver_.cancel();
      if (store_.stopping_) {
        retry_.cancel();
      }
      state_ = State::kClosed;
      out_.clear();
      writing_.clear();
      writing_now_ = false;
      batches_ = 0;
      if (reader_ != nullptr) {
        redisReaderFree(reader_);
        reader_ = nullptr;
      }
      std::deque<Pending> pending;
      pending.swap(pending_);
      for (Pending& p : pending) {
        for (CallPtr& c : p.calls) {
          store_.Complete(*c, status);
        }
      }
    }

   private:
    enum class State { kClosed, kOpening, kReady };

    void OnConnected() {
      boost::system::error_code ignored;
      socket_.set_option(tcp::no_delay(true), ignored);
      reader_ = redisReaderCreate();
      const RedisStoreOptions& o = store_.options_;
      if (!o.password.empty()) {
        Handshake(Pending::Kind::kAuth, o.user.empty() ? Command({"AUTH", o.password})
                                                       : Command({"AUTH", o.user, o.password}));
      }
      if (o.database != 0) {
        Handshake(Pending::Kind::kSelect, Command({"SELECT", std::to_string(o.database)}));
      }
      Handshake(Pending::Kind::kScriptLoad, Command({"SCRIPT", "LOAD", Script()}));
      Read();
    }

    void Handshake(Pending::Kind kind, std::string command) {
      out_ += command;
      pending_.push_back({.kind = kind, .deadline = open_deadline_});
      Flush();
    }

    void Flush() {
      if (writing_now_ || out_.empty()) {
        return;
      }
      writing_now_ = true;
      writing_.swap(out_);
      const uint64_t generation = generation_;
      asio::async_write(
          socket_, asio::buffer(writing_),
          [this, generation](boost::system::error_code ec, size_t) {
            if (generation != generation_) {
              return;
            }
            writing_now_ = false;
            writing_.clear();
            if (ec) {
              Fail(absl::UnavailableError(fmt::format("writing to Redis: {}", ec.message())));
              return;
            }
            Flush();
          });
    }

    void Read() {
      const uint64_t generation = generation_;
      socket_.async_read_some(asio::buffer(in_), [this, generation](boost::system::error_code ec,
                                                                    size_t n) {
        if (generation != generation_) {
          return;
        }
        if (ec) {
          Fail(absl::UnavailableError(ec == asio::error::eof
                                          ? std::string("Redis closed the connection")
                                          : fmt::format("reading from Redis: {}", ec.message())));
          return;
        }
        if (redisReaderFeed(reader_, in_.data(), n) != REDIS_OK) {
          Fail(absl::UnavailableError("Redis sent what is not RESP"));
          return;
        }
        while (generation == generation_) {
          void* reply = nullptr;
          if (redisReaderGetReply(reader_, &reply) != REDIS_OK) {
            Fail(absl::UnavailableError("Redis sent what is not RESP"));
            return;
          }
          if (reply == nullptr) {
            break;
          }
          OnReply(ReplyPtr(static_cast<redisReply*>(reply)));
        }
        if (generation == generation_) {
          Read();
        }
      });
    }

    void OnReply(ReplyPtr reply) {
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
        case Pending::Kind::kScriptLoad:
          if (error || reply->type != REDIS_REPLY_STRING) {
            Fail(absl::UnavailableError(fmt::format("Redis refused SCRIPT LOAD: {}", text)));
            return;
          }
          store_.sha_ = std::string(text);
          if (state_ == State::kOpening) {
            state_ = State::kReady;
            backoff_ = store_.options_.backoff_min;
            store_.ready_.fetch_add(1, std::memory_order_relaxed);
            store_.Dispatch();
          }
          return;
        case Pending::Kind::kBatch:
          break;
      }
      --batches_;
      if (error && text.starts_with("NOSCRIPT") && !p.retried) {
        // The script cache was flushed (SCRIPT FLUSH, a restart, a failover): load it again
        // and resend, in order, on this connection.
        p.retried = true;
        ++batches_;
        Handshake(Pending::Kind::kScriptLoad, Command({"SCRIPT", "LOAD", Script()}));
        pending_.back().deadline = p.deadline;
        out_ += p.command;
        pending_.push_back(std::move(p));
        Flush();
        return;
      }
      if (error) {
        // The whole call failed (OOM, BUSY, LOADING, READONLY...): Redis is not deciding.
        const absl::Status status = absl::UnavailableError(fmt::format("redis: {}", text));
        for (CallPtr& c : p.calls) {
          store_.Complete(*c, status);
        }
      } else {
        store_.CompleteBatch(p.calls, *reply);
      }
      store_.Dispatch();
    }

    Impl& store_;
    RedisEndpoint endpoint_;
    tcp::socket socket_;
    tcp::resolver resolver_;
    asio::steady_timer retry_;
    std::chrono::milliseconds backoff_;
    State state_ = State::kClosed;
    uint64_t generation_ = 0;
    SteadyTime open_deadline_;
    std::deque<Pending> pending_;
    int batches_ = 0;
    std::string out_;      // Commands not yet written.
    std::string writing_;  // Commands being written.
    bool writing_now_ = false;
    std::array<char, 16384> in_;
    redisReader* reader_ = nullptr;
  };

  const RedisStoreOptions options_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  std::thread thread_;
  MemoryStore local_;  // The `local` policy's fallback.

  // Calls made on other threads, taken into queue_ by the I/O thread.
  internal::Mutex incoming_mu_;
  std::vector<CallPtr> incoming_ ABSL_GUARDED_BY(incoming_mu_);
  bool take_scheduled_ ABSL_GUARDED_BY(incoming_mu_) = false;

  // The I/O thread's own.
  std::vector<std::unique_ptr<Connection>> connections_;
  std::deque<CallPtr> queue_;
  asio::steady_timer timer_;
  bool timer_armed_ = false;
  bool stopping_ = false;
  std::string sha_;
  std::string last_error_ = "not connected yet";
  const std::string margin_ms_;

  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> script_calls_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> fallbacks_{0};
  std::atomic<uint64_t> reconnects_{0};
  std::atomic<int> ready_{0};
};

// ---------------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<RedisStore>> RedisStore::Create(RedisStoreOptions options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("the Redis store needs a host");
  }
  if (options.cluster) {
    return absl::UnimplementedError("redis+cluster:// is not supported yet");
  }
  if (options.connections < 1 || options.pipeline < 1 || options.batch < 1) {
    return absl::InvalidArgumentError("connections, pipeline and batch must each be at least 1");
  }
  if (options.timeout <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError("the Redis timeout must be positive");
  }
  if (options.key_prefix.find_first_of("{}") != std::string::npos) {
    return absl::InvalidArgumentError("the key prefix may not contain '{' or '}'");
  }
  if (options.backoff_min <= std::chrono::milliseconds(0) ||
      options.backoff_max < options.backoff_min) {
    return absl::InvalidArgumentError("backoff_min must be positive and at most backoff_max");
  }
  return std::unique_ptr<RedisStore>(new RedisStore(std::make_unique<Impl>(std::move(options))));
}

RedisStore::RedisStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RedisStore::~RedisStore() = default;

std::string_view RedisStore::Script() { return internal::kRedisDecideScript; }

absl::Status RedisStore::CheckLimit(const Limit& limit) const {
  if (absl::Status s = impl_->local().CheckLimit(limit); !s.ok()) {
    return s;
  }
  if (UsesBurst(limit.algorithm()) &&
      Int128{limit.burst()} * limit.rate_period_us() > kMaxExactProduct) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: the Redis store computes in doubles and keeps burst x period/gcd(limit, period) "
        "below 2^52; this limit needs {}: use a smaller burst or a rate in rounder numbers",
        limit.ToString(), static_cast<double>(Int128{limit.burst()} * limit.rate_period_us())));
  }
  if (limit.algorithm() == Algorithm::kSlidingBuckets && limit.buckets() > kMaxRedisBuckets) {
    return absl::InvalidArgumentError(
        fmt::format("{}: the Redis store keeps at most {} buckets per sliding_buckets key",
                    limit.ToString(), kMaxRedisBuckets));
  }
  return absl::OkStatus();
}

void RedisStore::DecideAllAsync(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                                std::span<Decision> each, DecideDone done) {
  assert(each.size() == requests.size());
  if (absl::Status s = ValidateRequest(requests.size(), cost); !s.ok()) {
    std::move(done)(s);
    return;
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (absl::Status s = CheckLimit(*requests[i].limit); !s.ok()) {
      std::move(done)(s);
      return;
    }
    for (size_t j = 0; j < i; ++j) {
      if (*requests[j].limit == *requests[i].limit && requests[j].key == requests[i].key) {
        std::move(done)(absl::InvalidArgumentError(fmt::format(
            "limit {} on key '{}' appears twice", requests[i].limit->ToString(), requests[i].key)));
        return;
      }
    }
  }
  impl_->Submit(requests, cost, now, each, std::move(done));
}

absl::StatusOr<Decision> RedisStore::DecideAll(std::span<const LimitedKey> requests, int64_t cost,
                                               Timestamp now, std::span<Decision> each) {
  std::promise<absl::StatusOr<Decision>> promise;
  std::future<absl::StatusOr<Decision>> result = promise.get_future();
  DecideAllAsync(requests, cost, now, each,
                 [&promise](absl::StatusOr<Decision> r) { promise.set_value(std::move(r)); });
  return result.get();
}

absl::StatusOr<Decision> RedisStore::Decide(const Limit& limit, std::string_view key, int64_t cost,
                                            Timestamp now) {
  const LimitedKey request{&limit, key};
  Decision each;
  return DecideAll({&request, 1}, cost, now, {&each, 1});
}

RedisStoreStats RedisStore::Stats() const { return impl_->Stats(); }

std::string RedisStore::RedisKey(const Limit& limit, std::string_view key) const {
  return impl_->RedisKey(limit, key);
}

}  // namespace sluice
