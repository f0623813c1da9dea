// DenyCache on its own, on an injected time: which denials it repeats and for how long, the
// figures it answers with, multi-limit requests, give-backs (Forget), its bound on memory,
// and threads racing on it.

#include "src/redis/deny_cache.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include "tests/testing/util.h"

namespace sluice::internal {
namespace {

using testing::At;
using testing::MustLimit;
using namespace std::chrono_literals;

constexpr int64_t kT = 1'000'000'000;

const Limit& Window() {
  static const Limit limit = MustLimit({.limit = 5, .period = 1s});
  return limit;
}
const Limit& Bucket() {
  static const Limit limit =
      MustLimit({.algorithm = Algorithm::kTokenBucket, .limit = 10, .period = 1s});
  return limit;
}

Decision Denied(int64_t remaining, int64_t reset_us, int64_t retry_us) {
  return {.remaining = remaining, .reset_after = Micros{reset_us}, .retry_after = Micros{retry_us}};
}

// Records Redis's answer `each` to a request of `cost` on (limits[i], keys[i]), made at `t`.
void Record(DenyCache& cache, std::vector<Limit> limits, std::vector<std::string> keys,
            int64_t cost, int64_t t, std::vector<Decision> each) {
  cache.Record(limits, keys, cost, cache.Stamp(At(t)), each);
}

std::optional<Decision> Ask(DenyCache& cache, const Limit& limit, std::string_view key,
                            int64_t cost, int64_t t) {
  const LimitedKey request{&limit, key};
  Decision each;
  return cache.Answer({&request, 1}, cost, At(t), {&each, 1});
}

TEST(DenyCacheTest, RepeatsADenialUntilTheRetryTimeForCostsAtLeastAsLarge) {
  DenyCache cache(100, 10s);
  Record(cache, {Window()}, {"alice"}, 2, kT, {Denied(1, 400'000, 400'000)});
  // Just before the retry time: denied, figures counted down from the time the call was made.
  std::optional<Decision> d = Ask(cache, Window(), "alice", 2, kT + 399'999);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, Denied(1, 1, 1));
  d = Ask(cache, Window(), "alice", 3, kT + 100'000);  // A larger cost: denied too.
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, Denied(1, 300'000, 300'000));
  // A cost past the limit is never allowed: Redis's -1, not a countdown.
  d = Ask(cache, Window(), "alice", 6, kT + 100'000);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->retry_after, kNeverAllowed);
  // At the retry time, for a smaller cost, for another key or limit: Redis is asked.
  EXPECT_FALSE(Ask(cache, Window(), "alice", 2, kT + 400'000));
  EXPECT_FALSE(Ask(cache, Window(), "alice", 1, kT + 1));
  EXPECT_FALSE(Ask(cache, Window(), "alice", 0, kT + 1));
  EXPECT_FALSE(Ask(cache, Window(), "bob", 2, kT + 1));
  EXPECT_FALSE(Ask(cache, Bucket(), "alice", 2, kT + 1));
  // A time before the call was made: denied (less time has freed less), nothing counted down.
  d = Ask(cache, Window(), "alice", 2, kT - 50);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, Denied(1, 400'000, 400'000));
  EXPECT_EQ(cache.answered(), 4u);
}

TEST(DenyCacheTest, KeepsNoAllowedRequestNorADenialThatNeverEnds) {
  DenyCache cache(100, 10s);
  Record(cache, {Window()}, {"a"}, 1, kT, {Decision{.allowed = true, .remaining = 4}});
  Record(cache, {Window()}, {"b"}, 9, kT, {Decision{.remaining = 5, .retry_after = kNeverAllowed}});
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(Ask(cache, Window(), "b", 9, kT + 1));
}

TEST(DenyCacheTest, LivesAtMostMaxTtl) {
  DenyCache cache(100, 1ms);
  Record(cache, {Window()}, {"alice"}, 1, kT, {Denied(0, 900'000, 900'000)});
  EXPECT_TRUE(Ask(cache, Window(), "alice", 1, kT + 999));
  EXPECT_FALSE(Ask(cache, Window(), "alice", 1, kT + 1000));
}

// A request of several limits is answered when one holds a denial and every other one holds
// the figures Redis gave beside it; they come back as last known, counted down.
TEST(DenyCacheTest, AnswersSeveralLimitsWhenEachIsKnownAndOneDenies) {
  DenyCache cache(100, 10s);
  const Decision allowed{.allowed = true, .remaining = 7, .reset_after = 300ms};
  Record(cache, {Window(), Bucket()}, {"{u}", "{u}:ip"}, 1, kT,
         {Denied(0, 200'000, 200'000), allowed});
  const LimitedKey both[] = {{&Window(), "{u}"}, {&Bucket(), "{u}:ip"}};
  Decision each[2];
  std::optional<Decision> d = cache.Answer(both, 1, At(kT + 50'000), each);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(each[0], Denied(0, 150'000, 150'000));
  EXPECT_EQ(each[1], (Decision{.allowed = true, .remaining = 7, .reset_after = 250ms}));
  EXPECT_EQ(*d, Denied(0, 250'000, 150'000));  // Their Combine.
  // The limit that allowed, alone: only Redis can say.
  const LimitedKey ip[] = {{&Bucket(), "{u}:ip"}};
  EXPECT_FALSE(cache.Answer(ip, 1, At(kT + 50'000), {each, 1}));
  // With a limit never seen: Redis is asked.
  const Limit other = MustLimit({.limit = 100, .period = 1h});
  const LimitedKey three[] = {both[0], both[1], {&other, "{u}"}};
  Decision each3[3];
  EXPECT_FALSE(cache.Answer(three, 1, At(kT + 50'000), each3));
  // A denial still fresh is not replaced by figures of a request it did not deny.
  Record(cache, {Bucket(), Window()}, {"{u}:ip", "{u}"}, 1, kT + 60'000,
         {Denied(0, 10, 10), allowed});
  d = Ask(cache, Window(), "{u}", 1, kT + 70'000);
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->allowed);
}

// A give-back of this process can free units sooner than time: Forget drops what is known,
// and a denial whose call was made before it is not kept.
TEST(DenyCacheTest, ForgetsOnAGiveBackAndRefusesDenialsMadeBeforeIt) {
  DenyCache cache(100, 10s);
  Record(cache, {Window()}, {"alice"}, 1, kT, {Denied(0, 500'000, 500'000)});
  const DenyStamp before = cache.Stamp(At(kT + 10));
  cache.Forget(Window(), "alice");
  EXPECT_FALSE(Ask(cache, Window(), "alice", 1, kT + 20));
  const std::vector<Limit> limits = {Window()};
  const std::vector<std::string> keys = {"alice"};
  const std::vector<Decision> denied = {Denied(0, 400'000, 400'000)};
  cache.Record(limits, keys, 1, before, denied);
  EXPECT_FALSE(Ask(cache, Window(), "alice", 1, kT + 20));
  cache.Record(limits, keys, 1, cache.Stamp(At(kT + 30)), denied);
  EXPECT_TRUE(Ask(cache, Window(), "alice", 1, kT + 40));
}

TEST(DenyCacheTest, HoldsAtMostItsEntriesDroppingTheExpiredThenTheSoonestToExpire) {
  DenyCache cache(32, 10s);  // One shard: a small cache is not cut in pieces.
  // Forty keys denied for 1 s each, made one after the other: the 32 that expire last stay.
  for (int i = 0; i < 40; ++i) {
    Record(cache, {Window()}, {absl::StrCat("k", i)}, 1, kT + i, {Denied(0, 1'000'000, 1'000'000)});
    EXPECT_LE(cache.size(), 32u);
  }
  for (int i = 0; i < 40; ++i) {
    EXPECT_EQ(Ask(cache, Window(), absl::StrCat("k", i), 1, kT + 100).has_value(), i >= 8) << i;
  }
  // Once they have all expired, new denials take their place, all of them at once.
  Record(cache, {Window()}, {"n"}, 1, kT + 2'000'000, {Denied(0, 1'000'000, 1'000'000)});
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_TRUE(Ask(cache, Window(), "n", 1, kT + 2'000'001));
  // A big cache is cut in shards, and holds no more than it was given either.
  DenyCache big(1000, 10s);
  for (int i = 0; i < 5000; ++i) {
    Record(big, {Window()}, {absl::StrCat("b", i)}, 1, kT + i, {Denied(0, 1'000'000, 1'000'000)});
  }
  EXPECT_LE(big.size(), 1000u);
  EXPECT_GE(big.size(), 900u);
  EXPECT_TRUE(Ask(big, Window(), "b4999", 1, kT + 5000));
  // One entry.
  DenyCache one(1, 10s);
  Record(one, {Window()}, {"a"}, 1, kT, {Denied(0, 1'000'000, 1'000'000)});
  Record(one, {Window()}, {"b"}, 1, kT, {Denied(0, 2'000'000, 2'000'000)});
  EXPECT_EQ(one.size(), 1u);
  EXPECT_TRUE(Ask(one, Window(), "b", 1, kT + 1));
}

// Callers answer while the I/O thread records and forgets (run under ThreadSanitizer too).
TEST(DenyCacheTest, ThreadsAnswerWhileOneRecordsAndForgets) {
  DenyCache cache(64, 10s);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; i < 20'000; ++i) {
      const std::string key = absl::StrCat("k", i % 100);
      Record(cache, {Window()}, {key}, 1, kT + i, {Denied(0, 1'000, 1'000)});
      if (i % 7 == 0) {
        cache.Forget(Window(), key);
      }
    }
    stop = true;
  });
  std::vector<std::thread> readers;
  std::atomic<uint64_t> answers{0};
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      for (int i = 0; !stop; ++i) {
        std::optional<Decision> d =
            Ask(cache, Window(), absl::StrCat("k", (i + r) % 100), 1, kT + i % 20'000);
        if (d) {
          EXPECT_FALSE(d->allowed);
          EXPECT_GE(d->retry_after, Micros{1});
          ++answers;
        }
      }
    });
  }
  writer.join();
  for (std::thread& t : readers) {
    t.join();
  }
  EXPECT_LE(cache.size(), 64u);
  EXPECT_EQ(cache.answered(), answers.load());
}

}  // namespace
}  // namespace sluice::internal
