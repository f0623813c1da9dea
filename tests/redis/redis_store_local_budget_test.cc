// The `local` failure policy's store under a flood (issue 19, finding 4): it decides in a
// MemoryStore for as long as Redis is gone, so its keys and leases are bounded as the memory
// store's are (RedisStoreOptions::local: sluiced's --max-keys and --max-leases) and counted in
// RedisStoreStats::local.

#include <chrono>
#include <string>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "sluice/redis_store.h"
#include "tests/redis/fixtures.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using testing::MustStore;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

TEST(RedisStoreLocalTest, TheLocalPolicysStoreIsBoundedAndCounted) {
  RedisStoreOptions options;
  options.endpoints = {{"127.0.0.1", static_cast<uint16_t>(testing::FreePort())}};  // Nobody.
  options.timeout = 1s;
  options.on_failure = FailurePolicy::kLocal;
  options.local = {.max_keys = 64, .max_leases = 10};
  std::unique_ptr<RedisStore> redis = MustStore(options);
  const Limit limit = MustLimit({.limit = 1, .period = 1h});
  int refused = 0;
  for (int k = 0; k < 1000; ++k) {
    const absl::StatusOr<Decision> d = redis->Decide(limit, fmt::format("k{}", k), 1, At(kEpoch));
    if (d.ok()) {
      EXPECT_TRUE(d->allowed);
    } else {
      ASSERT_EQ(d.status().code(), absl::StatusCode::kResourceExhausted) << d.status();
      ++refused;
    }
  }
  const MemoryStoreStats local = redis->Stats().local;
  EXPECT_LE(local.keys, 64u + 64u);
  EXPECT_EQ(local.keys + static_cast<size_t>(refused), 1000u);
  EXPECT_EQ(local.refused, static_cast<uint64_t>(refused));

  int leased = 0;
  for (int k = 0; k < 50; ++k) {
    const std::string key = fmt::format("job{}", k);
    const LeasedKey leased_key{key, 5};
    Decision each;
    const absl::StatusOr<Decision> d =
        redis->LeaseAll(LeaseOp::kTake, {&leased_key, 1}, "id", 10s, At(kEpoch), {&each, 1});
    leased += d.ok() && d->allowed ? 1 : 0;
  }
  EXPECT_EQ(leased, 10);
  EXPECT_EQ(redis->Stats().local.leases, 10u);
  EXPECT_EQ(redis->Stats().local.leases_refused, 40u);
}

}  // namespace
}  // namespace sluice
