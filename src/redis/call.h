#pragma once

// A Call, one decision request on its way to Redis, and Pending, what a connection waits for
// Redis to answer, in the order it was sent. With them, the script's calling convention, as
// the header of src/redis/requests.lua states it, in both directions: each call's keys and ARGV,
// framed as the call is made; a batch of calls, framed as one EVALSHA; and the script's reply,
// read back into each call's decisions.
//
// Thread-compatible: a Call is built on its caller's thread and then handed to the store's
// I/O thread, the only one to touch it afterwards.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include <hiredis/hiredis.h>

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/give_back.h"
#include "sluice/limit.h"
#include "sluice/settle.h"
#include "sluice/store.h"
#include "src/redis/deny_cache.h"

namespace sluice::internal {

using SteadyClock = std::chrono::steady_clock;
using SteadyTime = SteadyClock::time_point;

// A call that takes a share (src/redis/shares.h) for a request of `own_cost` (0: a refill):
// when Redis cannot answer, the failure policy decides the request at its own cost and says
// so here, for then the answer grants no share.
struct ShareTake {
  int64_t own_cost = 0;
  bool fell_back = false;
};

// One decision request on its way to Redis.
struct Call {
  // What the script does with it (requests.lua's mode): decide; decide and report what each
  // limit charged (for a give-back later); give back charges (sluice/give_back.h); a dry run,
  // each limit answering as if another had denied (for a request over several cluster slots,
  // multislot.h), recording nothing; settle (sluice/settle.h: a `once` claimed, then each
  // limit's give-back or charge past the limit); reset (each limit's key deleted).
  enum class Mode : uint8_t {
    kDecide = 0,
    kCharge = 1,
    kGiveBack = 2,
    kDryRun = 3,
    kSettle = 4,
    kReset = 5,
    kRecord = 6,  // A shared record read or written (RedisStore::ReadRecord), no limits.
  };
  Mode mode = Mode::kDecide;
  // kCharge: where ReadReply writes each limit's charge (units 0 unless the request was
  // allowed), in Redis's time. One per limit; must stay alive until `done` is called.
  std::span<Charge> receipts;
  // kSettle: where ReadReply writes what the settle did on each limit, as `receipts`.
  std::span<Settled> settled;
  // kRecord: where ReadReply adds the fields read, and writes the cursor to read on from.
  std::vector<std::pair<std::string, std::string>>* record = nullptr;
  std::string* record_cursor = nullptr;
  // Keys besides one per limit: a `once` key (kSettle), before the limits' keys; the keys of
  // the limits' earlier figures (AppendLimit), each after its limit's.
  size_t extra_keys = 0;
  size_t extra_args = 0;          // ARGV besides the fixed count per limit: the earlier figures'.
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
  int slot = -1;               // The Redis Cluster hash slot of its keys; -1 outside a cluster.
  int redirects = 0;           // MOVED, ASK and TRYAGAIN followed so far.
  DenyStamp deny_stamp;        // When it was made, for the denial cache (deny_cache.h).
  ShareTake* share = nullptr;  // Set for a call that takes a share; owned by `done`.
};
using CallPtr = std::unique_ptr<Call>;

// Before the failure policy decides `call`: when it takes a share, marks it fallen back and
// gives it its request's own cost.
inline void ShareFellBack(Call& call) {
  if (call.share != nullptr) {
    call.share->fell_back = true;
    call.cost = call.share->own_cost;
  }
}

// Script calls in flight on a connection, and the handshake before them (kRole: a sentinel's
// master is checked to be one, sentinel.h; kTime: Redis's clock, for the calls' `expires`).
struct Pending {
  enum class Kind { kAuth, kSelect, kRole, kTime, kScriptLoad, kSlots, kAsking, kBatch };
  Kind kind;
  std::vector<CallPtr> calls;  // kBatch
  std::string command;         // kBatch: sent again after a NOSCRIPT or a redirection.
  bool retried = false;        // kBatch: NOSCRIPT seen once already.
  bool asking = false;         // kBatch: sent after ASKING (an ASK brought it here).
  SteadyTime deadline;
};

// The head of the call's part of ARGV: the time (`caller_time`, or '' for Redis's TIME), the
// call's cost (or its lease op), the number of keys it will have, and its mode.
void AppendHead(Call& call, std::optional<Timestamp> caller_time, size_t keys);

// Adds one limit on one key to the call: its Redis key `redis_key` and its arguments; for a
// calendar quota, the bounds of the windows around `now` (this host's time, which Redis's
// own, when it decides on its TIME, must be within a window of). In the modes that decide or
// reset, also request.before: the keys under `prefix` of its earlier figures, and what the
// script needs to move a key's state from them (src/redis/convert.lua). REQUIRES: call.mode set.
void AppendLimit(Call& call, std::string_view prefix, std::string_view redis_key,
                 const LimitedKey& request, Timestamp now);

// The largest B x P' the script keeps exact (its sums of two such values stay below 2^53):
// RedisStore refuses the bucket limits past it (decide.lua).
inline constexpr int64_t kMaxExactProduct = int64_t{1} << 52;

// After AppendLimit, in a call of mode kGiveBack: the charge to give back on that limit.
// REQUIRES: charge.ahead below 2^53 (RedisStore::CheckLimit bounds B x P' below 2^52).
void AppendCharge(Call& call, const Charge& charge);

// In a call of mode kSettle, right after AppendHead: its `once` key, claimed until
// `once_until` (nullopt: no `once`, and `once_key` is unused).
void AppendOnce(Call& call, std::string_view once_key, std::optional<Timestamp> once_until);

// After AppendLimit, in a call of mode kSettle: what to do on that limit. REQUIRES:
// ValidateSettlement(settlement).ok(), and settlement.charge.at and .ahead within [0, 2^53).
void AppendSettlement(Call& call, const Settlement& settlement);

// In a call of mode kRecord, right after AppendHead (with no limits): the hash `redis_key`,
// given `set`'s fields, or when `set` is empty, read from `cursor` on ("0" first; ReadReply
// gives the cursor to go on from, "0" again at the end).
void AppendRecord(Call& call, std::string_view redis_key, std::string_view cursor,
                  std::span<const std::pair<std::string, std::string>> set);

// The key that holds a settle's `once` claim, under `prefix`, in the hash slot of
// `first_redis_key` (the Redis key of the settle's first limit): "<prefix>once:{<its tag>}:<once>".
std::string OnceKey(std::string_view prefix, std::string_view first_redis_key,
                    std::string_view once);

// Adds one key of a request of leases to the call: its Redis key `redis_key` and its
// arguments, with the call's lease id and ttl.
void AppendLease(Call& call, std::string_view redis_key, const LeasedKey& key);

// The EVALSHA of the script `sha` that decides `calls` in one script call, their keys expiring
// `margin_ms` (in decimal) after their reset_after; past `expires` (Redis's time, in
// microseconds), the script decides nothing and answers an error starting kExpired.
std::string BatchCommand(const std::vector<CallPtr>& calls, std::string_view sha,
                         std::string_view margin_ms, std::optional<int64_t> expires);
inline constexpr std::string_view kExpired = "TIMEOUT sluice:";  // As requests.lua says it.
// A settle's `once` claimed already, as settle.lua says it; ReadReply answers AlreadyExists.
inline constexpr std::string_view kOnceClaimed = "ONCE sluice:";

// Redis's clock as a connection knows it: what TIME answered, and this process's steady clock
// when the answer arrived. The steady clock, not the wall clock: a step of this host's wall
// clock (an operator, NTP stepping) must neither switch `expires` off nor make every call
// expire early.
struct RedisClock {
  int64_t time_us = 0;  // TIME's answer, in microseconds.
  SteadyTime read_at;   // When it arrived here.

