// RedisStore's own functions (include/sluice/redis_store.h): Create's checks, the limits it
// refuses, the checks of every request, and the calls, each handed to the engine
// (RedisStore::Impl, redis_store_impl.h); the synchronous ones wait for the asynchronous.

#include <algorithm>
#include <cassert>
#include <future>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "boost/asio/ssl/context.hpp"
#include "fmt/format.h"

#include "sluice/algorithms.h"
#include "sluice/redis_store.h"
#include "src/redis/call.h"
#include "src/redis/redis_store_impl.h"
#include "src/redis/sentinel.h"
#include "src/redis/stream.h"

namespace sluice {
namespace internal {
extern const std::string_view kRedisDecideScript;  // src/redis/decide.lua, built in by CMake.
}  // namespace internal

namespace {

namespace asio = boost::asio;

// One script call reads every bucket of a sliding_buckets key; keep that bounded.
constexpr int64_t kMaxRedisBuckets = 10'000;

// Makes an asynchronous call through `call` and waits for its answer.
template <typename Call>
absl::StatusOr<Decision> Wait(Call call) {
  std::promise<absl::StatusOr<Decision>> promise;
  std::future<absl::StatusOr<Decision>> result = promise.get_future();
  call([&promise](absl::StatusOr<Decision> r) { promise.set_value(std::move(r)); });
  return result.get();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisStore>> RedisStore::Create(RedisStoreOptions options) {
  if (absl::Status s = internal::CheckWhereRedisIs(options); !s.ok()) {
    return s;
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
  if (absl::Status s =
          internal::DenyCache::CheckOptions(options.deny_cache_entries, options.deny_cache_max_ttl);
      !s.ok()) {
    return s;
  }
  if (options.key_prefix.find_first_of("{}") != std::string::npos) {
    return absl::InvalidArgumentError("the key prefix may not contain '{' or '}'");
  }
  if (options.backoff_min <= std::chrono::milliseconds(0) ||
      options.backoff_max < options.backoff_min) {
    return absl::InvalidArgumentError("backoff_min must be positive and at most backoff_max");
  }
  const bool unix_socket = std::any_of(options.endpoints.begin(), options.endpoints.end(),
                                       [](const RedisEndpoint& e) { return !e.socket.empty(); });
  if (unix_socket && (options.cluster || options.tls.enabled)) {
    return absl::InvalidArgumentError(
        "a unix socket is for one Redis server, without TLS: not a cluster, not rediss://");
  }
  absl::StatusOr<std::unique_ptr<asio::ssl::context>> tls = internal::RedisTlsContext(options.tls);
  if (!tls.ok()) {
    return tls.status();
  }
  return std::unique_ptr<RedisStore>(
      new RedisStore(std::make_unique<Impl>(std::move(options), *std::move(tls))));
}

RedisStore::RedisStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RedisStore::~RedisStore() = default;

std::string_view RedisStore::Script() { return internal::kRedisDecideScript; }

namespace {

absl::Status CheckRecordName(std::string_view name) {
  if (name.empty() || name.find_first_of("{}") != std::string_view::npos) {
    return absl::InvalidArgumentError(
        fmt::format("record name '{}': must be non-empty, without '{{' or '}}'", name));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RedisStore::Record> RedisStore::ReadRecord(std::string_view name) {
  if (absl::Status s = CheckRecordName(name); !s.ok()) {
    return s;
  }
  // A part at a time (HSCAN), each call short; a field HSCAN gives twice (the hash grew
  // meanwhile) is kept once.
  Record parts;
  std::string cursor = "0";
  do {
    const std::string from = cursor;
    const absl::StatusOr<Decision> done = Wait(
        [&](DecideDone d) { impl_->SubmitRecord(name, from, {}, &parts, &cursor, std::move(d)); });
    if (!done.ok()) {
      return done.status();
    }
  } while (cursor != "0");
  absl::flat_hash_map<std::string, std::string> fields(parts.begin(), parts.end());
  return Record(fields.begin(), fields.end());
}

absl::Status RedisStore::WriteRecord(std::string_view name,
                                     std::span<const std::pair<std::string, std::string>> fields) {
  if (absl::Status s = CheckRecordName(name); !s.ok()) {
    return s;
  }
  if (fields.empty()) {
    return absl::OkStatus();
  }
  return Wait([&](DecideDone d) {
           impl_->SubmitRecord(name, "0", fields, nullptr, nullptr, std::move(d));
         })
      .status();
}

absl::Status RedisStore::CheckLimit(const Limit& limit) const { return Supports(limit); }

bool RedisStore::HoldsState(const Limit& limit, Timestamp now) {
  return impl_->local().HoldsState(limit, now);
}

absl::Status RedisStore::Supports(const Limit& limit) {
  if (absl::Status s = MemoryStore::Supports(limit); !s.ok()) {
    return s;
  }
  if (UsesBurst(limit.algorithm()) &&
      Int128{limit.burst()} * limit.rate_period_us() > internal::kMaxExactProduct) {
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

// What every request of limits is checked for before it is framed.
absl::Status RedisStore::CheckRequest(std::span<const LimitedKey> requests, int64_t cost) const {
  if (absl::Status s = ValidateRequest(requests.size(), cost); !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (absl::Status s = CheckLimit(*requests[i].limit); !s.ok()) {
      return s;
    }
    for (size_t j = 0; j < i; ++j) {
      if (*requests[j].limit == *requests[i].limit && requests[j].key == requests[i].key) {
        return absl::InvalidArgumentError(fmt::format(
            "limit {} on key '{}' appears twice", requests[i].limit->ToString(), requests[i].key));
      }
    }
  }
  return absl::OkStatus();
}

void RedisStore::DecideAllAsync(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                                std::span<Decision> each, DecideDone done) {
  assert(each.size() == requests.size());
  if (absl::Status s = CheckRequest(requests, cost); !s.ok()) {
    std::move(done)(s);
    return;
  }
  impl_->Submit(requests, cost, now, each, std::move(done));
}

void RedisStore::ChargeAllAsync(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                                std::span<Decision> each, std::span<Charge> charges,
                                DecideDone done) {
  assert(each.size() == requests.size() && charges.size() == requests.size());
  std::fill(charges.begin(), charges.end(), Charge{});
  if (absl::Status s = CheckRequest(requests, cost); !s.ok()) {
    std::move(done)(s);
    return;
  }
  impl_->SubmitLimits({.mode = internal::Call::Mode::kCharge, .receipts = charges}, requests, cost,
                      now, each, std::move(done));
}

// What the script can settle exactly in doubles: a bucket's debt bound, and charges with the
// figures a charge of this store has (a time below 2^53 us, ahead within [0, B x P']).
absl::Status RedisStore::CheckSettlements(std::span<const LimitedKey> requests,
                                          std::span<const Settlement> settlements) {
  for (size_t i = 0; i < requests.size(); ++i) {
    const Limit& limit = *requests[i].limit;
    const Settlement& s = settlements[i];
    const Int128 capacity = Int128{limit.burst()} * limit.rate_period_us();
    if (UsesBurst(limit.algorithm()) &&
        (Int128{limit.burst()} + s.max_debt) * limit.rate_period_us() >
            internal::kMaxExactProduct) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: max_debt {} is too large for the Redis store, which computes in doubles and "
          "keeps (burst + max_debt) x period/gcd(limit, period) below 2^52",
          limit.ToString(), s.max_debt));
    }
    const int64_t at = s.charge.at.time_since_epoch().count();
    if (at < 0 || at >= internal::kMaxExactProduct * 2 || s.charge.ahead < 0 ||
        s.charge.ahead > (UsesBurst(limit.algorithm()) ? capacity : 0)) {
      return absl::InvalidArgumentError(
          fmt::format("{}: the charge to settle has figures the Redis store cannot have given",
                      limit.ToString()));
    }
  }
  return absl::OkStatus();
}

void RedisStore::SettleAllAsync(std::span<const LimitedKey> requests,
                                std::span<const Settlement> settlements, std::string_view once,
                                Timestamp once_until, Timestamp now, std::span<Settled> settled,
                                StatusDone done) {
  if (absl::Status s = ValidateSettleAll(requests.size(), settlements, once, settled.size());
      !s.ok()) {
    std::move(done)(s);
    return;
  }
  std::fill(settled.begin(), settled.end(), Settled{});
  if (absl::Status s = CheckRequest(requests, 0); !s.ok()) {
    std::move(done)(s);
    return;
  }
  if (absl::Status s = CheckSettlements(requests, settlements); !s.ok()) {
    std::move(done)(s);
    return;
  }
  impl_->SubmitSettle(requests, settlements, once, once_until, now, settled, std::move(done));
}

void RedisStore::ResetAllAsync(std::span<const LimitedKey> requests, Timestamp now,
                               StatusDone done) {
  if (requests.empty()) {
    std::move(done)(absl::InvalidArgumentError("a reset needs at least one limit"));
    return;
  }
  for (const LimitedKey& r : requests) {
    if (absl::Status s = CheckLimit(*r.limit); !s.ok()) {
      std::move(done)(s);
      return;
    }
  }
  impl_->SubmitReset(requests, now, std::move(done));
}

void RedisStore::GiveBackAllAsync(std::span<const LimitedKey> requests,
                                  std::span<const Charge> charges, Timestamp now,
                                  std::span<Decision> each, DecideDone done) {
  assert(each.size() == requests.size() && charges.size() == requests.size());
  if (absl::Status s = CheckRequest(requests, 0); !s.ok()) {
    std::move(done)(s);
    return;
  }
  impl_->SubmitLimits({.mode = internal::Call::Mode::kGiveBack, .charges = charges}, requests, 0,
                      now, each, std::move(done));
}

absl::StatusOr<Decision> RedisStore::DecideAll(std::span<const LimitedKey> requests, int64_t cost,
                                               Timestamp now, std::span<Decision> each) {
  return Wait([&](DecideDone done) { DecideAllAsync(requests, cost, now, each, std::move(done)); });
}

absl::StatusOr<Decision> RedisStore::GiveBackAll(std::span<const LimitedKey> requests,
                                                 std::span<const Charge> charges, Timestamp now,
                                                 std::span<Decision> each) {
  return Wait(
      [&](DecideDone done) { GiveBackAllAsync(requests, charges, now, each, std::move(done)); });
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
  return Wait(
      [&](DecideDone done) { LeaseAllAsync(op, keys, id, ttl, now, each, std::move(done)); });
}

std::string RedisStore::LeaseKey(std::string_view key) const { return impl_->LeaseKey(key); }

RedisStoreStats RedisStore::Stats() const { return impl_->Stats(); }

std::string RedisStore::RedisKey(const Limit& limit, std::string_view key) const {
  return impl_->RedisKey(limit, key);
}

}  // namespace sluice
