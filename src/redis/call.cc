#include "src/redis/call.h"

#include <algorithm>
#include <array>
#include <charconv>

#include "absl/container/inlined_vector.h"
#include "fmt/format.h"
#include "fmt/ranges.h"

#include "sluice/convert.h"
#include "sluice/redis_store.h"
#include "sluice/settle.h"
#include "src/core/calendar.h"
#include "src/core/convert.h"
#include "src/core/integers.h"
#include "src/redis/errors.h"
#include "src/redis/keys.h"
#include "src/redis/resp.h"

namespace sluice::internal {
namespace {

constexpr int kArgsPerLimit = 8;  // Seven, then E (convert.lua); also per key of leases.
constexpr int kLeaseCode = 7;     // In place of the algorithm: see src/redis/decide.lua.
constexpr int kCalendarCode = 8;  // The same, for a calendar quota: see src/redis/requests.lua.
constexpr int kArgsPerCall = 4;
constexpr int kArgsPerCharge = 3;      // After a limit's, in a give-back.
constexpr int kArgsPerSettlement = 5;  // After a limit's, in a settle.

size_t ArgsPerLimit(Call::Mode mode) {
  switch (mode) {
    case Call::Mode::kGiveBack:
      return kArgsPerLimit + kArgsPerCharge;
    case Call::Mode::kSettle:
      return kArgsPerLimit + kArgsPerSettlement;
    default:
      return kArgsPerLimit;
  }
}

// The reply's numbers per limit, in each mode (requests.lua).
size_t Stride(Call::Mode mode) {
  switch (mode) {
    case Call::Mode::kCharge:
    case Call::Mode::kSettle:
      return 7;
    case Call::Mode::kReset:
      return 0;
    default:
      return 5;
  }
}

// A limit's seven figures as the script reads them: its algorithm's code, N, P, B, K, N', P';
// for a calendar quota, code 8, N, P, then the bounds of the windows around `now`.
std::array<int64_t, 7> FiguresOf(const Limit& l, Timestamp now) {
  if (l.calendar()) {
    const std::array<int64_t, 4> b = CalendarBounds(l, Us(now));
    return {kCalendarCode, l.limit(), l.period().count(), b[0], b[1], b[2], b[3]};
  }
  return {static_cast<int64_t>(l.algorithm()),
          l.limit(),
          l.period().count(),
          l.burst(),
          l.buckets(),
          l.rate_units(),
          l.rate_period_us()};
}

// The most a key of `to` may use after a change (ConvertState's ceiling): its capacity plus
// the largest debt a settle may leave (kMaxDebt), and no more than the script holds exactly
// for the buckets.
int64_t Ceiling(const Limit& to) {
  const int64_t capacity = UsesBurst(to.algorithm()) ? to.burst() : to.limit();
  int64_t ceiling = capacity + kMaxDebt;
  if (UsesBurst(to.algorithm())) {
    ceiling = std::min<int64_t>(ceiling, kMaxExactProduct / to.rate_period_us());
  }
  return ceiling;
}

// For an earlier calendar quota `from` of another shape than `to`: how many of its windows
// start in (its fourth bound, x] for every x in [lo, hi), the window of `to`'s first window's
// last instant from `now` (convert.lua's window_starts).
std::array<int64_t, 3> CalendarStarts(const Limit& from, const Limit& to, Timestamp now) {
  const int64_t fourth = CalendarBounds(from, Us(now))[3];
  const int64_t x = std::max(FirstWindowEnd(to, Us(now)) - 1, fourth);
  const CalendarWindow w = CalendarWindowOf(from, x);
  return {CalendarWindowsBetween(from, fourth, w.start), w.start, w.end};
}

// After a limit's seven: the earlier figures of `request` and their Redis keys (each with its
// mark key, convert.lua; a reset's own mark key first), in the modes that carry a key's state from
// them (decide, charge, dry run) or forget it there (reset). Each earlier figure is one argument,
// its numbers joined by spaces, which the script reads only when it converts: a changed
// limit's calls pay little for them once its keys are carried. Figures the store cannot hold
// (RedisStore::Supports) and the limit's own are left out: no key of theirs can be in Redis.
void AppendEarlier(Call& call, std::string_view prefix, const LimitedKey& request, Timestamp now) {
  const Limit& to = *request.limit;
  absl::InlinedVector<const Limit*, 4> earlier;
  if (call.mode != Call::Mode::kGiveBack && call.mode != Call::Mode::kSettle) {
    for (const Limit& from : request.before) {
      if (from != to && RedisStore::Supports(from).ok()) {
        earlier.push_back(&from);
      }
    }
  }
  AppendBulk(call.args_resp, static_cast<int64_t>(earlier.size()));
  if (call.mode == Call::Mode::kReset) {
    AppendBulk(call.keys_resp, CarriedKey(prefix, to, request.key));  // Forgotten too.
    ++call.extra_keys;
  }
  if (earlier.empty()) {
    return;
  }
  const int64_t ceiling = Ceiling(to);
  for (const Limit* from : earlier) {
    AppendBulk(call.keys_resp, RedisKey(prefix, *from, request.key));
    AppendBulk(call.keys_resp, CarriedKey(prefix, *from, request.key));
    const bool same = SameShape(*from, to);
    const std::array<int64_t, 3> starts =
        from->calendar() && !same ? CalendarStarts(*from, to, now) : std::array<int64_t, 3>{};
    AppendBulk(call.args_resp,
               fmt::format("{} {} {} {}", ceiling, same ? 1 : 0,
                           fmt::join(FiguresOf(*from, now), " "), fmt::join(starts, " ")));
  }
  call.extra_keys += 2 * earlier.size();  // And a mark key for each.
  call.extra_args += earlier.size();
}

// A record's reply, from its count of fields and values on: the cursor to read on from, and
// the fields, as HSCAN gave them.
absl::StatusOr<Decision> ReadRecord(const redisReply& reply, size_t& at, Call& call) {
  if (at + 1 >= reply.elements || reply.element[at]->type != REDIS_REPLY_INTEGER ||
      reply.element[at]->integer < 0 || reply.element[at]->integer % 2 != 0 ||
      reply.element[at + 1]->type != REDIS_REPLY_STRING ||
      at + 2 + static_cast<size_t>(reply.element[at]->integer) > reply.elements) {
    return absl::InternalError("redis: the script's reply to a record is malformed");
  }
  const size_t n = static_cast<size_t>(reply.element[at]->integer);
  const redisReply& cursor = *reply.element[at + 1];
  if (call.record_cursor != nullptr) {
    call.record_cursor->assign(cursor.str, cursor.len);
  }
  at += 2;
  for (size_t i = 0; i < n; i += 2, at += 2) {
    const redisReply& field = *reply.element[at];
    const redisReply& value = *reply.element[at + 1];
    if (field.type != REDIS_REPLY_STRING || value.type != REDIS_REPLY_STRING) {
      return absl::InternalError("redis: the script's reply to a record is malformed");
    }
    if (call.record != nullptr) {
      call.record->emplace_back(std::string(field.str, field.len),
                                std::string(value.str, value.len));
    }
  }
  return Decision{.allowed = true};
}

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

void AppendLimit(Call& call, std::string_view prefix, std::string_view redis_key,
                 const LimitedKey& request, Timestamp now) {
  const Limit& l = *request.limit;
  AppendBulk(call.keys_resp, redis_key);
  for (const int64_t n : FiguresOf(l, now)) {
    AppendBulk(call.args_resp, n);
  }
  AppendEarlier(call, prefix, request, now);
  call.limits.push_back(l);
  call.keys.emplace_back(request.key);
}

void AppendCharge(Call& call, const Charge& charge) {
  AppendBulk(call.args_resp, charge.at.time_since_epoch().count());
  AppendBulk(call.args_resp, charge.units);
  AppendBulk(call.args_resp, static_cast<int64_t>(charge.ahead));
}

void AppendOnce(Call& call, std::string_view once_key, std::optional<Timestamp> once_until) {
  if (!once_until) {
    AppendBulk(call.args_resp, "");
    return;
  }
  AppendBulk(call.args_resp, once_until->time_since_epoch().count());
  AppendBulk(call.keys_resp, once_key);
  call.extra_keys = 1;
}

void AppendSettlement(Call& call, const Settlement& settlement) {
  const Charge& charge = settlement.charge;
  // The last units of the charge come back: the same time and ahead name them (settle.h).
  const int64_t give = std::max<int64_t>(0, charge.units - settlement.units);
  AppendBulk(call.args_resp, charge.at.time_since_epoch().count());
  AppendBulk(call.args_resp, give);
  AppendBulk(call.args_resp, static_cast<int64_t>(charge.ahead));
  AppendBulk(call.args_resp, std::max<int64_t>(0, settlement.units - charge.units));
  AppendBulk(call.args_resp, settlement.max_debt);
}

void AppendRecord(Call& call, std::string_view redis_key, std::string_view cursor,
                  std::span<const std::pair<std::string, std::string>> set) {
  AppendBulk(call.keys_resp, redis_key);
  AppendBulk(call.args_resp, cursor);
  AppendBulk(call.args_resp, static_cast<int64_t>(set.size()));
  for (const auto& [field, value] : set) {
    AppendBulk(call.args_resp, field);
    AppendBulk(call.args_resp, value);
  }
  call.extra_keys = 1;
  call.extra_args = 2 + 2 * set.size();
}

std::string OnceKey(std::string_view prefix, std::string_view first_redis_key,
                    std::string_view once) {
  // Every Redis key of a limit carries a tag (keys.h); the prefix has no braces (Create).
  const std::string_view tag = HashTag(first_redis_key).value_or(first_redis_key);
  return fmt::format("{}once:{{{}}}:{}", prefix, tag, once);
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
  AppendBulk(call.args_resp, int64_t{0});  // No earlier figures.
  call.capacities.push_back(key.capacity);
  call.keys.emplace_back(key.key);
}

std::string BatchCommand(const std::vector<CallPtr>& calls, std::string_view sha,
                         std::string_view margin_ms, std::optional<int64_t> expires) {
  size_t keys = 0;
  size_t args = 3;
  size_t bytes = 128;
  for (const CallPtr& c : calls) {
    keys += c->keys.size() + c->extra_keys;
    args += kArgsPerCall + ArgsPerLimit(c->mode) * c->keys.size() + c->extra_args +
            (c->mode == Call::Mode::kSettle ? 1 : 0);  // once_until
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
    const std::string_view text = message && message->str
                                      ? std::string_view(message->str, message->len)
                                      : std::string_view("script error");
    if (call.mode == Call::Mode::kSettle && text.starts_with(kOnceClaimed)) {
      return absl::AlreadyExistsError("receipt was settled already");
    }
    // An error a command of the script raised (OOM, READONLY...) says as much about Redis as
    // one that refused the whole call: read alike.
    return RedisErrorStatus(text);
  }
  ++at;
  if (call.mode == Call::Mode::kReset) {
    return Decision{.allowed = true};
  }
  if (call.mode == Call::Mode::kRecord) {
    return ReadRecord(reply, at, call);
  }
  const bool receipts = call.mode == Call::Mode::kCharge;
  const size_t stride = Stride(call.mode);
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
  for (size_t i = 0; call.mode == Call::Mode::kSettle && i < call.settled.size(); ++i) {
    const size_t e = first + stride * i;
    call.settled[i] = {.given_back = reply.element[e + 5]->integer,
                       .charged = reply.element[e + 6]->integer,
                       .after = call.each[i]};
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