  // `t` on Redis's clock, in microseconds: at most what it is, for Redis answered before
  // `read_at` (and as far off as the two clocks drift apart since, a few microseconds a
  // second; a connection reads TIME again every kRedisClockReread).
  int64_t At(SteadyTime t) const {
    return time_us + std::chrono::duration_cast<std::chrono::microseconds>(t - read_at).count();
  }
};
inline constexpr std::chrono::seconds kRedisClockReread{60};
// The age past which a reading is not used for `expires`: a batch waits for a fresh one, or
// goes without (Redis refuses TIME). Twice kRedisClockReread, so that a connection that keeps
// sending has its new reading before the old one is this old and never waits; the drift it
// allows is a few milliseconds.
inline constexpr std::chrono::seconds kRedisClockStale{2 * kRedisClockReread};

// Redis's clock from TIME's `reply`, arrived at `now`. nullopt for a reply that is not TIME's.
std::optional<RedisClock> ReadRedisClock(const redisReply& reply, SteadyTime now);

// Reads `call`'s part of the script's reply to its batch, which starts at element `at`, and
// moves `at` past it (as far as it can be read). Writes the call's decisions to `call.each`
// (kSettle: also `call.settled`; kReset: nothing, answering an allowed Decision) and returns
// their Combine; for an error the script answered for the call, RedisErrorStatus's
// (errors.h: Unavailable when Redis cannot decide now, Internal when the call is wrong), or
// AlreadyExists for a settle whose `once` was claimed already; Internal for a reply that is
// malformed.
absl::StatusOr<Decision> ReadReply(const redisReply& reply, size_t& at, Call& call);

}  // namespace sluice::internal
