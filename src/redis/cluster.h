#pragma once

// Redis Cluster, as far as it can be read without a connection: the redirections a node
// answers a call with (MOVED, ASK), and the slot map CLUSTER SLOTS describes. The members of
// RedisStore::Impl that keep the map and follow the redirections are defined in cluster.cc
// beside these (redis_store_impl.h).
//
// Pure functions: thread-safe.

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include <hiredis/hiredis.h>

#include "sluice/redis_store.h"

namespace sluice::internal {

// "MOVED 3999 127.0.0.1:6381" and "ASK 3999 127.0.0.1:6381": the slot and where it is now.
std::optional<std::pair<int, RedisEndpoint>> Redirection(std::string_view error);

// Slots `first` to `last` (both included) and the master that serves them.
struct SlotRange {
  int first = 0;
  int last = 0;
  RedisEndpoint master;
};

// CLUSTER SLOTS: [[first, last, [host, port, id], replicas...], ...]. The ranges in the order
// of the reply, their slots clamped to 0..kSlotCount - 1, skipping a range that is not of that
// shape; nullopt if the reply is not an array. A master with no address of its own (empty or
// "?") is at `asked`'s host, the one the question went to.
std::optional<std::vector<SlotRange>> ReadClusterSlots(const redisReply& reply,
                                                       const RedisEndpoint& asked);

}  // namespace sluice::internal
