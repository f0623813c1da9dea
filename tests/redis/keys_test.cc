// The Redis store's key names and Redis Cluster's hash slots, checked against the values the
// Redis Cluster specification and Redis's documentation publish (and CLUSTER KEYSLOT answers).

#include "src/redis/keys.h"

#include <set>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "tests/testing/util.h"

namespace sluice::internal {
namespace {

using testing::MustLimit;
using namespace std::chrono_literals;

TEST(Crc16Test, MatchesTheCheckValueOfTheClusterSpec) {
  // The Redis Cluster specification's reference: CRC16/XMODEM of "123456789" is 0x31C3.
  EXPECT_EQ(Crc16("123456789"), 0x31C3);
  EXPECT_EQ(Crc16(""), 0);
  // Every byte counts, high bit included.
  EXPECT_NE(Crc16("123456789"), Crc16("123456788"));
  EXPECT_NE(Crc16("\xff"), Crc16("\x7f"));
}

TEST(HashSlotTest, PutsKeysInTheSlotsRedisDocuments) {
  EXPECT_EQ(HashSlot("foo"), 12182);
  EXPECT_EQ(HashSlot("bar"), 5061);
  EXPECT_EQ(HashSlot("hello"), 866);
  EXPECT_EQ(HashSlot("somekey"), 11058);
  EXPECT_EQ(HashSlot("foo{hash_tag}"), 2515);
  // The specification's definition, slot = CRC16(key) mod 16384, for a key without a tag.
  for (const char* key : {"foo", "bar", "hello", "123456789", "user:1000"}) {
    EXPECT_EQ(HashSlot(key), Crc16(key) % kSlotCount) << key;
  }
  EXPECT_EQ(HashSlot("123456789"), 0x31C3);  // Below 16384: its own slot.
}

// The hash tag rule of the Redis Cluster specification: the text between the first '{' and
// the first '}' after it, unless that is empty.
TEST(HashSlotTest, HashesOnlyTheFirstNonEmptyTag) {
  EXPECT_EQ(HashSlot("{user1000}.following"), HashSlot("{user1000}.followers"));
  EXPECT_EQ(HashSlot("{user1000}.following"), HashSlot("user1000"));
  EXPECT_EQ(HashSlot("{user1000}.following"), 3443);
  // An empty tag: the whole key is hashed.
  EXPECT_EQ(HashSlot("foo{}{bar}"), Crc16("foo{}{bar}") % kSlotCount);
  EXPECT_EQ(HashSlot("foo{}{bar}"), 8363);
  // The tag ends at the first '}' after the first '{'.
  EXPECT_EQ(HashSlot("foo{{bar}}zap"), HashSlot("{bar"));
  EXPECT_EQ(HashSlot("foo{{bar}}zap"), 4015);
  // Only the first tag counts.
  EXPECT_EQ(HashSlot("foo{bar}{zap}"), HashSlot("bar"));
  EXPECT_EQ(HashSlot("foo{bar}{zap}"), 5061);
  // No closing brace: no tag.
  EXPECT_EQ(HashSlot("foo{bar"), Crc16("foo{bar") % kSlotCount);
}

TEST(HashTagTest, IsTheTextOfTheFirstNonEmptyTag) {
  EXPECT_EQ(HashTag("{user1000}.following"), "user1000");
  EXPECT_EQ(HashTag("foo{{bar}}zap"), "{bar");
  EXPECT_EQ(HashTag("foo{bar}{zap}"), "bar");
  EXPECT_EQ(HashTag("foo{}{bar}"), std::nullopt);
  EXPECT_EQ(HashTag("foo{bar"), std::nullopt);
  EXPECT_EQ(HashTag("}foo{"), std::nullopt);
  EXPECT_EQ(HashTag("plain"), std::nullopt);
}

// FNV-1a, 64 bits: its published offset basis and test vectors, the same in every process.
TEST(StableHashTest, IsFnv1a64) {
  EXPECT_EQ(StableHash(""), 0xcbf29ce484222325u);
  EXPECT_EQ(StableHash("a"), 0xaf63dc4c8601ec8cu);
  EXPECT_EQ(StableHash("foobar"), 0x85944171f73967e8u);
}

// Each caller key gets one of three forms, each starting with its own character.
TEST(AppendTaggedKeyTest, TagsEveryKeySoThatNoTwoShareARedisKey) {
  auto tagged = [](std::string_view key) {
    std::string out;
    AppendTaggedKey(out, key);
    return out;
  };
  EXPECT_EQ(tagged("alice"), "{alice}");
  EXPECT_EQ(tagged("{alice}:ip"), "={alice}:ip");      // The caller's own tag, kept.
  EXPECT_EQ(tagged("a}b"), "#{e72a9319054b4553}a}b");  // A digest as the tag: FNV-1a of the key.
  EXPECT_EQ(tagged("a}b"), "#{" + fmt::format("{:016x}", StableHash("a}b")) + "}a}b");
  // Keys that look alike stay apart.
  const std::vector<std::string> keys = {"alice", "{alice}", "=alice", "#{x}alice", "a}b", "}"};
  std::set<std::string> distinct;
  for (const std::string& key : keys) {
    distinct.insert(tagged(key));
  }
  EXPECT_EQ(distinct.size(), keys.size());
  // Appends: what is in `out` stays.
  std::string out = "prefix:";
  AppendTaggedKey(out, "k");
  EXPECT_EQ(out, "prefix:{k}");
}

// The slot of a Redis key is that of its caller key's tag, so that every limit on one key is
// in one slot, and a caller's "{user}:ip" and "{user}:id" are in the user's.
TEST(RedisKeyTest, PutsEveryLimitOnAKeyInTheSlotOfItsTag) {
  const Limit window = MustLimit({.limit = 5, .period = 1min});
  const Limit gcra =
      MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s, .burst = 20});
  EXPECT_EQ(HashSlot(RedisKey("sluice:", window, "alice")), HashSlot("alice"));
  EXPECT_EQ(HashSlot(RedisKey("sluice:", gcra, "alice")), HashSlot("alice"));
  EXPECT_EQ(HashSlot(LeaseKey("sluice:", "alice")), HashSlot("alice"));
  EXPECT_EQ(HashSlot(RedisKey("sluice:", window, "{user}:ip")), HashSlot("user"));
  EXPECT_EQ(HashSlot(RedisKey("other:", gcra, "{user}:id")), HashSlot("user"));
  // The digest form: every limit on the key still shares one slot.
  EXPECT_EQ(HashSlot(RedisKey("sluice:", window, "a}b")), HashSlot(RedisKey("x:", gcra, "a}b")));
}

