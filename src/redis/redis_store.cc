#include "sluice/redis_store.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <cctype>
#include <charconv>
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
#include "src/core/mutex.h"

namespace sluice {
namespace internal {
extern const std::string_view kRedisDecideScript;  // src/redis/decide.lua, built in by CMake.
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

// `text` as a whole non-negative number: nullopt for anything else (empty, a sign, a space,
// trailing text, overflow).
std::optional<unsigned> WholeNumber(std::string_view text) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
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
    const std::optional<unsigned> value = WholeNumber(port);
    if (!value || *value < 1 || *value > 65535) {
      return bad(fmt::format("port '{}' is not a number from 1 to 65535", port));
    }
    endpoint.port = static_cast<uint16_t>(*value);
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
  std::vector<Limit> limits;      // For the local fallback (empty for leases).
  std::vector<std::string> keys;  // The caller's keys: the local fallback, the reply's size.
  // A request of leases (Store::LeaseAll) instead of limits.
  std::optional<LeaseOp> lease_op;
  std::vector<int64_t> capacities;
  std::string lease_id;
  Micros lease_ttl{0};
  std::string keys_resp;  // The Redis keys, framed.
  std::string args_resp;  // This request's part of ARGV, framed.
  int64_t cost = 0;
  Timestamp now;
  std::span<Decision> each;
  DecideDone done;
  SteadyTime deadline;
  int slot = -1;      // The Redis Cluster hash slot of its keys; -1 outside a cluster.
  int redirects = 0;  // MOVED, ASK and TRYAGAIN followed so far.
};
using CallPtr = std::unique_ptr<Call>;
constexpr int kArgsPerLimit = 7;  // Also per key of a request of leases.
constexpr int kLeaseCode = 7;     // In place of the algorithm: see src/redis/decide.lua.
constexpr int kArgsPerCall = 3;

// Script calls in flight on a connection, and the handshake before them.
struct Pending {
  enum class Kind { kAuth, kSelect, kScriptLoad, kSlots, kAsking, kBatch };
  Kind kind;
  std::vector<CallPtr> calls;  // kBatch
  std::string command;         // kBatch: sent again after a NOSCRIPT or a redirection.
  bool retried = false;        // kBatch: NOSCRIPT seen once already.
  bool asking = false;         // kBatch: sent after ASKING (an ASK brought it here).
  SteadyTime deadline;
};

// A call that keeps being redirected is given up; TRYAGAIN (keys split by a migration) and a
// call's second and later redirections are followed after a pause; the slot map is asked for
// at most this often.
constexpr int kMaxRedirects = 5;
constexpr auto kTryAgainPause = std::chrono::milliseconds(10);
constexpr auto kSlotsInterval = std::chrono::milliseconds(100);
constexpr int kSlotCount = 16384;

// CRC16-CCITT (XMODEM), the checksum Redis Cluster maps keys to slots with.
uint16_t Crc16(std::string_view s) {
  uint16_t crc = 0;
  for (char c : s) {
    crc ^= static_cast<uint16_t>(static_cast<unsigned char>(c) << 8);
    for (int i = 0; i < 8; ++i) {
      crc = (crc & 0x8000) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<uint16_t>(crc << 1);
    }
  }
  return crc;
}

// The slot Redis Cluster puts a key in: of its hash tag if it has one, else of the whole key.
int HashSlot(std::string_view key) { return Crc16(HashTag(key).value_or(key)) % kSlotCount; }

// "MOVED 3999 127.0.0.1:6381" and "ASK 3999 127.0.0.1:6381": the slot and where it is now.
std::optional<std::pair<int, RedisEndpoint>> Redirection(std::string_view error) {
  const size_t first = error.find(' ');
  const size_t second = error.find(' ', first + 1);
  const size_t colon = error.rfind(':');
  if (first == std::string_view::npos || second == std::string_view::npos ||
      colon == std::string_view::npos || colon < second) {
    return std::nullopt;
  }
  const std::optional<unsigned> slot = WholeNumber(error.substr(first + 1, second - first - 1));
  const std::optional<unsigned> port = WholeNumber(error.substr(colon + 1));
  if (!slot || !port || *slot >= kSlotCount || *port == 0 || *port > 65535) {
    return std::nullopt;
  }
  return std::pair{static_cast<int>(*slot),
                   RedisEndpoint{std::string(error.substr(second + 1, colon - second - 1)),
                                 static_cast<uint16_t>(*port)}};
}

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
      const std::optional<unsigned> value = WholeNumber(db);
      if (!value || *value > static_cast<unsigned>(std::numeric_limits<int>::max())) {
        return bad(fmt::format("database '{}' is not a number", db));
      }
      options.database = static_cast<int>(*value);
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
    if (options_.cluster) {
      slot_owner_.assign(kSlotCount, nullptr);
    }
    thread_ = std::thread([this] { io_.run(); });
    asio::post(io_, [this] {
      for (const RedisEndpoint& endpoint : options_.endpoints) {
        NodeAt(endpoint);
      }
    });
  }

  ~Impl() {
    asio::post(io_, [this] { Shutdown(); });
    work_.reset();
    thread_.join();
  }

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
    AppendTaggedKey(out, key);
    return out;
  }

  // `key` with a Redis Cluster hash tag, in one of three forms, each starting with its own
  // character, so that no two caller keys share a Redis key ("alice" and "{alice}" differ).
  static void AppendTaggedKey(std::string& out, std::string_view key) {
    if (HashTag(key)) {
      out += '=';  // The caller chose the slot with a tag of its own.
      out += key;
    } else if (key.find('}') == std::string_view::npos) {
      out += '{';
      out += key;
      out += '}';
    } else {
      // No tag and a '}' that would end one early: tag with a digest of the key instead.
      out += fmt::format("#{{{:016x}}}", StableHash(key));
      out += key;
    }
  }

  // A call with its deadline and the head of its part of ARGV: time, cost (or a lease op),
  // and the number of keys.
  CallPtr NewCall(int64_t cost, size_t keys, Timestamp now, std::span<Decision> each,
                  DecideDone done) const {
    auto call = std::make_unique<Call>();
    call->cost = cost;
    call->now = now;
    call->each = each;
    call->done = std::move(done);
    call->deadline = SteadyClock::now() + options_.timeout;
    call->keys.reserve(keys);
    if (options_.use_caller_time) {
      AppendBulk(call->args_resp, now.time_since_epoch().count());
    } else {
      AppendBulk(call->args_resp, "");
    }
    AppendBulk(call->args_resp, cost);
    AppendBulk(call->args_resp, static_cast<int64_t>(keys));
    return call;
  }

  void Submit(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
              std::span<Decision> each, DecideDone done) {
    CallPtr call = NewCall(cost, requests.size(), now, each, std::move(done));
    call->limits.reserve(requests.size());
    for (const LimitedKey& r : requests) {
      const Limit& l = *r.limit;
      const std::string redis_key = RedisKey(l, r.key);
      if (!SameSlot(*call, redis_key, r.key)) {
        return;
      }
      AppendBulk(call->keys_resp, redis_key);
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
    Enqueue(std::move(call));
  }

  void SubmitLeases(LeaseOp op, std::span<const LeasedKey> keys, std::string_view id, Micros ttl,
                    Timestamp now, std::span<Decision> each, DecideDone done) {
    CallPtr call = NewCall(static_cast<int64_t>(op), keys.size(), now, each, std::move(done));
    call->lease_op = op;
    call->lease_id = id;
    call->lease_ttl = ttl;
    for (const LeasedKey& k : keys) {
      const std::string redis_key = LeaseKey(k.key);
      if (!SameSlot(*call, redis_key, k.key)) {
        return;
      }
      AppendBulk(call->keys_resp, redis_key);
      AppendBulk(call->args_resp, kLeaseCode);
      AppendBulk(call->args_resp, k.capacity);
      AppendBulk(call->args_resp, ttl.count());
      AppendBulk(call->args_resp, id);
      for (int unused = 0; unused < 3; ++unused) {
        AppendBulk(call->args_resp, int64_t{0});
      }
      call->capacities.push_back(k.capacity);
      call->keys.emplace_back(k.key);
    }
    Enqueue(std::move(call));
  }

  // The Redis key of `key`'s leases. Without the capacity: a rule whose concurrency changes
  // keeps the leases that are out.
  std::string LeaseKey(std::string_view key) const {
    std::string out = options_.key_prefix;
    out += "lease:";
    AppendTaggedKey(out, key);
    return out;
  }

  void Enqueue(CallPtr call) {
    calls_.fetch_add(1, std::memory_order_relaxed);
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

  // In a cluster, whether `redis_key` is in the slot of the call's keys so far (and if so,
  // the call's slot is its); when not, fails the call.
  bool SameSlot(Call& call, const std::string& redis_key, std::string_view key) {
    if (!options_.cluster) {
      return true;
    }
    const int slot = HashSlot(redis_key);
    if (call.slot >= 0 && slot != call.slot) {
      std::move(call.done)(absl::InvalidArgumentError(
          fmt::format("keys '{}' and '{}' are in different Redis Cluster slots, and one request "
                      "is decided in one slot: give them the same {{tag}}, as in '{{user}}:ip'",
                      call.keys.front(), key)));
      return false;
    }
    call.slot = slot;
    return true;
  }

  RedisStoreStats Stats() const {
    return {.calls = calls_.load(std::memory_order_relaxed),
            .script_calls = script_calls_.load(std::memory_order_relaxed),
            .failures = failures_.load(std::memory_order_relaxed),
            .fallbacks = fallbacks_.load(std::memory_order_relaxed),
            .reconnects = reconnects_.load(std::memory_order_relaxed),
            .redirects = redirects_.load(std::memory_order_relaxed),
            .asks = asks_.load(std::memory_order_relaxed),
            .connections_ready = ready_.load(std::memory_order_relaxed)};
  }

 private:
  class Connection;

  // One Redis server: a standalone server, or a cluster node, with its connections and the
  // calls waiting to be sent to it.
  struct Node {
    RedisEndpoint endpoint;
    std::vector<std::unique_ptr<Connection>> connections;
    std::deque<CallPtr> queue;
    std::deque<Pending> asked;  // Batches an ASK sent here, to go first, after ASKING.
  };

  // The node at `endpoint`, connecting to it the first time it is named.
  Node& NodeAt(const RedisEndpoint& endpoint) {
    for (auto& node : nodes_) {
      if (node->endpoint == endpoint) {
        return *node;
      }
    }
    auto node = std::make_unique<Node>();
    node->endpoint = endpoint;
    for (int i = 0; i < options_.connections; ++i) {
      node->connections.push_back(std::make_unique<Connection>(*this, *node));
    }
    nodes_.push_back(std::move(node));
    for (auto& c : nodes_.back()->connections) {
      c->Connect();
    }
    return *nodes_.back();
  }

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
          if (call.lease_op) {
            absl::InlinedVector<LeasedKey, 4> keys;
            for (size_t i = 0; i < call.keys.size(); ++i) {
              keys.push_back({call.keys[i], call.capacities[i]});
            }
            result = local_.LeaseAll(*call.lease_op, keys, call.lease_id, call.lease_ttl, call.now,
                                     call.each);
            break;
          }
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
        Route(std::move(c));
      }
    }
    Dispatch();
  }

  // Puts a call in the queue of the node that serves its slot (or, in a cluster whose slot
  // map does not name one, aside until a fresh map does). Queues stay in deadline order, which
  // is the order calls were made: a redirected call goes back ahead of later ones, and the
  // deadline timer need only look at each queue's front.
  void Route(CallPtr call) {
    std::deque<CallPtr>* queue = &unrouted_;
    if (!options_.cluster) {
      queue = &nodes_.front()->queue;
    } else if (Node* owner = slot_owner_[static_cast<size_t>(call->slot)]; owner != nullptr) {
      queue = &owner->queue;
    }
    if (queue->empty() || queue->back()->deadline <= call->deadline) {
      queue->push_back(std::move(call));
      return;
    }
    const auto at = std::upper_bound(
        queue->begin(), queue->end(), call->deadline,
        [](SteadyTime deadline, const CallPtr& queued) { return deadline < queued->deadline; });
    queue->insert(at, std::move(call));
  }

  // Sends what waits on the connections that have room, a batch per script call.
  void Dispatch() {
    for (auto& node : nodes_) {
      DispatchTo(*node);
    }
    if (options_.cluster && !unrouted_.empty()) {
      RefreshSlots();
      if (!AnyConnectionUsable()) {
        FailAll(unrouted_, NoConnection());
      }
    }
    ArmTimer();
  }

  void DispatchTo(Node& node) {
    auto least_busy = [&]() -> Connection* {
      Connection* best = nullptr;
      for (auto& c : node.connections) {
        if (c->ready() && c->batches() < options_.pipeline &&
            (best == nullptr || c->batches() < best->batches())) {
          best = c.get();
        }
      }
      return best;
    };
    while (!node.asked.empty()) {
      Connection* c = least_busy();
      if (c == nullptr) {
        break;
      }
      c->Send(std::move(node.asked.front()), /*asking=*/true);
      node.asked.pop_front();
    }
    while (!node.queue.empty()) {
      Connection* c = least_busy();
      if (c == nullptr) {
        break;
      }
      // In a cluster one script call touches one slot: batch the calls of the first one's.
      Pending batch{.kind = Pending::Kind::kBatch};
      const int slot = node.queue.front()->slot;
      for (auto it = node.queue.begin();
           it != node.queue.end() && batch.calls.size() < static_cast<size_t>(options_.batch);) {
        if ((*it)->slot == slot) {
          batch.calls.push_back(std::move(*it));
          it = node.queue.erase(it);
        } else {
          ++it;
        }
      }
      batch.command = BatchCommand(batch.calls);
      batch.deadline = batch.calls.front()->deadline;
      c->Send(std::move(batch), /*asking=*/false);
    }
    if ((!node.queue.empty() || !node.asked.empty()) &&
        std::none_of(node.connections.begin(), node.connections.end(),
                     [](const auto& c) { return c->opening() || c->ready(); })) {
      // Every connection to it is waiting out a backoff: fail now rather than at the deadline.
      FailAll(node.queue, NoConnection());
      for (Pending& p : node.asked) {
        FailAll(p.calls, NoConnection());
      }
      node.asked.clear();
      if (options_.cluster) {
        RefreshSlots();  // It may have failed over.
      }
    }
  }

  bool AnyConnectionUsable() const {
    for (const auto& node : nodes_) {
      for (const auto& c : node->connections) {
        if (c->opening() || c->ready()) {
          return true;
        }
      }
    }
    return false;
  }

  absl::Status NoConnection() const {
    return absl::UnavailableError(fmt::format("no connection to Redis: {}", last_error_));
  }

  std::string BatchCommand(const std::vector<CallPtr>& calls) const {
    size_t keys = 0;
    size_t args = 2;
    size_t bytes = 128;
    for (const CallPtr& c : calls) {
      keys += c->keys.size();
      args += kArgsPerCall + kArgsPerLimit * c->keys.size();
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

  template <typename Calls>
  void FailAll(Calls& calls, const absl::Status& status) {
    Calls failing;
    failing.swap(calls);
    for (CallPtr& c : failing) {
      Complete(*c, status);
    }
  }

  // Asks a ready connection for the cluster's slot map: one question at a time, and at most
  // one per kSlotsInterval (a later wish is granted when the interval is up).
  void RefreshSlots() {
    if (!options_.cluster || slots_asked_ || slots_timer_armed_ || stopping_) {
      return;
    }
    const SteadyTime now = SteadyClock::now();
    if (now < slots_asked_at_ + kSlotsInterval) {
      slots_timer_armed_ = true;
      slots_timer_.expires_at(slots_asked_at_ + kSlotsInterval);
      slots_timer_.async_wait([this](boost::system::error_code ec) {
        slots_timer_armed_ = false;
        if (!ec) {
          RefreshSlots();
        }
      });
      return;
    }
    for (auto& node : nodes_) {
      for (auto& c : node->connections) {
        if (c->ready()) {
          slots_asked_ = true;
          slots_asked_at_ = now;
          c->AskSlots();
          return;
        }
      }
    }
  }

  // CLUSTER SLOTS: [[first, last, [host, port, id], replicas...], ...].
  void OnSlots(const redisReply& reply, const RedisEndpoint& asked) {
    slots_asked_ = false;
    if (reply.type != REDIS_REPLY_ARRAY) {
      return;
    }
    slots_known_ = true;
    std::fill(slot_owner_.begin(), slot_owner_.end(), nullptr);
    for (size_t i = 0; i < reply.elements; ++i) {
      const redisReply* range = reply.element[i];
      if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
          range->element[2]->type != REDIS_REPLY_ARRAY || range->element[2]->elements < 2) {
        continue;
      }
      const redisReply* master = range->element[2];
      RedisEndpoint endpoint{
          .host = master->element[0]->str != nullptr ? master->element[0]->str : "",
          .port = static_cast<uint16_t>(master->element[1]->integer)};
      if (endpoint.host.empty() || endpoint.host == "?") {
        endpoint.host = asked.host;  // The node does not know its own address: the one we used.
      }
      Node* owner = &NodeAt(endpoint);
      const long long first = std::clamp<long long>(range->element[0]->integer, 0, kSlotCount - 1);
      const long long last = std::clamp<long long>(range->element[1]->integer, 0, kSlotCount - 1);
      for (long long slot = first; slot <= last; ++slot) {
        slot_owner_[static_cast<size_t>(slot)] = owner;
      }
    }
    // Calls queued by the old map go where the new one says.
    std::deque<CallPtr> all;
    all.swap(unrouted_);
    for (auto& node : nodes_) {
      for (CallPtr& c : node->queue) {
        all.push_back(std::move(c));
      }
      node->queue.clear();
    }
    for (CallPtr& c : all) {
      Route(std::move(c));
    }
    // A slot the fresh map gives no node: nothing can decide it now.
    std::deque<CallPtr> unserved;
    unserved.swap(unrouted_);
    for (CallPtr& c : unserved) {
      Complete(*c, absl::UnavailableError(
                       fmt::format("no node of the Redis Cluster serves slot {}", c->slot)));
    }
  }

  // CLUSTER SLOTS refused (a server without cluster support): what waits for the map fails.
  void OnSlotsRefused(std::string_view error) {
    slots_asked_ = false;
    last_error_ = fmt::format("Redis refused CLUSTER SLOTS: {}", error);
    FailAll(unrouted_, absl::UnavailableError(last_error_));
  }

  // A batch's calls were redirected (MOVED: the slot has a new owner; ASK: one call's worth
  // while it migrates; TRYAGAIN: keys split mid-migration) or a batch failed as a whole.
  void Redirect(Pending batch, std::string_view error) {
    redirects_.fetch_add(1, std::memory_order_relaxed);
    bool given_up = false;
    bool again = false;  // A call already redirected before.
    for (CallPtr& c : batch.calls) {
      again = c->redirects > 0 || again;
      given_up = ++c->redirects > kMaxRedirects || given_up;
    }
    if (given_up) {
      FailAll(batch.calls,
              absl::UnavailableError(
                  fmt::format("redis: still redirected after {} tries: {}", kMaxRedirects, error)));
      return;
    }
    const std::optional<std::pair<int, RedisEndpoint>> to = Redirection(error);
    if (error.starts_with("MOVED") && to) {
      slot_owner_[static_cast<size_t>(to->first)] = &NodeAt(to->second);
      RefreshSlots();  // Other slots may have moved too.
    } else if (error.starts_with("ASK") && to) {
      asks_.fetch_add(1, std::memory_order_relaxed);
      NodeAt(to->second).asked.push_back(std::move(batch));
      return;
    }
    if (again || !error.starts_with("MOVED") || !to) {
      // TRYAGAIN: the keys are split between two nodes for a moment. A second redirection:
      // the nodes disagree for a moment while a slot's new owner is announced to each in turn
      // (a MOVED from the old owner to a new one that still sends it back). Either way, ask
      // again shortly rather than spend every try within a millisecond.
      auto timer = std::make_shared<asio::steady_timer>(io_, kTryAgainPause);
      auto calls = std::make_shared<std::vector<CallPtr>>(std::move(batch.calls));
      timer->async_wait([this, timer, calls](boost::system::error_code) {
        for (CallPtr& c : *calls) {
          if (stopping_) {
            Complete(*c, absl::CancelledError("the Redis store is shutting down"));
          } else {
            Route(std::move(c));
          }
        }
        Dispatch();
      });
      return;
    }
    for (CallPtr& c : batch.calls) {
      Route(std::move(c));
    }
  }

  // One timer for every deadline: the earliest among the queues' fronts and each connection's
  // oldest script call or connection attempt (each list is in deadline order).
  void ArmTimer() {
    std::optional<SteadyTime> earliest;
    auto consider = [&](std::optional<SteadyTime> t) {
      if (t && (!earliest || *t < *earliest)) {
        earliest = t;
      }
    };
    if (!unrouted_.empty()) {
      consider(unrouted_.front()->deadline);
    }
    for (auto& node : nodes_) {
      if (!node->queue.empty()) {
        consider(node->queue.front()->deadline);
      }
      for (const Pending& p : node->asked) {
        consider(p.deadline);
      }
      for (auto& c : node->connections) {
        consider(c->deadline());
      }
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
    auto expire = [&](std::deque<CallPtr>& queue) {
      while (!queue.empty() && queue.front()->deadline <= now) {
        CallPtr c = std::move(queue.front());
        queue.pop_front();
        Complete(*c, absl::DeadlineExceededError(timeout));
      }
    };
    expire(unrouted_);
    for (auto& node : nodes_) {
      for (auto& c : node->connections) {
        if (std::optional<SteadyTime> d = c->deadline(); d && *d <= now) {
          c->Fail(absl::DeadlineExceededError(timeout));
        }
      }
      expire(node->queue);
      for (auto it = node->asked.begin(); it != node->asked.end();) {
        if (it->deadline <= now) {
          FailAll(it->calls, absl::DeadlineExceededError(timeout));
          it = node->asked.erase(it);
        } else {
          ++it;
        }
      }
    }
    ArmTimer();
  }

  void Shutdown() {
    stopping_ = true;
    timer_.cancel();
    slots_timer_.cancel();
    const absl::Status status = absl::CancelledError("the Redis store is shutting down");
    for (auto& node : nodes_) {
      for (auto& c : node->connections) {
        c->Close(status);
      }
      FailAll(node->queue, status);
      for (Pending& p : node->asked) {
        FailAll(p.calls, status);
      }
      node->asked.clear();
    }
    FailAll(unrouted_, status);
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
      if (at + 5 * c->keys.size() > reply.elements) {
        Complete(*c, absl::InternalError("redis: the script's reply is short"));
        continue;
      }
      for (size_t i = 0; i < c->keys.size(); ++i, at += 5) {
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
    Connection(Impl& store, Node& node)
        : store_(store),
          node_(node),
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

    // The deadline of the oldest thing this connection waits for. A NOSCRIPT or ASK resend puts
    // an older batch behind newer ones, so look at them all (at most `pipeline`, and a few
    // commands of the store's own).
    std::optional<SteadyTime> deadline() const {
      std::optional<SteadyTime> earliest;
      for (const Pending& p : pending_) {
        earliest = earliest ? std::min(*earliest, p.deadline) : p.deadline;
      }
      if (!earliest && state_ == State::kOpening) {
        return open_deadline_;
      }
      return earliest;
    }

    void Connect() {
      state_ = State::kOpening;
      open_deadline_ =
          SteadyClock::now() +
          std::max<SteadyClock::duration>(store_.options_.timeout, std::chrono::milliseconds(250));
      const uint64_t generation = generation_;
      const RedisEndpoint& endpoint = node_.endpoint;
      resolver_.async_resolve(
          endpoint.host, std::to_string(endpoint.port),
          [this, generation](boost::system::error_code ec, tcp::resolver::results_type results) {
            if (generation != generation_) {
              return;
            }
            if (ec) {
              Fail(absl::UnavailableError(
                  fmt::format("cannot resolve {}: {}", node_.endpoint.host, ec.message())));
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
                                                            node_.endpoint.host,
                                                            node_.endpoint.port, ec.message())));
                    return;
                  }
                  OnConnected();
                });
          });
      store_.ArmTimer();
    }

    // Sends a batch; after ASKING when an ASK redirected it here.
    void Send(Pending batch, bool asking) {
      batch.asking = asking;
      if (asking) {
        Control(Pending::Kind::kAsking, Command({"ASKING"}), batch.deadline);
      }
      ++batches_;
      store_.script_calls_.fetch_add(1, std::memory_order_relaxed);
      out_ += batch.command;
      pending_.push_back(std::move(batch));
      Flush();
    }

    void AskSlots() {
      Control(Pending::Kind::kSlots, Command({"CLUSTER", "SLOTS"}),
              SteadyClock::now() + store_.options_.timeout);
    }

    // Closes the socket and fails everything in flight with `status`; reconnects after the
    // backoff unless the store is stopping.
    void Fail(const absl::Status& status) {
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
      if (state_ == State::kReady) {
        store_.ready_.fetch_sub(1, std::memory_order_relaxed);
      }
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
        if (p.kind == Pending::Kind::kSlots) {
          store_.slots_asked_ = false;
        }
        store_.FailAll(p.calls, status);
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
        Control(
            Pending::Kind::kAuth,
            o.user.empty() ? Command({"AUTH", o.password}) : Command({"AUTH", o.user, o.password}),
            open_deadline_);
      }
      if (o.database != 0) {
        Control(Pending::Kind::kSelect, Command({"SELECT", std::to_string(o.database)}),
                open_deadline_);
      }
      Control(Pending::Kind::kScriptLoad, Command({"SCRIPT", "LOAD", Script()}), open_deadline_);
      Read();
    }

    // A command of the store's own (not a batch), answered in order with the rest.
    void Control(Pending::Kind kind, std::string command, SteadyTime deadline) {
      out_ += command;
      pending_.push_back({.kind = kind, .deadline = deadline});
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
        case Pending::Kind::kAsking:
          return;  // +OK; the batch behind it carries the answer.
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
            backoff_ = store_.options_.backoff_min;
            store_.ready_.fetch_add(1, std::memory_order_relaxed);
            if (store_.options_.cluster && !store_.slots_known_) {
              store_.RefreshSlots();  // Learn the map before the first call needs it.
            }
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
        Control(Pending::Kind::kScriptLoad, Command({"SCRIPT", "LOAD", Script()}), p.deadline);
        if (p.asking) {
          Control(Pending::Kind::kAsking, Command({"ASKING"}), p.deadline);
        }
        ++batches_;
        out_ += p.command;
        pending_.push_back(std::move(p));
        Flush();
        return;
      }
      const bool redirected =
          text.starts_with("MOVED ") || text.starts_with("ASK ") || text.starts_with("TRYAGAIN");
      if (error && redirected && store_.options_.cluster) {
        store_.Redirect(std::move(p), text);
      } else if (error && redirected) {
        store_.FailAll(p.calls, absl::UnavailableError(fmt::format(
                                    "redis: {}: this server is a Redis Cluster node; use "
                                    "redis+cluster:// to follow its redirections",
                                    text)));
      } else if (error) {
        // The whole call failed (OOM, BUSY, LOADING, READONLY, CLUSTERDOWN...): Redis is not
        // deciding.
        store_.FailAll(p.calls, absl::UnavailableError(fmt::format("redis: {}", text)));
      } else {
        store_.CompleteBatch(p.calls, *reply);
      }
      store_.Dispatch();
    }

    Impl& store_;
    Node& node_;
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

  // Calls made on other threads, taken into the queues by the I/O thread.
  internal::Mutex incoming_mu_;
  std::vector<CallPtr> incoming_ ABSL_GUARDED_BY(incoming_mu_);
  bool take_scheduled_ ABSL_GUARDED_BY(incoming_mu_) = false;

  // The I/O thread's own.
  std::vector<std::unique_ptr<Node>> nodes_;  // Never shrinks: connections point at nodes.
  std::vector<Node*> slot_owner_;             // Cluster: the node serving each slot.
  std::deque<CallPtr> unrouted_;              // Cluster: calls whose slot has no known owner.
  bool slots_asked_ = false;                  // A CLUSTER SLOTS is in flight.
  bool slots_known_ = false;                  // One has been answered.
  SteadyTime slots_asked_at_;                 // When the last one was asked.
  asio::steady_timer slots_timer_{io_};       // Waits out kSlotsInterval before the next.
  bool slots_timer_armed_ = false;
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
  std::atomic<uint64_t> redirects_{0};
  std::atomic<uint64_t> asks_{0};
  std::atomic<int> ready_{0};
};

