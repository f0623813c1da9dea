#include "src/redis/call.h"

#include <charconv>

#include "fmt/format.h"

#include "src/redis/errors.h"
#include "src/redis/resp.h"

namespace sluice::internal {
namespace {

constexpr int kArgsPerLimit = 7;  // Also per key of a request of leases.
constexpr int kLeaseCode = 7;     // In place of the algorithm: see src/redis/decide.lua.
constexpr int kArgsPerCall = 4;
constexpr int kArgsPerCharge = 3;  // After a limit's, in a give-back.

}  // namespace

void AppendHead(Call& call, std::optional<Timestamp> caller_time, size_t keys) {
  if (caller_time) {
    AppendBulk(call.args_resp, caller_time->time_since_epoch().count());
  } else {
    AppendBulk(call.args_resp, "");
  }
  AppendBulk(call.args_resp, call.cost);
  AppendBulk(call.args_resp, static_cast<int64_t>(keys));
  AppendBulk(call.args_resp, static_cast<int64_t>(call.mode));
}

void AppendLimit(Call& call, std::string_view redis_key, const LimitedKey& request) {
  const Limit& l = *request.limit;
  AppendBulk(call.keys_resp, redis_key);
  AppendBulk(call.args_resp, static_cast<int64_t>(l.algorithm()));
  AppendBulk(call.args_resp, l.limit());
  AppendBulk(call.args_resp, l.period().count());
  AppendBulk(call.args_resp, l.burst());
  AppendBulk(call.args_resp, l.buckets());
  AppendBulk(call.args_resp, l.rate_units());
  AppendBulk(call.args_resp, l.rate_period_us());
  call.limits.push_back(l);
  call.keys.emplace_back(request.key);
}

void AppendCharge(Call& call, const Charge& charge) {
  AppendBulk(call.args_resp, charge.at.time_since_epoch().count());
  AppendBulk(call.args_resp, charge.units);
  AppendBulk(call.args_resp, static_cast<int64_t>(charge.ahead));
}

void AppendLease(Call& call, std::string_view redis_key, const LeasedKey& key) {
  AppendBulk(call.keys_resp, redis_key);
  AppendBulk(call.args_resp, kLeaseCode);
  AppendBulk(call.args_resp, key.capacity);
  AppendBulk(call.args_resp, call.lease_ttl.count());
  AppendBulk(call.args_resp, call.lease_id);
  for (int unused = 0; unused < 3; ++unused) {
    AppendBulk(call.args_resp, int64_t{0});
  }
  call.capacities.push_back(key.capacity);
  call.keys.emplace_back(key.key);
}

std::string BatchCommand(const std::vector<CallPtr>& calls, std::string_view sha,
                         std::string_view margin_ms, std::optional<int64_t> expires) {
  size_t keys = 0;
  size_t args = 3;
  size_t bytes = 128;
  for (const CallPtr& c : calls) {
    keys += c->keys.size();
    const size_t per_limit =
        kArgsPerLimit + (c->mode == Call::Mode::kGiveBack ? kArgsPerCharge : 0);
    args += kArgsPerCall + per_limit * c->keys.size();
    bytes += c->keys_resp.size() + c->args_resp.size();
  }
  std::string out;
  out.reserve(bytes);
  out += fmt::format("*{}\r\n", 3 + keys + args);
  AppendBulk(out, "EVALSHA");
  AppendBulk(out, sha);
  AppendBulk(out, static_cast<int64_t>(keys));
  for (const CallPtr& c : calls) {
    out += c->keys_resp;
  }
  AppendBulk(out, margin_ms);
  AppendBulk(out, static_cast<int64_t>(calls.size()));
  if (expires) {
    AppendBulk(out, *expires);
  } else {
    AppendBulk(out, "");
  }
  for (const CallPtr& c : calls) {
    out += c->args_resp;
  }
  return out;
}

std::optional<RedisClock> ReadRedisClock(const redisReply& reply, SteadyTime now) {
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 2) {
    return std::nullopt;
  }
  int64_t parts[2];
  for (size_t i = 0; i < 2; ++i) {
    const redisReply& part = *reply.element[i];
    const std::string_view text(part.str != nullptr ? part.str : "", part.len);
    if (part.type != REDIS_REPLY_STRING ||
        std::from_chars(text.data(), text.data() + text.size(), parts[i]).ptr !=
            text.data() + text.size() ||
        text.empty() || parts[i] < 0 || parts[i] > (int64_t{1} << 40)) {
      return std::nullopt;
    }
  }
  return RedisClock{.time_us = parts[0] * 1'000'000 + parts[1], .read_at = now};
}

absl::StatusOr<Decision> ReadReply(const redisReply& reply, size_t& at, Call& call) {
  if (reply.type != REDIS_REPLY_ARRAY || at >= reply.elements ||
      reply.element[at]->type != REDIS_REPLY_INTEGER) {
    return absl::InternalError("redis: the script's reply is malformed");
  }
  if (reply.element[at]->integer == 0) {
    const redisReply* message = at + 1 < reply.elements ? reply.element[at + 1] : nullptr;
    at += 2;
    // An error a command of the script raised (OOM, READONLY...) says as much about Redis as
    // one that refused the whole call: read alike.
    return RedisErrorStatus(message && message->str ? std::string_view(message->str, message->len)
                                                    : std::string_view("script error"));
  }
  ++at;
  const bool receipts = call.mode == Call::Mode::kCharge;
  const size_t stride = receipts ? 7 : 5;
  if (at + stride * call.keys.size() > reply.elements) {
    return absl::InternalError("redis: the script's reply is short");
  }
  const size_t first = at;
  for (size_t i = 0; i < call.keys.size(); ++i, at += stride) {
    call.each[i] = {.allowed = reply.element[at]->integer != 0,
                    .remaining = reply.element[at + 1]->integer,
                    .reset_after = Micros{reply.element[at + 2]->integer},
                    .retry_after = Micros{reply.element[at + 3]->integer},
                    .delay = Micros{reply.element[at + 4]->integer}};
  }
  const Decision all = Combine(call.each);
  for (size_t i = 0; receipts && i < call.keys.size(); ++i) {
    const size_t e = first + stride * i;
    call.receipts[i] = {.at = Timestamp{Micros{reply.element[e + 5]->integer}},
                        .units = all.allowed ? call.cost : 0,
                        .ahead = reply.element[e + 6]->integer};
  }
  return all;
}

}  // namespace sluice::internal
