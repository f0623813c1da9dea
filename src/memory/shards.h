#pragma once

// How the memory store spreads its keys: every table has kShards shards, each with its own
// lock, and a key's hash picks its shard the same way in every table, so that shard i of every
// table counts against the same stripe of the store's Budget (src/memory/eviction.h).
//
// Constants and pure functions: thread-safe.

#include <cstddef>
#include <string_view>

#include "src/memory/compact_map.h"

namespace sluice::internal {

inline constexpr size_t kShardBits = 6;
inline constexpr size_t kShards = size_t{1} << kShardBits;

// A key with its hash computed once: the shard is chosen by it, and the shard's map finds
// the key by it without hashing again.
struct HashedKey {
  std::string_view key;
  size_t hash;
};

inline size_t HashOf(std::string_view key) { return KeyHashOf(key); }

// The shard is the top bits of a multiplicative remix of the hash; the map mixes the hash its
// own way to place the key, so the keys of one shard still spread over the whole of its map.
inline size_t ShardOf(size_t hash) { return (hash * 0x9E3779B97F4A7C15ULL) >> (64 - kShardBits); }

}  // namespace sluice::internal
