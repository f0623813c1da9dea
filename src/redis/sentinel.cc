#include "src/redis/sentinel.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "fmt/format.h"

#include "src/core/status.h"
#include "src/redis/connection.h"
#include "src/redis/url.h"

namespace sluice {
namespace internal {
namespace {

std::string_view Text(const redisReply& reply) {
  return reply.str != nullptr ? std::string_view(reply.str, reply.len) : std::string_view();
}

bool IsText(const redisReply& reply) {
  return reply.type == REDIS_REPLY_STRING || reply.type == REDIS_REPLY_STATUS;
}

std::optional<RedisEndpoint> Endpoint(std::string_view host, std::string_view port) {
  const std::optional<unsigned> number = WholeNumber(port);
  if (host.empty() || !number || *number < 1 || *number > 65535) {
    return std::nullopt;
  }
  return RedisEndpoint{.host = std::string(host), .port = static_cast<uint16_t>(*number)};
}

}  // namespace

bool IsMasterRole(const redisReply& reply) {
  return reply.type == REDIS_REPLY_ARRAY && reply.elements >= 1 && IsText(*reply.element[0]) &&
         Text(*reply.element[0]) == "master";
}

std::optional<RedisEndpoint> ReadMasterAddress(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 2 || !IsText(*reply.element[0]) ||
      !IsText(*reply.element[1])) {
    return std::nullopt;
  }
  return Endpoint(Text(*reply.element[0]), Text(*reply.element[1]));
}

std::optional<RedisEndpoint> ReadSwitchMaster(std::string_view payload,
                                              std::string_view master_name) {
  // Read from the end: the four addresses' fields hold no space, the name might.
  std::string_view fields[4];
  for (int i = 3; i >= 0; --i) {
    const size_t space = payload.rfind(' ');
    if (space == std::string_view::npos) {
      return std::nullopt;
    }
    fields[i] = payload.substr(space + 1);
    payload = payload.substr(0, space);
  }
  if (payload != master_name) {
    return std::nullopt;
  }
  return Endpoint(fields[2], fields[3]);
}

absl::Status CheckWhereRedisIs(const RedisStoreOptions& options) {
  const RedisSentinelOptions& sentinel = options.sentinel;
  if (sentinel.master_name.empty()) {
    if (!sentinel.endpoints.empty()) {
      return absl::InvalidArgumentError("sentinels are given without a master name");
    }
    return options.endpoints.empty() ? absl::InvalidArgumentError("the Redis store needs a host")
                                     : absl::OkStatus();
  }
  if (sentinel.endpoints.empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "Redis Sentinel: no sentinel is given to ask where master '{}' is", sentinel.master_name));
  }
  if (!options.endpoints.empty() || options.cluster) {
    return absl::InvalidArgumentError(
        "Redis Sentinel: the sentinels name the master; give no Redis endpoints and no cluster");
  }
  for (const RedisEndpoint& e : sentinel.endpoints) {
    if (!e.socket.empty() || e.host.empty()) {
      return absl::InvalidArgumentError("Redis Sentinel: each sentinel is a host and a port");
    }
  }
  return absl::OkStatus();
}

}  // namespace internal

namespace {

namespace asio = boost::asio;
using internal::Command;
using internal::ReplyPtr;

// How often a failing master makes the store ask a sentinel again.
constexpr auto kAskInterval = std::chrono::milliseconds(100);

// How long a sentinel has to connect and answer: as long as a connection has to open.
std::chrono::milliseconds AnswerTimeout(const RedisStoreOptions& options) {
  return std::max<std::chrono::milliseconds>(options.timeout, std::chrono::milliseconds(250));
}

}  // namespace

RedisStore::Impl::Sentinel::Sentinel(Impl& store)
    : store_(store),
      options_(store.options_.sentinel),
      backoff_(store.options_.backoff_min),
      timer_(store.io_) {}

RedisStore::Impl::Sentinel::~Sentinel() {
  if (reader_ != nullptr) {
    redisReaderFree(reader_);
  }
}

