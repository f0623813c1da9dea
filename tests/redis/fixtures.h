#pragma once

// What the tests of RedisStore against a real redis-server share: a store that must be
// created, and the options for a test's own server (its URL, the caller's time, generous
// timeouts and expiries).

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"

#include "sluice/redis_store.h"
#include "tests/testing/redis_server.h"

namespace sluice::testing {

inline std::unique_ptr<RedisStore> MustStore(RedisStoreOptions options) {
  absl::StatusOr<std::unique_ptr<RedisStore>> store = RedisStore::Create(std::move(options));
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

// The options of `url` (redis://, rediss://, unix://...), with the tests' settings below.
inline RedisStoreOptions OptionsFor(const std::string& url) {
  using namespace std::chrono_literals;
  absl::StatusOr<RedisStoreOptions> options = ParseRedisUrl(url);
  EXPECT_TRUE(options.ok()) << options.status();
  options->use_caller_time = true;
  options->timeout = 30s;  // Only a watchdog: sanitizer builds on a busy machine are slow.
  options->expiry_margin = 600s;  // Test time runs ahead of real time: keep keys meanwhile.
  return *options;
}

inline RedisStoreOptions OptionsFor(const RedisServer& server) { return OptionsFor(server.url()); }

// Every failure policy, for a test run under each (INSTANTIATE_TEST_SUITE_P), named as the
// flag says ("deny") by PolicyName.
inline auto EveryPolicy() {
  return ::testing::Values(FailurePolicy::kDeny, FailurePolicy::kAllow, FailurePolicy::kLocal);
}
inline std::string PolicyName(const ::testing::TestParamInfo<FailurePolicy>& info) {
  return std::string(FailurePolicyName(info.param));
}

}  // namespace sluice::testing
