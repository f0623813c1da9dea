// Redis Cluster as the Redis store reads it: the MOVED and ASK errors a node redirects a call
// with, and the slot map of a CLUSTER SLOTS reply, written by hand as Redis sends them.

#include "src/redis/cluster.h"

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "src/redis/keys.h"
#include "tests/redis/resp_reader.h"

namespace sluice::internal {
namespace {

using testing::ReadResp;

TEST(RedirectionTest, ReadsTheSlotAndTheAddressOfMovedAndAsk) {
  using Redirect = std::pair<int, RedisEndpoint>;
  EXPECT_EQ(Redirection("MOVED 3999 127.0.0.1:6381"), (Redirect{3999, {"127.0.0.1", 6381}}));
  EXPECT_EQ(Redirection("ASK 3999 127.0.0.1:6381"), (Redirect{3999, {"127.0.0.1", 6381}}));
  EXPECT_EQ(Redirection("MOVED 0 redis-2.internal:7000"),
            (Redirect{0, {"redis-2.internal", 7000}}));
  EXPECT_EQ(Redirection("MOVED 16383 10.0.0.1:65535"), (Redirect{16383, {"10.0.0.1", 65535}}));
  // The port is after the last ':', so an IPv6 address keeps its own.
  EXPECT_EQ(Redirection("ASK 12182 ::1:7001"), (Redirect{12182, {"::1", 7001}}));
}

TEST(RedirectionTest, RefusesAnErrorWithoutASlotAndAnAddress) {
  for (const char* error : {
           "MOVED",
           "MOVED 3999",
           "MOVED 3999 127.0.0.1",        // No port.
           "MOVED 127.0.0.1:6381",        // No slot.
           "MOVED x 127.0.0.1:6381",      // A slot that is not a number,
           "MOVED -1 127.0.0.1:6381",     // negative,
           "MOVED 16384 127.0.0.1:6381",  // or past the last.
           "MOVED 3999 127.0.0.1:0",      // A port out of range.
           "MOVED 3999 127.0.0.1:65536",  //
           "MOVED 3999 127.0.0.1:63x1",   // A port that is not a number.
           "MOVED 3999 127.0.0.1: 6381",  //
           "MOVED 3999: 127.0.0.1",       // The ':' before the address.
           "TRYAGAIN Multiple keys request during rehashing of slot",
           "",
       }) {
    EXPECT_EQ(Redirection(error), std::nullopt) << error;
  }
}

// CLUSTER SLOTS, by hand: an array of ranges, each [first, last, master, replicas...], each
// node [host, port, id].
std::string Array(std::initializer_list<std::string> items) {
  std::string out = fmt::format("*{}\r\n", items.size());
  for (const std::string& item : items) {
    out += item;
  }
  return out;
}
std::string Node(std::string_view host, int port) {
  return fmt::format("*3\r\n${}\r\n{}\r\n:{}\r\n$4\r\nid-1\r\n", host.size(), host, port);
}
std::string Range(int first, int last, const std::string& master, const std::string& replica = "") {
  return fmt::format("*{}\r\n:{}\r\n:{}\r\n{}{}", replica.empty() ? 3 : 4, first, last, master,
                     replica);
}

const RedisEndpoint kAsked{"10.0.0.9", 7009};

TEST(ReadClusterSlotsTest, ReadsEachRangeWithItsMaster) {
  // Three masters, the second with a replica, as redis-server 7 answers.
  const ReplyPtr reply = ReadResp(Array({
      Range(0, 5460, Node("10.0.0.1", 7000)),
      Range(5461, 10922, Node("10.0.0.2", 7001), Node("10.0.0.5", 7005)),
      Range(10923, 16383, Node("10.0.0.3", 7002)),
  }));
  ASSERT_NE(reply, nullptr);
  const std::optional<std::vector<SlotRange>> ranges = ReadClusterSlots(*reply, kAsked);
  ASSERT_TRUE(ranges.has_value());
  ASSERT_EQ(ranges->size(), 3u);
  EXPECT_EQ((*ranges)[0].first, 0);
  EXPECT_EQ((*ranges)[0].last, 5460);
  EXPECT_EQ((*ranges)[0].master, (RedisEndpoint{"10.0.0.1", 7000}));
  EXPECT_EQ((*ranges)[1].first, 5461);
  EXPECT_EQ((*ranges)[1].last, 10922);
  // The master, not the replica.
  EXPECT_EQ((*ranges)[1].master, (RedisEndpoint{"10.0.0.2", 7001}));
  EXPECT_EQ((*ranges)[2].first, 10923);
  EXPECT_EQ((*ranges)[2].last, kSlotCount - 1);
  EXPECT_EQ((*ranges)[2].master, (RedisEndpoint{"10.0.0.3", 7002}));
}

// A node that does not know its own address names it "" or "?": it is at the host the
// question went to, on the port it names.
TEST(ReadClusterSlotsTest, AMasterWithoutAnAddressIsAtTheHostAsked) {
  const ReplyPtr reply =
      ReadResp(Array({Range(0, 99, Node("", 7000)), Range(100, 199, Node("?", 7001))}));
  ASSERT_NE(reply, nullptr);
  const std::optional<std::vector<SlotRange>> ranges = ReadClusterSlots(*reply, kAsked);
  ASSERT_TRUE(ranges.has_value());
  ASSERT_EQ(ranges->size(), 2u);
  EXPECT_EQ((*ranges)[0].master, (RedisEndpoint{"10.0.0.9", 7000}));
  EXPECT_EQ((*ranges)[1].master, (RedisEndpoint{"10.0.0.9", 7001}));
}

TEST(ReadClusterSlotsTest, SkipsRangesOfAnotherShapeAndClampsSlots) {
  const ReplyPtr reply = ReadResp(Array({
      "*2\r\n:0\r\n:99\r\n",                             // No master,
      "*3\r\n:100\r\n:199\r\n$8\r\n10.0.0.1\r\n",        // a master that is no array,
      "*3\r\n:200\r\n:299\r\n*1\r\n$8\r\n10.0.0.1\r\n",  // or one without a port.
      Range(-5, 20000, Node("10.0.0.4", 7004)),          // Slots out of range.
  }));
  ASSERT_NE(reply, nullptr);
  const std::optional<std::vector<SlotRange>> ranges = ReadClusterSlots(*reply, kAsked);
  ASSERT_TRUE(ranges.has_value());
  ASSERT_EQ(ranges->size(), 1u);
  EXPECT_EQ((*ranges)[0].first, 0);
  EXPECT_EQ((*ranges)[0].last, kSlotCount - 1);
  EXPECT_EQ((*ranges)[0].master, (RedisEndpoint{"10.0.0.4", 7004}));
}

// An empty map is a map (no node serves any slot); an error is none at all.
TEST(ReadClusterSlotsTest, AnEmptyArrayIsAMapAndAnErrorIsNot) {
  const ReplyPtr empty = ReadResp("*0\r\n");
  ASSERT_NE(empty, nullptr);
  const std::optional<std::vector<SlotRange>> none = ReadClusterSlots(*empty, kAsked);
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->empty());
  const ReplyPtr error = ReadResp("-ERR This instance has cluster support disabled\r\n");
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(ReadClusterSlots(*error, kAsked), std::nullopt);
}

}  // namespace
}  // namespace sluice::internal