std::unique_ptr<RedisStore::Impl::Sentinel> RedisStore::Impl::Sentinel::Start(Impl& store) {
  if (store.options_.sentinel.master_name.empty()) {
    return nullptr;
  }
  auto node = std::make_unique<Node>();
  for (int i = 0; i < store.options_.connections; ++i) {
    node->connections.push_back(std::make_unique<Connection>(store, *node));
  }
  store.nodes_.push_back(std::move(node));
  store.last_error_ =
      fmt::format("no sentinel has named master '{}' yet", store.options_.sentinel.master_name);
  auto sentinel = std::make_unique<Sentinel>(store);
  sentinel->Open();
  return sentinel;
}

void RedisStore::Impl::Sentinel::AskAgain() {
  if (state_ != State::kWatching || store_.stopping_) {
    return;  // A question is on its way, or waits out a backoff.
  }
  const SteadyTime now = SteadyClock::now();
  if (now >= asked_at_ + kAskInterval) {
    Close();
    Open();
  } else if (!timer_armed_) {
    Arm(std::chrono::ceil<std::chrono::milliseconds>(asked_at_ + kAskInterval - now),
        &Sentinel::AskAgain);
  }
}

void RedisStore::Impl::Sentinel::Stop() {
  Disarm();
  Close();
}

std::string RedisStore::Impl::Sentinel::Here() const {
  return fmt::format("sentinel at {}", RedisEndpointName(options_.endpoints[at_]));
}

void RedisStore::Impl::Sentinel::Open() {
  state_ = State::kAsking;
  asked_at_ = SteadyClock::now();
  const uint64_t generation = generation_;
  stream_ = std::make_shared<internal::RedisStream>(
      store_.io_, options_.endpoints[at_], store_.tls_.get(), store_.options_.tls.verify_hostname);
  stream_->Connect([this, generation](absl::Status status) {
    if (generation != generation_) {
      return;
    }
    if (!status.ok()) {
      Next(status);
      return;
    }
    OnConnected();
  });
  Arm(AnswerTimeout(store_.options_), &Sentinel::TimedOut);
}

void RedisStore::Impl::Sentinel::TimedOut() {
  Next(absl::DeadlineExceededError(
      fmt::format("no answer within {} ms", AnswerTimeout(store_.options_).count())));
}

void RedisStore::Impl::Sentinel::OnConnected() {
  reader_ = internal::CreateReader();
  if (!options_.password.empty()) {
    Send(options_.user.empty() ? Command({"AUTH", options_.password})
                               : Command({"AUTH", options_.user, options_.password}),
         Expect::kAuth);
  }
  Send(Command({"SENTINEL", "get-master-addr-by-name", options_.master_name}), Expect::kAddress);
  Send(Command({"SUBSCRIBE", "+switch-master"}), Expect::kSubscribe);
  Read();
}

void RedisStore::Impl::Sentinel::Next(const absl::Status& why) {
  store_.last_error_ = fmt::format("{}: {}", Here(), std::string(why.message()));
  Close();
  Disarm();
  if (store_.stopping_) {
    return;
  }
  at_ = (at_ + 1) % options_.endpoints.size();
  if (++tried_ < options_.endpoints.size()) {
    Open();
    return;
  }
  tried_ = 0;  // A whole round without an answer: wait before the next.
  state_ = State::kIdle;
  Arm(backoff_, &Sentinel::Open);
  backoff_ = std::min(backoff_ * 2, store_.options_.backoff_max);
}

void RedisStore::Impl::Sentinel::Close() {
  ++generation_;
  if (stream_ != nullptr) {
    stream_->Close();
    stream_ = nullptr;
  }
  if (reader_ != nullptr) {
    redisReaderFree(reader_);
    reader_ = nullptr;
  }
  expected_.clear();
  writes_.Clear();
  state_ = State::kIdle;
}

void RedisStore::Impl::Sentinel::Send(std::string command, Expect expect) {
  writes_.Append(command);
  expected_.push_back(expect);
  Flush();
}

