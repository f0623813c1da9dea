#pragma once

// What the tests of RedisStore against a real redis-server share: a store that must be
// created, and the options for a test's own server (its URL, the caller's time, generous
// timeouts and expiries).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/redis_store.h"
#include "tests/testing/redis_server.h"

namespace sluice::testing {

inline std::unique_ptr<RedisStore> MustStore(RedisStoreOptions options) {
  absl::StatusOr<std::unique_ptr<RedisStore>> store = RedisStore::Create(std::move(options));
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

// A steady clock for RedisStoreOptions::steady_clock_for_testing: the real one, moved ahead
// by the test (the store's timers still wait on the real one, so they fire late, never early).
// Must outlive the store. Thread-safe.
class AheadClock {
 public:
  std::function<std::chrono::steady_clock::time_point()> Fn() {
    return [this] { return std::chrono::steady_clock::now() + ahead(); };
  }
  void Advance(std::chrono::nanoseconds d) { ahead_ns_.fetch_add(d.count()); }

 private:
  std::chrono::nanoseconds ahead() const { return std::chrono::nanoseconds(ahead_ns_.load()); }
  std::atomic<int64_t> ahead_ns_{0};
};

// Waits (20 s at most) until `redis` has sent `script_calls` script calls in all: a call made
// has gone out, not merely been made.
inline void AwaitScriptCalls(const RedisStore& redis, uint64_t script_calls) {
  const auto start = std::chrono::steady_clock::now();
  while (redis.Stats().script_calls < script_calls &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(redis.Stats().script_calls, script_calls);
}

// The options of `url` (redis://, rediss://, unix://...), with the tests' settings below.
inline RedisStoreOptions OptionsFor(const std::string& url) {
  using namespace std::chrono_literals;
  absl::StatusOr<RedisStoreOptions> options = ParseRedisUrl(url);
  EXPECT_TRUE(options.ok()) << options.status();
  options->use_caller_time = true;
  options->timeout = 30s;         // Only a watchdog: sanitizer builds on a busy machine are slow.
  options->expiry_margin = 600s;  // Test time runs ahead of real time: keep keys meanwhile.
  return *options;
}

inline RedisStoreOptions OptionsFor(const RedisServer& server) { return OptionsFor(server.url()); }

// Freezes `server` (SIGSTOP), sends it `calls` script calls of cost 1 for `limit` and `key` at
// `now` (set options.batch to 1: each its own), each of which must be answered by the policy
// at its deadline (or sooner: when the first call's deadline passes, the connection fails
// every call on it), wakes it, and returns what a query finds once Redis has read what it had
// been sent: whether it charged them. `gap` is the time between one call and the next.
inline absl::StatusOr<Decision> QueryAfterCallsWhileFrozen(RedisServer& server, RedisStore& redis,
                                                           const Limit& limit,
                                                           const std::string& key, int calls,
                                                           Timestamp now,
                                                           std::chrono::milliseconds gap = {}) {
  using namespace std::chrono_literals;
  server.Pause();
  std::vector<std::promise<absl::StatusOr<Decision>>> done(static_cast<size_t>(calls));
  std::vector<Decision> each(static_cast<size_t>(calls));
  const LimitedKey request{&limit, key};
  for (size_t i = 0; i < done.size(); ++i) {
    redis.DecideAllAsync(
        {&request, 1}, 1, now, {&each[i], 1},
        [&done, i](absl::StatusOr<Decision> d) { done[i].set_value(std::move(d)); });
    std::this_thread::sleep_for(gap);
  }
  for (auto& d : done) {
    absl::StatusOr<Decision> answer = d.get_future().get();
    EXPECT_TRUE(absl::IsDeadlineExceeded(answer.status()) || absl::IsUnavailable(answer.status()))
        << answer.status();
  }
  server.Resume();
  // Served again: a query (cost 0) shows what is charged.
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Decision> query;
  do {
    query = redis.Decide(limit, key, 0, now);
    std::this_thread::sleep_for(20ms);
  } while (!query.ok() && std::chrono::steady_clock::now() - start < 120s);  // A watchdog.
  if (!query.ok()) {
    return query;
  }
  std::this_thread::sleep_for(200ms);  // Redis has read what it had been sent by now.
  return redis.Decide(limit, key, 0, now);
}

// Every failure policy, for a test run under each (INSTANTIATE_TEST_SUITE_P), named as the
// flag says ("deny") by PolicyName.
inline auto EveryPolicy() {
  return ::testing::Values(FailurePolicy::kDeny, FailurePolicy::kAllow, FailurePolicy::kLocal);
}
inline std::string PolicyName(const ::testing::TestParamInfo<FailurePolicy>& info) {
  return std::string(FailurePolicyName(info.param));
}

}  // namespace sluice::testing
