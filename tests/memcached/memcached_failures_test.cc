// MemcachedStore when servers fail: keys spread over two servers by ketama; one killed, its
// keys go to the failure policy (refused, never a timeout waited out) while the other's are
// decided exactly; the server restarted, its keys are decided again; the log hears it lost
// once and back once, and Stats counts it lost meanwhile. A frozen server: the call is ended
// by the timeout (DeadlineExceeded, or the policy's answer to it). And each policy (deny,
// allow, local) when the only server is gone.
//
// No assertion here reads a clock: how long a call took is the machine's doing. What shows
// that a call did not wait is its error (refused, not DeadlineExceeded); what shows that the
// timeout ended one is DeadlineExceeded; counts show one failure per call.

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fmt/format.h"
#include "fmt/ranges.h"
#include "gtest/gtest.h"

#include "sluice/memcached_store.h"
#include "src/memcached/workers.h"
#include "tests/memcached/fixtures.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MemcachedOptionsFor;
using testing::MemcachedServer;
using testing::MustLimit;
using testing::MustMemcached;
using namespace std::chrono_literals;

using Clock = std::chrono::steady_clock;

// `key` decided by `store` once its server is back: asked until it is (each failure before then
// Unavailable), the 120 s bound a watchdog for a store that never tries the server again.
absl::StatusOr<Decision> DecidedAgain(MemcachedStore& store, const Limit& limit,
                                      const std::string& key) {
  const Clock::time_point watchdog = Clock::now() + 120s;
  absl::StatusOr<Decision> d;
  do {
    d = store.Decide(limit, key, 1, At(kEpoch));
    if (!d.ok()) {
      EXPECT_TRUE(absl::IsUnavailable(d.status())) << d.status();
      std::this_thread::sleep_for(20ms);
    }
  } while (!d.ok() && Clock::now() < watchdog);  // sluice-timing: watchdog
  return d;
}

TEST(MemcachedFailuresTest, KeysSpreadOverTwoServersAndOneLostLeavesTheOtherExact) {
  MemcachedServer first;
  MemcachedServer second;
  MemcachedStoreOptions options = MemcachedOptionsFor({&first, &second});
  // Generous: the live server answers within it on a loaded machine, and the killed one is
  // refused at once, so no call here ends by it (that would say DeadlineExceeded).
  options.timeout = 10s;
  options.retry_after_failure = 1s;
  std::mutex mu;
  std::vector<std::string> lines;  // Guarded by mu.
  options.log = [&](StoreLogLevel level, std::string_view line) {
    std::lock_guard lock(mu);
    lines.push_back(std::string(level == StoreLogLevel::kWarning ? "W " : "I ") +
                    std::string(line));
  };
  auto store = MustMemcached(options);
  const Limit limit = MustLimit({.limit = 3, .period = 1h});
  const std::string lost = fmt::format("W Memcached at 127.0.0.1:{} lost: ", second.port());
  std::vector<std::string> on_first;
  std::vector<std::string> on_second;
  for (int i = 0; i < 40; ++i) {
    const std::string key = "user" + std::to_string(i);
    ASSERT_TRUE(store->Decide(limit, key, 1, At(kEpoch))->allowed);
    const std::string item = store->ItemKey(limit, key);
    const bool a = testing::Holds(first, item);
    const bool b = testing::Holds(second, item);
    ASSERT_NE(a, b) << key << " must live on exactly one server";
    (a ? on_first : on_second).push_back(key);
  }
  EXPECT_GE(on_first.size(), 5u);  // ketama spreads them (40 keys: about half each).
  EXPECT_GE(on_second.size(), 5u);

  second.Kill();
  const uint64_t failures_before = store->Stats().failures;
  for (const std::string& key : on_second) {
    // The deny policy: the error. Unavailable (refused, or the server marked failed by an
    // earlier call): a killed server's port refuses at once, so no call waits out a timeout,
    // which would say DeadlineExceeded.
    absl::StatusOr<Decision> d = store->Decide(limit, key, 1, At(kEpoch));
    EXPECT_TRUE(absl::IsUnavailable(d.status())) << key << ": " << d.status();
    EXPECT_NE(d.status().message().find(second.address()), std::string_view::npos)
        << key << ": " << d.status();  // Naming the server that failed.
  }
  // One failure per call: each ended at its first failed operation (no retry of a write).
  EXPECT_EQ(store->Stats().failures - failures_before, on_second.size());
  for (const std::string& key : on_first) {  // The other server's keys: exact, as before.
    absl::StatusOr<Decision> d = store->Decide(limit, key, 1, At(kEpoch));
    ASSERT_TRUE(d.ok()) << key << ": " << d.status();
    EXPECT_TRUE(d->allowed);
    EXPECT_EQ(d->remaining, 1);
  }
  EXPECT_EQ(store->Stats().failures - failures_before, on_second.size());
  EXPECT_EQ(store->Stats().servers, 2);
  EXPECT_EQ(store->Stats().servers_lost, 1);
  {
    std::lock_guard lock(mu);
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines[0].substr(0, lost.size()), lost) << lines[0];
  }

  // Back: an empty server (its items died with it), tried again after retry_after_failure.
  // Decided again is the event; the 120 s bound is a watchdog for a store that never tries
  // again (about a second's wait on any machine), never what makes this pass.
  second.Start();
  const absl::StatusOr<Decision> d = DecidedAgain(*store, limit, on_second.front());
  ASSERT_TRUE(d.ok()) << "never decided again after the restart: " << d.status();
  EXPECT_EQ(d->remaining, 2);  // A fresh key: the restarted server lost its state.
  EXPECT_EQ(store->Stats().servers_lost, 0);
  std::lock_guard lock(mu);
  // One line lost, one back (and at most one more, should the cause change: the calls' and
  // the watcher's probes may name it differently), never one per call.
  const std::string back = fmt::format("I Memcached at 127.0.0.1:{} is back after ", second.port());
  ASSERT_GE(lines.size(), 2u);
  EXPECT_LE(lines.size(), 3u) << fmt::format("{}", fmt::join(lines, "\n"));
  EXPECT_EQ(lines.back().substr(0, back.size()), back) << lines.back();
}

