// The script's calling convention as the Redis store keeps it (src/redis/requests.lua's header):
// a batch of calls framed as one EVALSHA, and the script's reply read back into each call's
// decisions. Read as Redis and the store read them, by hiredis, without a server.

#include "src/redis/call.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "sluice/limit.h"
#include "sluice/redis_store.h"
#include "sluice/settle.h"
#include "sluice/store.h"
#include "tests/redis/resp_reader.h"
#include "tests/testing/util.h"

namespace sluice::internal {
namespace {

using testing::At;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using testing::kEpoch;
using testing::MustLimit;
using testing::ReadResp;
using namespace std::chrono_literals;

// The bulk strings of a RESP array, as text.
std::vector<std::string> Strings(const redisReply& reply) {
  std::vector<std::string> out;
  for (size_t i = 0; i < reply.elements; ++i) {
    out.emplace_back(reply.element[i]->str, reply.element[i]->len);
  }
  return out;
}

// A reply of integers, as the script answers: "*<n>\r\n:<v>\r\n...".
std::string IntegerReply(const std::vector<int64_t>& values) {
  std::string out = "*" + std::to_string(values.size()) + "\r\n";
  for (int64_t v : values) {
    out += ":" + std::to_string(v) + "\r\n";
  }
  return out;
}

TEST(BatchCommandTest, FramesCallsAsOneEvalshaInTheLayoutOfTheScript) {
  // A request on one limit, at Redis's time ('').
  Call limited;
  limited.cost = 1;
  AppendHead(limited, std::nullopt, 1);
  const Limit gcra =
      MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s, .burst = 20});
  AppendLimit(limited, "sluice:", "sluice:g10/1000000b20:{alice}", {&gcra, "alice"}, At(0));
  // A request of leases on two keys, at the caller's time.
  Call leases;
  leases.cost = static_cast<int64_t>(LeaseOp::kTake);
  leases.lease_id = "job-7";
  leases.lease_ttl = Micros{5'000'000};
  AppendHead(leases, At(kEpoch), 2);
  AppendLease(leases, "sluice:lease:{jobs}", {"jobs", 3});
  AppendLease(leases, "sluice:lease:{mail}", {"mail", 1});

  std::vector<CallPtr> calls;
  calls.push_back(std::make_unique<Call>(std::move(limited)));
  calls.push_back(std::make_unique<Call>(std::move(leases)));
  const ReplyPtr command = ReadResp(BatchCommand(calls, "0123abcd", "1000", 1234));
  ASSERT_NE(command, nullptr);
  ASSERT_EQ(command->type, REDIS_REPLY_ARRAY);
  EXPECT_THAT(Strings(*command),
              ElementsAreArray<std::string>({
                  "EVALSHA", "0123abcd", "3",  // The script, and the number of keys.
                  "sluice:g10/1000000b20:{alice}", "sluice:lease:{jobs}", "sluice:lease:{mail}",
                  "1000", "2", "1234",  // margin_ms, the number of requests, expires.
                  // time, cost, limit count, mode (decide); then algorithm (kGcra), N, P, B,
                  // K, N', P', and no earlier figures.
                  "", "1", "1", "0", "5", "10", "1000000", "20", "1", "1", "100000", "0",
                  // time, op (kTake), key count, mode; then per key 7, capacity, ttl, id, 0,
                  // 0, 0, and no earlier figures.
                  "1700000000000000", "1", "2", "0",                 //
                  "7", "3", "5000000", "job-7", "0", "0", "0", "0",  //
                  "7", "1", "5000000", "job-7", "0", "0", "0", "0",  //
              }));
}

