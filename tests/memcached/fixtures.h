#pragma once

// What the Memcached store's tests share: options for servers the test started, a store that
// must open, and a look at one server's items through a connection of its own.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/memcached_store.h"
#include "src/memcached/connection.h"
#include "tests/testing/memcached_server.h"

namespace sluice::testing {

inline MemcachedStoreOptions MemcachedOptionsFor(
    const std::vector<const MemcachedServer*>& servers) {
  MemcachedStoreOptions options;
  for (const MemcachedServer* s : servers) {
    options.servers.push_back({.host = "127.0.0.1", .port = static_cast<uint16_t>(s->port())});
  }
  // The tests decide on a manual clock while Memcached expires items on its own: keep items
  // an hour past their reset, so that none expires during a test.
  options.expiry_margin = std::chrono::hours(1);
  // Only a watchdog, as the Redis store's tests have (tests/redis/fixtures.h): the default
  // 100 ms is a wall-clock bound that a loaded machine overruns (under TSan, waiting for a
  // store's thread: DEADLINE_EXCEEDED in a differential test), and under `allow` a timeout
  // would even admit a call uncharged. A test's call must fail only where the test makes it
  // fail (a server killed or frozen); the tests of the timeout set their own.
  options.timeout = std::chrono::seconds(30);
  return options;
}

inline std::unique_ptr<MemcachedStore> MustMemcached(MemcachedStoreOptions options) {
  absl::StatusOr<std::unique_ptr<MemcachedStore>> store = MemcachedStore::Create(options);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

// Whether `server` holds an item named `item_key`.
inline bool Holds(const MemcachedServer& server, const std::string& item_key) {
  internal::ServerHealth health({});
  auto connection =
      internal::MemcachedConnection::MakePrototype(MemcachedOptionsFor({&server}), health);
  if (!connection.ok()) {
    return false;
  }
  absl::StatusOr<std::optional<internal::MemcachedItem>> item = (*connection)->Gets(item_key);
  return item.ok() && item->has_value();
}

}  // namespace sluice::testing