// A frozen server (SIGSTOP) takes the request and never answers: the call is ended by the
// store's timeout, which its error says (DeadlineExceeded), and not by the server. Under
// `allow` the policy answers that same failure. Without the timeout the call would wait for
// the server, and the test would hang until ctest's own timeout: no clock is read here.
TEST(MemcachedFailuresTest, AFrozenServersCallIsEndedByTheTimeout) {
  MemcachedServer server;
  const Limit limit = MustLimit({.limit = 2, .period = 1h});
  for (const FailurePolicy policy : {FailurePolicy::kDeny, FailurePolicy::kAllow}) {
    MemcachedStoreOptions options = MemcachedOptionsFor({&server});
    options.on_failure = policy;
    options.timeout = 100ms;
    auto store = MustMemcached(options);
    server.Pause();
    absl::StatusOr<Decision> d = store->Decide(limit, "k", 1, At(kEpoch));
    server.Resume();
    const MemcachedStoreStats stats = store->Stats();
    EXPECT_EQ(stats.failures, 1u) << FailurePolicyName(policy);
    if (policy == FailurePolicy::kDeny) {
      EXPECT_TRUE(absl::IsDeadlineExceeded(d.status())) << d.status();
      EXPECT_EQ(stats.fallbacks, 0u);
    } else {
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_EQ(*d, Decision{.allowed = true});  // The policy's answer: no figure of Memcached.
      EXPECT_EQ(stats.fallbacks, 1u);
    }
  }
}

