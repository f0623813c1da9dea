// A flood of 10,000,000 distinct keys (an attacker spraying addresses) against a memory store
// capped at 1,000,000: resident memory stays within the cap's budget, the keys past it are
// refused (none has reset), and a key that was being limited before the flood is still limited
// during and after it. Labelled "slow": a few
// seconds in a release build, too long under AddressSanitizer.

#include <unistd.h>

#include <fstream>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "tests/testing/util.h"

namespace sluice {
namespace {

using testing::At;
using testing::kEpoch;
using testing::MustLimit;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0;
  int64_t resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// The keys "2001:db8:<n in hex>": IPv6-like /64 prefixes of 19 characters, all distinct.
std::string_view FloodKey(int n, char (&buffer)[32]) {
  const auto end = fmt::format_to_n(buffer, sizeof(buffer), "2001:db8:{:x}", n + 0x10000000).out;
  return {buffer, static_cast<size_t>(end - buffer)};
}

TEST(FloodTest, TenMillionNewKeysAgainstAMillionKeyCap) {
  constexpr size_t kCap = 1'000'000;
  constexpr int kFlood = 10'000'000;
  // What a million gcra keys may take: 32-byte slots in tables between half and 7/8 full,
  // so 70 bytes a key at worst; 100 leaves room for the allocator.
  constexpr int64_t kBudgetBytes = 100 * kCap;

  const int64_t before = ResidentBytes();
  MemoryStore store({.max_keys = kCap});
  // 10 an hour: a key earns a unit back every 6 minutes, longer than the flood lasts.
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1h});
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(store.Decide(limit, "victim", 1, At(kEpoch))->allowed);
  }
  ASSERT_FALSE(store.Decide(limit, "victim", 1, At(kEpoch))->allowed);

  char key[32];
  int64_t peak = 0;
  int64_t t = kEpoch;
  for (int n = 0; n < kFlood; ++n) {
    t += 10;  // 100,000 new keys a second, for 100 seconds.
    const absl::StatusOr<Decision> d = store.Decide(limit, FloodKey(n, key), 1, At(t));
    ASSERT_TRUE(d.ok() ? d->allowed : d.status().code() == absl::StatusCode::kResourceExhausted);
    if (n % 1'000'000 == 0) {
      ASSERT_FALSE(store.Decide(limit, "victim", 1, At(t))->allowed) << "during, key " << n;
      peak = std::max(peak, ResidentBytes() - before);
    }
  }
  peak = std::max(peak, ResidentBytes() - before);
  EXPECT_FALSE(store.Decide(limit, "victim", 1, At(t))->allowed) << "after";
  const MemoryStoreStats stats = store.Stats();
  std::cout << fmt::format(
      "[ flood    ] keys {} refused {} reclaimed {} peak resident +{:.1f} MiB"
      " ({:.1f} bytes per capped key)\n",
      stats.keys, stats.refused, stats.reclaimed, peak / 1048576.0,
      static_cast<double>(peak) / kCap);
  EXPECT_LE(stats.keys, kCap + 64);
  EXPECT_LE(peak, kBudgetBytes);
  EXPECT_GE(stats.refused, static_cast<uint64_t>(kFlood) - kCap - 64);
}

// When the flood's keys reset quickly, reclaiming them as new ones arrive is enough: the store
// never fills and no new key is refused.
TEST(FloodTest, KeysThatResetAreReclaimedFastEnoughThatNoneIsRefused) {
  constexpr size_t kCap = 100'000;
  MemoryStore store({.max_keys = kCap});
  // 10 a second: one request leaves a trace for 100 ms, 10,000 keys at 10 us a key.
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s});
  char key[32];
  int64_t t = kEpoch;
  for (int n = 0; n < 2'000'000; ++n) {
    t += 10;
    ASSERT_TRUE(store.Decide(limit, FloodKey(n, key), 1, At(t))->allowed);
  }
  const MemoryStoreStats stats = store.Stats();
  std::cout << fmt::format("[ flood    ] keys {} refused {} reclaimed {}\n", stats.keys,
                           stats.refused, stats.reclaimed);
  EXPECT_EQ(stats.refused, 0u);
  EXPECT_LT(stats.keys, kCap);
  EXPECT_EQ(stats.reclaimed + stats.keys, 2'000'000u);
}

// With a period long enough to outlast the flood, the victim is limited during it and after.
TEST(FloodTest, ALimitedKeyStaysLimitedThroughTheWholeFlood) {
  MemoryStore store({.max_keys = 100'000});
  const Limit limit = MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 24h});
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(store.Decide(limit, "victim", 1, At(kEpoch))->allowed);
  }
  char key[32];
  for (int n = 0; n < 2'000'000; ++n) {
    (void)store.Decide(limit, FloodKey(n, key), 1, At(kEpoch + n));  // Past the bound: refused.
    if (n % 100'000 == 0) {
      ASSERT_FALSE(store.Decide(limit, "victim", 1, At(kEpoch + n))->allowed) << "during, " << n;
    }
  }
  EXPECT_FALSE(store.Decide(limit, "victim", 1, At(kEpoch + 2'000'000))->allowed) << "after";
  EXPECT_LE(store.KeyCount(), 100'000u + 64u);
}

}  // namespace
}  // namespace sluice