// A limit a reload changed names its earlier figures: their keys follow the limit's, each with
// its mark key, and their figures its own, one argument each, with the ceiling a carried key
// is held to and whether each has its shape; figures the store cannot hold, and the limit's
// own, are left out. A give-back sends none.
// A call of `mode` on `now` for "alice", with `before`.
CallPtr CallWithEarlier(Call::Mode mode, const Limit& now, std::span<const Limit> before) {
  auto call = std::make_unique<Call>();
  call->mode = mode;
  AppendHead(*call, std::nullopt, 1);
  AppendLimit(*call, "p:", "p:g10/1000000b10:{alice}",
              {.limit = &now, .key = "alice", .before = before}, At(0));
  return call;
}

TEST(BatchCommandTest, FramesALimitsEarlierFiguresAfterItsOwn) {
  const Limit now = MustLimit({.algorithm = Algorithm::kGcra, .limit = 10, .period = 1s});
  const Limit before[] = {
      MustLimit({.algorithm = Algorithm::kGcra, .limit = 5, .period = 1s}),
      now,
      MustLimit({.algorithm = Algorithm::kGcra, .limit = 1, .period = 1s, .burst = 10'000'000'000}),
      MustLimit({.limit = 7, .period = 1min}),
  };
  ASSERT_FALSE(RedisStore::Supports(before[2]).ok());  // B x P' = 10^10 x 10^6 > 2^52.
  std::vector<CallPtr> calls;
  calls.push_back(CallWithEarlier(Call::Mode::kDecide, now, before));
  calls.push_back(CallWithEarlier(Call::Mode::kGiveBack, now, before));
  AppendCharge(*calls.back(), Charge{.at = At(0), .units = 1, .ahead = 100'000});
  const ReplyPtr command = ReadResp(BatchCommand(calls, "sha", "1000", std::nullopt));
  ASSERT_NE(command, nullptr);
  const std::string ceiling =
      std::to_string(std::min(10 + kMaxDebt, (int64_t{1} << 52) / now.rate_period_us()));
  // The keys: the limit's, then each earlier figure's and its mark's; the give-back's own.
  const std::vector<std::string> keys = {
      "p:g10/1000000b10:{alice}",                                    //
      "p:g5/1000000b5:{alice}",   "p:carried:g5/1000000b5:{alice}",  //
      "p:f7/60000000:{alice}",    "p:carried:f7/60000000:{alice}",   //
      "p:g10/1000000b10:{alice}"};
  std::vector<std::string> want = {"EVALSHA", "sha", "6"};
  want.insert(want.end(), keys.begin(), keys.end());
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"1000", "2", ""},  // margin, calls, expires
           {"", "0", "1", "0", "5", "10", "1000000", "10", "1", "1", "100000", "2"},
           // Each earlier figure: the ceiling, the same shape or not, its seven, cnt lo hi.
           {ceiling + " 1 5 5 1000000 5 1 1 200000 0 0 0",      // gcra
            ceiling + " 0 0 7 60000000 7 1 7 60000000 0 0 0"},  // fixed
           {"", "0", "1", "2", "5", "10", "1000000", "10", "1", "1", "100000", "0"},
           {"0", "1", "100000"},  // The charge given back.
       }) {
    want.insert(want.end(), args.begin(), args.end());
  }
  EXPECT_THAT(Strings(*command), ElementsAreArray(want));
}

// A record: its hash as the one key, a read's cursor and the fields to set after the head; and
// its reply, the fields and values after a count and the next cursor, read into the call.
TEST(BatchCommandTest, FramesARecordAndReadsItsFields) {
  const std::pair<std::string, std::string> fields[] = {{"path\nname", "fixed_window:5:1:5:1"}};
  Call write;
  write.mode = Call::Mode::kRecord;
  AppendHead(write, std::nullopt, 0);
  AppendRecord(write, "p:limits", "0", fields);
  std::vector<CallPtr> calls;
  calls.push_back(std::make_unique<Call>(std::move(write)));
  const ReplyPtr command = ReadResp(BatchCommand(calls, "sha", "1000", std::nullopt));
  ASSERT_NE(command, nullptr);
  EXPECT_THAT(Strings(*command), ElementsAreArray<std::string>(
                                     {"EVALSHA", "sha", "1", "p:limits", "1000", "1", "", "", "0",
                                      "0", "6", "0", "1", "path\nname", "fixed_window:5:1:5:1"}));
  const ReplyPtr reply =
      ReadResp("*7\r\n:1\r\n:4\r\n$2\r\n17\r\n$1\r\na\r\n$2\r\nxy\r\n$1\r\nb\r\n$0\r\n\r\n");
  ASSERT_NE(reply, nullptr);
  RedisStore::Record record;
  std::string cursor;
  Call read;
  read.mode = Call::Mode::kRecord;
  read.record = &record;
  read.record_cursor = &cursor;
  size_t at = 0;
  ASSERT_TRUE(ReadReply(*reply, at, read).ok());
  EXPECT_EQ(at, 7u);
  EXPECT_EQ(cursor, "17");
  EXPECT_EQ(record, (RedisStore::Record{{"a", "xy"}, {"b", ""}}));
  // A count past the reply, an odd one, or a cursor that is no string, is malformed.
  for (const char* bytes :
       {"*4\r\n:1\r\n:4\r\n$1\r\n0\r\n$1\r\na\r\n", "*4\r\n:1\r\n:1\r\n$1\r\n0\r\n$1\r\na\r\n",
        "*3\r\n:1\r\n:0\r\n:0\r\n"}) {
    const ReplyPtr bad = ReadResp(bytes);
    ASSERT_NE(bad, nullptr);
    at = 0;
    EXPECT_EQ(ReadReply(*bad, at, read).status().code(), absl::StatusCode::kInternal) << bytes;
  }
}

// Beside their framing, a call keeps its caller's keys (the reply's size, the local fallback's
// keys) and its limits or capacities (the local fallback's).
TEST(RedisClockTest, TimesOnRedisClockFollowTheSteadyClockFromTime) {
  // TIME answered 1,700,000,000 s and 250,000 us, arrived at `now` on the steady clock.
  const SteadyTime now = SteadyTime(std::chrono::hours(1000));
  const ReplyPtr time = ReadResp("*2\r\n$10\r\n1700000000\r\n$6\r\n250000\r\n");
  ASSERT_NE(time, nullptr);
  const std::optional<RedisClock> clock = ReadRedisClock(*time, now);
  ASSERT_TRUE(clock.has_value());
  EXPECT_EQ(clock->At(now), 1'700'000'000'250'000);
  EXPECT_EQ(clock->At(now + std::chrono::milliseconds(300)), 1'700'000'000'550'000);
  EXPECT_EQ(clock->At(now - std::chrono::seconds(1)), 1'699'999'999'250'000);
  for (std::string_view bytes : {"+OK\r\n", "*1\r\n$1\r\n1\r\n", "*2\r\n$1\r\nx\r\n$1\r\n1\r\n",
                                 "*2\r\n$2\r\n-1\r\n$1\r\n1\r\n", "*2\r\n:1\r\n:1\r\n"}) {
    const ReplyPtr reply = ReadResp(bytes);
    ASSERT_NE(reply, nullptr) << bytes;
    EXPECT_FALSE(ReadRedisClock(*reply, now).has_value()) << bytes;
  }
}

TEST(CallTest, KeepsWhatTheLocalFallbackAndTheReplyNeed) {
  Call limited;
  const Limit window = MustLimit({.limit = 5, .period = 1min});
  AppendLimit(limited, "", "k1", {&window, "alice"}, At(0));
  AppendLimit(limited, "", "k2", {&window, "{alice}:ip"}, At(0));
  EXPECT_THAT(limited.keys, ElementsAre("alice", "{alice}:ip"));
  EXPECT_THAT(limited.limits, ElementsAre(window, window));
  Call leases;
  AppendLease(leases, "k", {"jobs", 3});
  EXPECT_THAT(leases.keys, ElementsAre("jobs"));
  EXPECT_THAT(leases.capacities, ElementsAre(3));
  EXPECT_TRUE(leases.limits.empty());
}

// A call with a key for each of `each`, to which its decisions go.
Call CallOf(std::vector<Decision>& each) {
  Call call;
  call.keys.assign(each.size(), "k");
  call.each = each;
  return call;
}

TEST(ReadReplyTest, GivesEachCallItsDecisionsInOrder) {
  // 1, then five figures per key: allowed, remaining, reset_after, retry_after, delay.
  const ReplyPtr reply = ReadResp(IntegerReply({1, 1, 4, 100, 0, 0,  //
                                                1, 1, 2, 500, 0, 0, 0, 0, 900, 300, 7}));
  ASSERT_NE(reply, nullptr);
  std::vector<Decision> one(1);
  std::vector<Decision> two(2);
  Call first = CallOf(one);
  Call second = CallOf(two);
  size_t at = 0;
  const absl::StatusOr<Decision> a = ReadReply(*reply, at, first);
  EXPECT_EQ(at, 6u);
  const absl::StatusOr<Decision> b = ReadReply(*reply, at, second);
  EXPECT_EQ(at, 17u);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(one[0], (Decision{.allowed = true, .remaining = 4, .reset_after = Micros{100}}));
  EXPECT_EQ(*a, one[0]);
  EXPECT_EQ(two[0], (Decision{.allowed = true, .remaining = 2, .reset_after = Micros{500}}));
  EXPECT_EQ(two[1], (Decision{.allowed = false,
                              .remaining = 0,
                              .reset_after = Micros{900},
                              .retry_after = Micros{300},
                              .delay = Micros{7}}));
  EXPECT_EQ(*b, Combine(two));
  EXPECT_FALSE(b->allowed);
}

// A request the script refused (0 and a message) fails alone; the next is read after it.
TEST(ReadReplyTest, FailsOnlyTheCallTheScriptRefused) {
  const ReplyPtr reply =
      ReadResp("*8\r\n:0\r\n$20\r\nWRONGTYPE wrong kind\r\n:1\r\n:1\r\n:2\r\n:3\r\n:0\r\n:0\r\n");
  ASSERT_NE(reply, nullptr);
  std::vector<Decision> one(1);
  std::vector<Decision> other(1);
  Call refused = CallOf(one);
  Call next = CallOf(other);
  size_t at = 0;
  const absl::StatusOr<Decision> a = ReadReply(*reply, at, refused);
  EXPECT_TRUE(absl::IsInternal(a.status())) << a.status();
  EXPECT_EQ(a.status().message(), "redis: WRONGTYPE wrong kind");
  EXPECT_EQ(at, 2u);
  const absl::StatusOr<Decision> b = ReadReply(*reply, at, next);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->remaining, 2);
  EXPECT_EQ(at, 8u);
}

TEST(ReadReplyTest, RefusesAReplyOfAnotherShape) {
  std::vector<Decision> one(1);
  Call call = CallOf(one);
  auto read = [&](std::string_view bytes) {
    const ReplyPtr reply = ReadResp(bytes);
    if (reply == nullptr) {
      return std::string("not RESP");
    }
    size_t at = 0;
    absl::StatusOr<Decision> d = ReadReply(*reply, at, call);
    EXPECT_TRUE(absl::IsInternal(d.status())) << bytes;
    return std::string(d.status().message());
  };
  EXPECT_EQ(read(":1\r\n"), "redis: the script's reply is malformed");  // Not an array.
  EXPECT_EQ(read("*0\r\n"), "redis: the script's reply is malformed");  // Nothing for it.
  EXPECT_EQ(read("*1\r\n$1\r\n1\r\n"), "redis: the script's reply is malformed");  // No integer.
  EXPECT_EQ(read("*3\r\n:1\r\n:1\r\n:4\r\n"), "redis: the script's reply is short");
  EXPECT_EQ(read("*1\r\n:0\r\n"), "redis: script error");  // Refused, without a message.
}

}  // namespace
}  // namespace sluice::internal