TEST(MemcachedFailuresTest, EachPolicyDecidesWhenTheOnlyServerIsGone) {
  MemcachedServer server;
  const Limit limit = MustLimit({.limit = 2, .period = 1h});
  for (const FailurePolicy policy :
       {FailurePolicy::kDeny, FailurePolicy::kAllow, FailurePolicy::kLocal}) {
    MemcachedStoreOptions options = MemcachedOptionsFor({&server});
    options.on_failure = policy;
    options.timeout = 100ms;
    auto store = MustMemcached(options);
    server.Kill();
    std::vector<absl::StatusOr<Decision>> got;
    for (int i = 0; i < 3; ++i) {
      got.push_back(store->Decide(limit, "k", 1, At(kEpoch)));
    }
    switch (policy) {
      case FailurePolicy::kDeny:
        for (const auto& d : got) {
          EXPECT_TRUE(absl::IsUnavailable(d.status()) || absl::IsDeadlineExceeded(d.status()))
              << d.status();
        }
        break;
      case FailurePolicy::kAllow:
        for (const auto& d : got) {
          ASSERT_TRUE(d.ok()) << d.status();
          EXPECT_EQ(*d, Decision{.allowed = true});
        }
        break;
      case FailurePolicy::kLocal:  // The limit holds in this process.
        ASSERT_TRUE(got[0].ok() && got[1].ok() && got[2].ok());
        EXPECT_TRUE(got[0]->allowed);
        EXPECT_TRUE(got[1]->allowed);
        EXPECT_FALSE(got[2]->allowed);
        break;
    }
    const MemcachedStoreStats stats = store->Stats();
    EXPECT_EQ(stats.failures, 3u) << FailurePolicyName(policy);
    EXPECT_EQ(stats.fallbacks, policy == FailurePolicy::kDeny ? 0u : 3u);
    server.Start();
  }
}

TEST(MemcachedFailuresTest, DecideAllAsyncAnswersFromTheStoresThreadsWithinTheTimeout) {
  MemcachedServer server;
  MemcachedStoreOptions options = MemcachedOptionsFor({&server});
  options.timeout = 100ms;
  auto store = MustMemcached(options);
  server.Kill();
  const Limit limit = MustLimit({.limit = 2, .period = 1h});
  const LimitedKey request{&limit, "k"};
  std::vector<Decision> each(16);
  std::vector<std::promise<absl::StatusOr<Decision>>> done(16);
  for (size_t i = 0; i < done.size(); ++i) {
    store->DecideAllAsync({&request, 1}, 1, At(kEpoch), {&each[i], 1},
                          [&done, i](absl::StatusOr<Decision> d) { done[i].set_value(d); });
  }
  for (auto& d : done) {
    absl::StatusOr<Decision> r = d.get_future().get();
    EXPECT_TRUE(absl::IsUnavailable(r.status()) || absl::IsDeadlineExceeded(r.status()))
        << r.status();
  }
}

// A frozen server: the calls queue for the store's one thread, and the caller never waits.
// Past Workers::kMaxQueued waiting, a call is answered at once (Unavailable, naming why), not
// queued behind a backlog without end; the queued ones are decided once the server is back.
TEST(MemcachedFailuresTest, AFullQueueAnswersAtOnceAndTheCallerNeverWaits) {
  MemcachedServer server;
  MemcachedStoreOptions options = MemcachedOptionsFor({&server});
  options.threads = 1;
  options.timeout = 60s;  // A watchdog: the frozen server answers none of these meanwhile.
  auto store = MustMemcached(options);
  const Limit limit = MustLimit({.limit = 2, .period = 1h});
  const LimitedKey request{&limit, "k"};
  Decision warm;
  ASSERT_TRUE(store->DecideAll({&request, 1}, 0, At(kEpoch), {&warm, 1}).ok());
  const uint64_t warmed = store->Stats().calls;
  server.Pause();
  constexpr size_t kCalls = 16'384 + 2;  // The one the thread holds, a full queue, one more.
  static_assert(kCalls == internal::Workers::kMaxQueued + 2);
  std::vector<Decision> each(kCalls);
  std::atomic<size_t> answered{0};
  absl::Status refused;
  for (size_t i = 0; i < kCalls; ++i) {
    store->DecideAllAsync({&request, 1}, 1, At(kEpoch), {&each[i], 1},
                          [&, i](absl::StatusOr<Decision> d) {
                            if (i == kCalls - 1) {
                              refused = d.status();
                            }
                            answered.fetch_add(1);
                          });
    if (i == 0) {  // The thread takes the first: the queue holds exactly what follows.
      while (store->Stats().calls == warmed) {
        std::this_thread::yield();
      }
    }
  }
  EXPECT_EQ(answered.load(), 1u) << "answered while the server was frozen";
  EXPECT_TRUE(absl::IsUnavailable(refused)) << refused;
  EXPECT_NE(refused.message().find("wait for the store's threads"), std::string::npos) << refused;
  server.Resume();
  while (answered.load() < kCalls) {  // Each decided now (two admitted, the rest denied).
    std::this_thread::sleep_for(10ms);
  }
}

}  // namespace
}  // namespace sluice
