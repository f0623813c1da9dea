// RESP as the Redis store writes it by hand: bulk strings and commands, byte for byte, and
// read back by hiredis as Redis would read them.

#include "src/redis/resp.h"

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

#include "tests/redis/resp_reader.h"

namespace sluice::internal {
namespace {

using testing::ReadResp;
using namespace std::string_view_literals;

TEST(AppendBulkTest, FramesBytesWithTheirLength) {
  std::string out;
  AppendBulk(out, "GET");
  EXPECT_EQ(out, "$3\r\nGET\r\n");
  out.clear();
  AppendBulk(out, "");
  EXPECT_EQ(out, "$0\r\n\r\n");
  // Binary: a NUL, CR LF and a high byte are content like any other, counted in the length.
  out.clear();
  AppendBulk(out, "a\0\r\n\xff"sv);
  EXPECT_EQ(out, "$5\r\na\0\r\n\xff\r\n"sv);
}

TEST(AppendBulkTest, FramesIntegersInDecimal) {
  std::string out;
  AppendBulk(out, int64_t{0});
  AppendBulk(out, int64_t{-42});
  AppendBulk(out, std::numeric_limits<int64_t>::max());
  AppendBulk(out, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(out,
            "$1\r\n0\r\n"
            "$3\r\n-42\r\n"
            "$19\r\n9223372036854775807\r\n"
            "$20\r\n-9223372036854775808\r\n");
}

TEST(AppendBulkTest, AppendsToWhatIsThere) {
  std::string out = "*2\r\n";
  AppendBulk(out, "a");
  AppendBulk(out, "bc");
  EXPECT_EQ(out, "*2\r\n$1\r\na\r\n$2\r\nbc\r\n");
}

TEST(CommandTest, IsAnArrayOfItsArgumentsAsBulkStrings) {
  EXPECT_EQ(Command({"ASKING"}), "*1\r\n$6\r\nASKING\r\n");
  EXPECT_EQ(Command({"CLUSTER", "SLOTS"}), "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n");
  EXPECT_EQ(Command({"AUTH", "user", ""}), "*3\r\n$4\r\nAUTH\r\n$4\r\nuser\r\n$0\r\n\r\n");
}

// What Redis reads is what was meant: hiredis parses the command back into its arguments,
// binary and empty ones included, with nothing left over.
TEST(CommandTest, ReadsBackAsItsArguments) {
  const std::string_view args[] = {"SET", "k\r\n", ""sv, "\0\xff"sv, "a longer argument"};
  const internal::ReplyPtr reply = ReadResp(Command({args[0], args[1], args[2], args[3], args[4]}));
  ASSERT_NE(reply, nullptr);
  ASSERT_EQ(reply->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(reply->elements, std::size(args));
  for (size_t i = 0; i < std::size(args); ++i) {
    ASSERT_EQ(reply->element[i]->type, REDIS_REPLY_STRING) << i;
    EXPECT_EQ(std::string_view(reply->element[i]->str, reply->element[i]->len), args[i]) << i;
  }
}

// Found by fuzz/resp_fuzz.cc: hiredis callocs a pointer per element an array announces, before
// any arrives, so 13 bytes from whatever answers at Redis's address ("*2147483647\r\n") took
// 16 GiB. The store's reader refuses an array longer than any reply it asks for.
TEST(ReaderTest, RefusesAnArrayLongerThanAnyReply) {
  const std::unique_ptr<redisReader, decltype(&redisReaderFree)> reader(CreateReader(),
                                                                        &redisReaderFree);
  int replies = 0;
  auto count = [&](ReplyPtr) { ++replies; };
  auto more = [] { return true; };
  const std::string too_long = fmt::format("*{}\r\n", kMaxReplyElements + 1);
  EXPECT_FALSE(ReadReplies(*reader, too_long.data(), too_long.size(), count, more));
  EXPECT_EQ(replies, 0);

  // Nested, the bound is smaller: CLUSTER SLOTS and ROLE nest short arrays.
  const std::unique_ptr<redisReader, decltype(&redisReaderFree)> nested(CreateReader(),
                                                                        &redisReaderFree);
  const std::string inner = fmt::format("*1\r\n*{}\r\n", kMaxNestedReplyElements + 1);
  EXPECT_FALSE(ReadReplies(*nested, inner.data(), inner.size(), count, more));
  EXPECT_EQ(replies, 0);
}

TEST(ReaderTest, ReadsArraysUpToTheBound) {
  const std::unique_ptr<redisReader, decltype(&redisReaderFree)> reader(CreateReader(),
                                                                        &redisReaderFree);
  std::vector<ReplyPtr> replies;
  auto keep = [&](ReplyPtr r) { replies.push_back(std::move(r)); };
  auto more = [] { return true; };
  std::string bytes = fmt::format("*2\r\n:7\r\n*{}\r\n", kMaxNestedReplyElements);
  for (int i = 0; i < kMaxNestedReplyElements; ++i) {
    bytes += ":1\r\n";
  }
  ASSERT_TRUE(ReadReplies(*reader, bytes.data(), bytes.size(), keep, more));
  ASSERT_EQ(replies.size(), 1u);
  ASSERT_EQ(replies[0]->elements, 2u);
  EXPECT_EQ(replies[0]->element[0]->integer, 7);
  EXPECT_EQ(replies[0]->element[1]->elements, static_cast<size_t>(kMaxNestedReplyElements));
}

}  // namespace
}  // namespace sluice::internal
