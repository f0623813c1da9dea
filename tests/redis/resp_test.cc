// RESP as the Redis store writes it by hand: bulk strings and commands, byte for byte, and
// read back by hiredis as Redis would read them.

#include "src/redis/resp.h"

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

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

}  // namespace
}  // namespace sluice::internal
