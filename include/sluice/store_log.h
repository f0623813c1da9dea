#pragma once

// What a shared store (RedisStore, MemcachedStore) tells an operator through its options' log
// sink: a server lost or refusing to decide (kWarning), and back (kInfo), once per change of
// state and never per call, so that an outage is heard without flooding the log.

#include <cstdint>
#include <functional>
#include <string_view>

namespace sluice {

enum class StoreLogLevel : uint8_t { kInfo, kWarning };
// Called on one of the store's threads: it must not block nor call the store.
using StoreLogSink = std::function<void(StoreLogLevel level, std::string_view line)>;

}  // namespace sluice
