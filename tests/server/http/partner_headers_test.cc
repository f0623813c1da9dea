// Reading a partner's answer (server/http/partner_headers.h): every header form, HTTP dates,
// epoch resets, several values, and hostile values bounded or ignored with a note.

#include "server/http/partner_headers.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "tests/testing/util.h"

namespace sluice::server {
namespace {

using ::std::chrono::hours;
using ::std::chrono::milliseconds;
using ::std::chrono::seconds;

// 1994-11-06 08:49:37 UTC, RFC 9110's example date, is 784111777 in epoch seconds.
constexpr int64_t kExampleDate = 784'111'777;
const Timestamp kNow = Timestamp{seconds(kExampleDate - 120)};  // Two minutes before it.

PartnerAnswer Read(std::vector<PartnerHeader> headers, int status = 429, Timestamp now = kNow) {
  return ReadPartnerAnswer(status, headers, now);
}

bool Mentions(const PartnerAnswer& answer, std::string_view text) {
  for (const std::string& note : answer.notes) {
    if (note.find(text) != std::string::npos) {
      return true;
    }
  }
  return false;
}

TEST(PartnerHeaders, RetryAfterInSecondsAndMilliseconds) {
  EXPECT_EQ(Read({{"Retry-After", "5"}}).retry_after, seconds(5));
  EXPECT_EQ(Read({{"retry-after", " 0 "}}).retry_after, seconds(0));
  EXPECT_EQ(Read({{"Retry-After", "1.25"}}).retry_after, milliseconds(1250));
  EXPECT_EQ(Read({{"retry-after-ms", "250"}}).retry_after, milliseconds(250));
  EXPECT_EQ(Read({{"retry-after-ms", "0.5"}}).retry_after, Micros{500});
  // Both: the later.
  EXPECT_EQ(Read({{"Retry-After", "1"}, {"retry-after-ms", "1500"}}).retry_after,
            milliseconds(1500));
  EXPECT_TRUE(Read({{"Retry-After", "5"}}).notes.empty());
}

TEST(PartnerHeaders, RetryAfterAsAnHttpDateInItsThreeForms) {
  for (const char* date : {"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
                           "Sun Nov  6 08:49:37 1994"}) {
    const PartnerAnswer answer = Read({{"Retry-After", date}});
    EXPECT_EQ(answer.retry_after, seconds(120)) << date;
    EXPECT_TRUE(answer.notes.empty()) << date;
  }
  // A date already past: call again now.
  EXPECT_EQ(Read({{"Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"}}, 429,
                 Timestamp{seconds(kExampleDate + 10)})
                .retry_after,
            seconds(0));
}

TEST(PartnerHeaders, GarbageNegativesAndUnknownUnitsAreIgnoredWithAReason) {
  for (const char* bad :
       {"-5", "soon", "5s", "1e3", "", "0x10", "Sun, 32 Nov 1994 08:49:37 GMT", "5, 10"}) {
    const PartnerAnswer answer = Read({{"Retry-After", bad}});
    EXPECT_FALSE(answer.retry_after.has_value()) << bad;
    EXPECT_TRUE(Mentions(answer, "neither seconds nor an HTTP date")) << bad;
  }
  const PartnerAnswer remaining = Read({{"X-RateLimit-Remaining", "-1"}});
  EXPECT_FALSE(remaining.remaining.has_value());
  EXPECT_TRUE(Mentions(remaining, "not a count"));
  EXPECT_FALSE(Read({{"X-RateLimit-Remaining", "2.5"}}).remaining.has_value());
  EXPECT_FALSE(Read({{"X-RateLimit-Remaining", "99999999999999999999"}}).remaining.has_value());
  EXPECT_FALSE(Read({{"RateLimit-Reset", "later"}}).reset.has_value());
  const PartnerAnswer policy = Read({{"RateLimit-Policy", "\"a\";q=10;w=0"}});
  EXPECT_FALSE(policy.quota.has_value());
  EXPECT_TRUE(Mentions(policy, "not seconds above 0"));
}

TEST(PartnerHeaders, HugeTimesAreReadAsTheBoundAndSaySo) {
  const PartnerAnswer years = Read({{"Retry-After", "315360000"}});  // Ten years.
  EXPECT_EQ(years.retry_after, kMaxPartnerTime);
  EXPECT_TRUE(Mentions(years, "is read as"));
  const PartnerAnswer digits = Read({{"Retry-After", "99999999999999999999999999"}});
  EXPECT_EQ(digits.retry_after, kMaxPartnerTime);
  const PartnerAnswer reset = Read({{"RateLimit-Reset", "9999999999999"}});
  EXPECT_EQ(reset.reset, kMaxPartnerTime);
  EXPECT_EQ(Read({{"Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"}}).retry_after, kMaxPartnerTime);
}

TEST(PartnerHeaders, GitHubsXRateLimitWithAnEpochReset) {
  constexpr int64_t kLater = 1'795'000'000;  // 2026: epoch resets are 10^9 or more.
  const Timestamp now{seconds(kLater)};
  const PartnerAnswer answer = Read({{"X-RateLimit-Limit", "5000"},
                                     {"X-RateLimit-Remaining", "0"},
                                     {"X-RateLimit-Used", "5000"},
                                     {"X-RateLimit-Reset", std::to_string(kLater + 1800)}},
                                    403, now);
  EXPECT_EQ(answer.remaining, 0);
  EXPECT_EQ(answer.reset, seconds(1800));
  EXPECT_EQ(answer.quota, 5000);
  EXPECT_FALSE(answer.window.has_value());
  EXPECT_TRUE(answer.notes.empty());
  // A reset in the past is now; a small one is seconds from now.
  EXPECT_EQ(Read({{"X-RateLimit-Reset", std::to_string(kLater - 500)}}, 200, now).reset,
            seconds(0));
  EXPECT_EQ(Read({{"x-rate-limit-reset", "42"}}).reset, seconds(42));
  EXPECT_EQ(Read({{"X-RateLimit-Reset-After", "1.5"}}).reset, milliseconds(1500));
}

TEST(PartnerHeaders, Draft06SeparateFields) {
  const PartnerAnswer answer = Read({{"RateLimit-Limit", "100"},
                                     {"RateLimit-Remaining", "7"},
                                     {"RateLimit-Reset", "30"},
                                     {"RateLimit-Policy", "100;w=60, 1000;w=3600"}},
                                    200);
  EXPECT_EQ(answer.remaining, 7);
  EXPECT_EQ(answer.reset, seconds(30));
  // The slowest policy: 1000 per hour (0.28/s) rather than 100 per minute (1.7/s).
  EXPECT_EQ(answer.quota, 1000);
  EXPECT_EQ(answer.window, seconds(3600));
}

TEST(PartnerHeaders, IetfDraftStructuredFieldsTheFewestRemainingWithItsReset) {
  const PartnerAnswer answer =
      Read({{"RateLimit-Policy", R"("burst";q=10;w=1, "day";q=5000;w=86400)"},
            {"RateLimit", R"("day";r=4000;t=50000, "burst";r=0;t=1)"}},
           429);
  EXPECT_EQ(answer.remaining, 0);
  EXPECT_EQ(answer.reset, seconds(1));  // The burst's, not the day's.
  EXPECT_EQ(answer.quota, 5000);
  EXPECT_EQ(answer.window, seconds(86400));
  // A name with a comma and a semicolon in it is one member.
  const PartnerAnswer quoted = Read({{"RateLimit", R"("a,b;c";r=3;t=2)"}});
  EXPECT_EQ(quoted.remaining, 3);
  EXPECT_EQ(quoted.reset, seconds(2));
  EXPECT_TRUE(quoted.notes.empty());
}

TEST(PartnerHeaders, Draft07Dictionary) {
  const PartnerAnswer answer = Read({{"RateLimit", "limit=100, remaining=12, reset=9"}}, 200);
  EXPECT_EQ(answer.remaining, 12);
  EXPECT_EQ(answer.reset, seconds(9));
  EXPECT_EQ(answer.quota, 100);
}

TEST(PartnerHeaders, SeveralValuesAreReadAtTheMostCautious) {
  const PartnerAnswer answer = Read({{"Retry-After", "3"}, {"retry-after", "9"}});
  EXPECT_EQ(answer.retry_after, seconds(9));
  EXPECT_TRUE(Mentions(answer, "given 2 times"));
  // Lists paired by position: the fewest remaining with its own reset.
  const PartnerAnswer paired =
      Read({{"X-RateLimit-Remaining", "50, 2"}, {"X-RateLimit-Reset", "3600, 1"}}, 200);
  EXPECT_EQ(paired.remaining, 2);
  EXPECT_EQ(paired.reset, seconds(1));
  // Lists that cannot be paired: the fewest remaining until the latest reset, noted.
  const PartnerAnswer unpaired =
      Read({{"X-RateLimit-Remaining", "50, 2"}, {"X-RateLimit-Reset", "3600"}}, 200);
  EXPECT_EQ(unpaired.remaining, 2);
  EXPECT_EQ(unpaired.reset, seconds(3600));
  EXPECT_TRUE(Mentions(unpaired, "cannot be paired"));
}

TEST(PartnerHeaders, HeadersOtherThanLimitsAreSkippedAndFloodsBounded) {
  EXPECT_TRUE(Read({{"Content-Type", "text/html"}, {"X-Request-Id", "abc"}}).notes.empty());
  std::vector<PartnerHeader> flood(kMaxPartnerHeaders + 10, {"X-Other", "1"});
  flood.push_back({"Retry-After", "5"});  // Past the bound: not read.
  const PartnerAnswer answer = ReadPartnerAnswer(429, flood, kNow);
  EXPECT_FALSE(answer.retry_after.has_value());
  EXPECT_TRUE(Mentions(answer, "only the first"));
  // Many bad values: at most 16 notes, the last counting the rest.
  std::string members;
  for (int i = 0; i < 400; ++i) {
    members += "a,";
  }
  const PartnerAnswer many = Read({{"RateLimit", members}});
  EXPECT_EQ(many.notes.size(), 16u);
  EXPECT_NE(many.notes.back().find("more notes"), std::string::npos);
  EXPECT_FALSE(Read({{"Retry-After", "infinite-future"}}).retry_after.has_value());
  const PartnerAnswer huge = Read({{"Retry-After", std::string(kMaxPartnerValueBytes + 1, '1')}});
  EXPECT_FALSE(huge.retry_after.has_value());
  EXPECT_TRUE(Mentions(huge, "bytes"));
}

}  // namespace
}  // namespace sluice::server
