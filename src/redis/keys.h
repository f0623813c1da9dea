#pragma once

// The names RedisStore gives its Redis keys, and the Redis Cluster hash slot each lands in.
//
// A limit's state for a key is "<prefix><limit>:<tagged key>", a key's leases are
// "<prefix>lease:<tagged key>" (include/sluice/redis_store.h, "Keys"). <limit> names the
// algorithm and its parameters; the tagged key carries a hash tag, so that every limit on one
// key lives in one slot. HashSlot is Redis Cluster's own mapping of keys to slots, which the
// store computes to send each call to the node that serves its slot.
//
// Pure functions: thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sluice/limit.h"

namespace sluice::internal {

// The number of hash slots of a Redis Cluster: a slot is 0 to kSlotCount - 1.
inline constexpr int kSlotCount = 16384;

// The Redis key holding `limit`'s state for `key`, under `prefix`.
std::string RedisKey(std::string_view prefix, const Limit& limit, std::string_view key);

// The key that marks `limit`'s state for `key` as carried to newer figures after a change of
// limit (src/redis/convert.lua): "<prefix>carried:<limit>:<tagged key>", in its slot. No state
// key starts so: their <limit> starts with an algorithm's letter.
std::string CarriedKey(std::string_view prefix, const Limit& limit, std::string_view key);

// The Redis key of `key`'s leases, under `prefix`. Without the capacity: a rule whose
// concurrency changes keeps the leases that are out.
std::string LeaseKey(std::string_view prefix, std::string_view key);

// `key` with a Redis Cluster hash tag, in one of three forms, each starting with its own
// character, so that no two caller keys share a Redis key ("alice" and "{alice}" differ).
void AppendTaggedKey(std::string& out, std::string_view key);

// The hash tag Redis Cluster would take from `key`: the text between the first '{' and the
// first '}' after it, if not empty.
std::optional<std::string_view> HashTag(std::string_view key);

// FNV-1a: a hash every server of a fleet computes alike (absl::Hash is seeded per process).
uint64_t StableHash(std::string_view s);

// CRC16-CCITT (XMODEM), the checksum Redis Cluster maps keys to slots with.
uint16_t Crc16(std::string_view s);

// The slot Redis Cluster puts a key in: of its hash tag if it has one, else of the whole key.
int HashSlot(std::string_view key);

}  // namespace sluice::internal