// <prefix><letter><N>/<P in us>[b<B>][k<K>]:<tagged key>: a changed limit starts afresh.
TEST(RedisKeyTest, NamesTheAlgorithmAndTheParametersOfTheState) {
  EXPECT_EQ(RedisKey("sluice:", MustLimit({.limit = 5, .period = 1min}), "alice"),
            "sluice:f5/60000000:{alice}");
  EXPECT_EQ(
      RedisKey(
          "p:", MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s, .burst = 20}),
          "k"),
      "p:g10/1000000b20:{k}");
  EXPECT_EQ(
      RedisKey(
          "p:",
          MustLimit(
              {.algorithm = Algorithm::kSlidingBuckets, .limit = 10, .period = 1min, .buckets = 6}),
          "k"),
      "p:k10/60000000k6:{k}");
  // A burst names only the algorithms that use one.
  EXPECT_EQ(RedisKey("p:", MustLimit({.limit = 5, .period = 1s, .burst = 9}), "k"),
            "p:f5/1000000:{k}");
  // Every algorithm has a letter of its own.
  std::string letters;
  for (Algorithm a : testing::AllAlgorithms()) {
    letters += RedisKey("p:", MustLimit({.algorithm = a, .limit = 10, .period = 1min}), "k")[2];
  }
  EXPECT_EQ(letters, "flwktgq");
  EXPECT_EQ(LeaseKey("sluice:", "jobs"), "sluice:lease:{jobs}");
}

}  // namespace
}  // namespace sluice::internal