// ---------------------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<RedisStore>> RedisStore::Create(RedisStoreOptions options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("the Redis store needs a host");
  }
  if (options.cluster && options.database != 0) {
    return absl::InvalidArgumentError("a Redis Cluster has only database 0");
  }
  if (options.connections < 1 || options.pipeline < 1 || options.batch < 1) {
    return absl::InvalidArgumentError("connections, pipeline and batch must each be at least 1");
  }
  if (options.timeout <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError("the Redis timeout must be positive");
  }
  if (options.expiry_margin < std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError("the expiry margin must not be negative");
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

void RedisStore::LeaseAllAsync(LeaseOp op, std::span<const LeasedKey> keys, std::string_view id,
                               Micros ttl, Timestamp now, std::span<Decision> each,
                               DecideDone done) {
  assert(each.size() == keys.size());
  if (absl::Status s = ValidateLeases(op, keys, id, ttl); !s.ok()) {
    std::move(done)(s);
    return;
  }
  impl_->SubmitLeases(op, keys, id, ttl, now, each, std::move(done));
}

absl::StatusOr<Decision> RedisStore::LeaseAll(LeaseOp op, std::span<const LeasedKey> keys,
                                              std::string_view id, Micros ttl, Timestamp now,
                                              std::span<Decision> each) {
  std::promise<absl::StatusOr<Decision>> promise;
  std::future<absl::StatusOr<Decision>> result = promise.get_future();
  LeaseAllAsync(op, keys, id, ttl, now, each,
                [&promise](absl::StatusOr<Decision> r) { promise.set_value(std::move(r)); });
  return result.get();
}

std::string RedisStore::LeaseKey(std::string_view key) const { return impl_->LeaseKey(key); }

RedisStoreStats RedisStore::Stats() const { return impl_->Stats(); }

std::string RedisStore::RedisKey(const Limit& limit, std::string_view key) const {
  return impl_->RedisKey(limit, key);
}

}  // namespace sluice