void RedisStore::Impl::Sentinel::Flush() {
  if (stream_ == nullptr) {
    return;  // Closed: nothing is queued then.
  }
  const uint64_t generation = generation_;
  writes_.Flush(
      *stream_, [this, generation] { return generation == generation_; },
      [this](boost::system::error_code ec) {
        Next(absl::UnavailableError(fmt::format("writing: {}", ec.message())));
      });
}

void RedisStore::Impl::Sentinel::Read() {
  const uint64_t generation = generation_;
  stream_->ReadSome(asio::buffer(in_), [this, generation](boost::system::error_code ec, size_t n) {
    if (generation != generation_) {
      return;
    }
    if (ec) {
      Next(absl::UnavailableError(ec == asio::error::eof ? std::string("closed the connection")
                                                         : ec.message()));
      return;
    }
    auto same = [this, generation] { return generation == generation_; };
    if (!internal::ReadReplies(
            *reader_, in_.data(), n, [this](ReplyPtr r) { OnReply(std::move(r)); }, same)) {
      Next(absl::UnavailableError("sent what is not RESP"));
      return;
    }
    if (same()) {
      Read();
    }
  });
}

void RedisStore::Impl::Sentinel::OnReply(ReplyPtr reply) {
  const bool error = reply->type == REDIS_REPLY_ERROR;
  const std::string_view text =
      reply->str != nullptr ? std::string_view(reply->str, reply->len) : std::string_view();
  if (expected_.empty()) {  // Subscribed: a message, ["message", channel, payload].
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 3 &&
        reply->element[2]->str != nullptr) {
      const std::string_view payload(reply->element[2]->str, reply->element[2]->len);
      if (std::optional<RedisEndpoint> to =
              internal::ReadSwitchMaster(payload, options_.master_name)) {
        SwitchTo(*to);
      }
    }
    return;
  }
  const Expect expect = expected_.front();
  expected_.pop_front();
  if (error) {
    Next(absl::UnavailableError(
        fmt::format("refused {}: {}", expect == Expect::kAuth ? "AUTH" : "a question", text)));
    return;
  }
  switch (expect) {
    case Expect::kAuth:
      return;
    case Expect::kAddress:
      if (std::optional<RedisEndpoint> master = internal::ReadMasterAddress(*reply)) {
        tried_ = 0;
        backoff_ = store_.options_.backoff_min;
        SwitchTo(*master);
      } else {
        Next(
            absl::UnavailableError(fmt::format("does not know master '{}'", options_.master_name)));
      }
      return;
    case Expect::kSubscribe:
      state_ = State::kWatching;
      Disarm();
      return;
  }
}

void RedisStore::Impl::Sentinel::SwitchTo(const RedisEndpoint& master) {
  Node& node = *store_.nodes_.front();
  if (master_known_ && node.endpoint == master) {
    return;
  }
  const absl::Status moved = absl::UnavailableError(
      master_known_
          ? fmt::format("the Redis master moved from {} to {}", RedisEndpointName(node.endpoint),
                        RedisEndpointName(master))
          : fmt::format("connecting to the Redis master at {}", RedisEndpointName(master)));
  if (master_known_) {
    store_.master_switches_.fetch_add(1, std::memory_order_relaxed);
    store_.health_.Moved(RedisEndpointName(node.endpoint),
                         fmt::format("{} (sentinel)", internal::Message(moved)));
  }
  master_known_ = true;
  node.endpoint = master;
  for (auto& c : node.connections) {
    c->Restart(moved);
  }
  store_.Dispatch();
}

void RedisStore::Impl::Sentinel::Arm(std::chrono::milliseconds delay, void (Sentinel::*then)()) {
  timer_armed_ = true;
  const uint64_t generation = ++timer_generation_;
  timer_.expires_after(delay);
  timer_.async_wait([this, generation, then](boost::system::error_code ec) {
    if (ec || generation != timer_generation_ || store_.stopping_) {
      return;  // Cancelled, or armed again since.
    }
    timer_armed_ = false;
    (this->*then)();
  });
}

void RedisStore::Impl::Sentinel::Disarm() {
  timer_armed_ = false;
  ++timer_generation_;
  timer_.cancel();
}

}  // namespace sluice
