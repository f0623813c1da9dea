// The RateLimit headers of the HTTP API's decisions (server/service/rate_limit_headers.h), in each
// format: every algorithm (and soft mode) keeps remaining within the quota it advertises, a
// request that can never pass is said so, several limits are told apart, names are valid
// structured-field strings, and threads racing on one key are each told a remaining of their
// own, never above the quota.

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "server/http/api.h"
#include "sluice/memory_store.h"
#include "src/core/mutex.h"
#include "tests/testing/rules.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

namespace http = boost::beast::http;
using ::sluice::testing::At;

constexpr int64_t kSecond = 1'000'000;
constexpr int64_t kStart = 1'700'000'000 * kSecond;  // A whole second (and minute).

constexpr char kRules[] = R"(
domain: h
descriptors:
  - key: fixed_window
    rate_limit: {requests_per_unit: 3, unit: second}
  - key: sliding_log
    rate_limit: {algorithm: sliding_log, requests_per_unit: 3, period: 1s}
  - key: sliding_window
    rate_limit: {algorithm: sliding_window, requests_per_unit: 3, period: 1s}
  - key: sliding_buckets
    rate_limit: {algorithm: sliding_buckets, requests_per_unit: 3, period: 1s, buckets: 10}
  - key: token_bucket
    rate_limit: {algorithm: token_bucket, requests_per_unit: 10, period: 1s, burst: 20}
  - key: gcra
    rate_limit: {algorithm: gcra, requests_per_unit: 10, period: 1s, burst: 20}
  - key: leaky_bucket
    rate_limit: {algorithm: leaky_bucket, requests_per_unit: 10, period: 1s, burst: 20}
  - key: soft
    mode: soft
    soft_percent: 50
    rate_limit: {algorithm: gcra, requests_per_unit: 10, period: 1s, burst: 20}
  - key: multi
    limits:
      - {requests_per_unit: 2, unit: second}
      - {requests_per_unit: 100, unit: day, name: daily}
  - key: job
    concurrency: 2
  - key: odd
    rate_limit: {requests_per_unit: 5, unit: second, name: "a\"b\\c é%\t"}
)";

// A header's value, or "(none)".
std::string Header(const HttpResponse& response, std::string_view name) {
  return response.has(name) ? std::string(response[name]) : "(none)";
}

// sluiced's HTTP API over a memory store on a manual clock, telling decisions in `options`.
class HeadersTest : public ::testing::Test {
 protected:
  explicit HeadersTest(HeaderOptions options = {})
      : api_(
            service_, metrics_, clock_, [] { return std::string(); }, nullptr, std::move(options)) {
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
  }

  HttpResponse Check(const std::string& entries, int64_t cost = 1) {
    HttpRequest request{http::verb::post, "/v1/check", 11};
    request.body() =
        fmt::format(R"({{"domain": "h", "cost": {}, "descriptors": [{}]}})", cost, entries);
    request.prepare_payload();
    std::optional<HttpResponse> response;
    api_.Handle(request, "192.0.2.9", [&](HttpApi::Build build) { response = std::move(build)(); });
    EXPECT_TRUE(response.has_value());
    return response ? *std::move(response) : HttpResponse{};
  }

  // A descriptor of one entry.
  static std::string One(std::string_view key, std::string_view value = "v") {
    return fmt::format(R"({{"entries": [{{"key": "{}", "value": "{}"}}]}})", key, value);
  }

  MemoryStore store_;
  ManualClock clock_{At(kStart)};
  Metrics metrics_;
  RateLimitService service_{store_, clock_, metrics_};
  HttpApi api_;
};

// `"NAME";r=R` (and `;t=T`) of a RateLimit field: R, or -1 when it does not match.
int64_t Remaining(const std::string& field, std::string_view name) {
  const std::regex pattern("^\"" + std::string(name) + "\";r=([0-9]+)(;t=[0-9]+)?$");
  std::smatch match;
  return std::regex_match(field, match, pattern) ? std::stoll(match[1]) : -1;
}

TEST_F(HeadersTest, EveryAlgorithmTellsItsQuotaAndNeverMoreRemaining) {
  // The quota of a limit with a burst is the burst, over the time the rate takes to refill
  // it: gcra 10/s burst 20 is 20 per 2 s. Soft mode tells the nominal limit.
  const std::map<std::string, std::string> policies = {
      {"fixed_window", "q=3;w=1"},    {"sliding_log", "q=3;w=1"},   {"sliding_window", "q=3;w=1"},
      {"sliding_buckets", "q=3;w=1"}, {"token_bucket", "q=20;w=2"}, {"gcra", "q=20;w=2"},
      {"leaky_bucket", "q=20;w=2"},   {"soft", "q=20;w=2"},
  };
  for (const auto& [key, policy] : policies) {
    SCOPED_TRACE(key);
    const std::string name = "h." + key;
    int64_t last = INT64_MAX;
    bool denied = false;
    for (int i = 0; i < 40; ++i) {
      const HttpResponse answer = Check(One(key));
      EXPECT_EQ(Header(answer, "RateLimit-Policy"), fmt::format("\"{}\";{}", name, policy));
      const int64_t quota = std::stoll(policy.substr(2));
      const int64_t remaining = Remaining(Header(answer, "RateLimit"), name);
      ASSERT_GE(remaining, 0) << Header(answer, "RateLimit");
      EXPECT_LE(remaining, quota);
      EXPECT_LE(remaining, last);  // The clock stands still: nothing comes back.
      last = remaining;
      const nlohmann::json body = nlohmann::json::parse(answer.body());
      if (answer.result() == http::status::ok) {
        EXPECT_FALSE(denied) << "admitted after a denial at the same instant";
        EXPECT_EQ(remaining, std::min<int64_t>(quota, body["limits"][0]["remaining"]));
      } else {
        denied = true;
        EXPECT_EQ(remaining, 0);
        EXPECT_NE(Header(answer, "Retry-After"), "(none)");
      }
    }
    EXPECT_TRUE(denied);
  }
}

TEST_F(HeadersTest, ARequestThatCanNeverPassIsToldSo) {
  const HttpResponse answer = Check(One("fixed_window"), /*cost=*/4);  // Above the limit of 3.
  EXPECT_EQ(answer.result(), http::status::too_many_requests);
  // No reset and no Retry-After: no wait lets it through.
  EXPECT_EQ(Header(answer, "RateLimit"), R"("h.fixed_window";r=0)");
  EXPECT_EQ(Header(answer, "Retry-After"), "(none)");
  // Cost 21 against gcra's burst of 20 (its quota).
  const HttpResponse burst = Check(One("gcra"), 21);
  EXPECT_EQ(burst.result(), http::status::too_many_requests);
  EXPECT_EQ(Header(burst, "RateLimit"), R"("h.gcra";r=0)");
  EXPECT_EQ(Header(burst, "Retry-After"), "(none)");
  // Cost 3 against 2/s and 100/day, the day's quota fresh: the limit that can never admit it
  // is told, not the one with the most left.
  const HttpResponse several = Check(One("multi"), 3);
  EXPECT_EQ(Header(several, "RateLimit"), R"("h.multi[0]";r=0)");
  EXPECT_EQ(Header(several, "Retry-After"), "(none)");
}

TEST_F(HeadersTest, SeveralLimitsAreToldApart) {
  const HttpResponse answer = Check(One("multi"));
  EXPECT_EQ(Header(answer, "RateLimit-Policy"), R"("h.multi[0]";q=2;w=1, "daily";q=100;w=86400)");
  EXPECT_EQ(Header(answer, "RateLimit"), R"("h.multi[0]";r=1;t=1)");
  // One rule for two values in one request: each its own partition key, stable.
  const HttpResponse two = Check(One("fixed_window", "alice") + "," + One("fixed_window", "bob"));
  const std::string policy = Header(two, "RateLimit-Policy");
  const std::regex pk(R"re("h.fixed_window";q=3;w=1;pk=:([A-Za-z0-9+/=]+):)re");
  const std::vector<std::string> keys(
      std::sregex_token_iterator(policy.begin(), policy.end(), pk, 1), {});
  ASSERT_EQ(keys.size(), 2U) << policy;
  EXPECT_NE(keys[0], keys[1]);
  EXPECT_EQ(keys[0].size(), 12U);  // 9 bytes.
  EXPECT_EQ(Header(Check(One("fixed_window", "alice") + "," + One("fixed_window", "bob")),
                   "RateLimit-Policy"),
            policy);
}

TEST_F(HeadersTest, ConcurrencyLimitsAreConcurrentRequests) {
  const HttpResponse answer = Check(One("job"));
  EXPECT_EQ(Header(answer, "RateLimit-Policy"),
            R"("h.job:concurrency";q=2;qu="concurrent-requests")");
  EXPECT_EQ(Remaining(Header(answer, "RateLimit"), "h.job:concurrency"), 1);
}

TEST_F(HeadersTest, NamesAreValidStructuredFieldStrings) {
  // `"` and `\` escaped; a byte outside printable ASCII, and `%`, percent-encoded (RFC 9651
  // strings hold printable ASCII alone).
  const HttpResponse answer = Check(One("odd"));
  EXPECT_EQ(Header(answer, "RateLimit-Policy"), R"("a\"b\\c %c3%a9%25%09";q=5;w=1)");
}

class Draft06Test : public HeadersTest {
 protected:
  Draft06Test() : HeadersTest({.format = HeaderFormat::kDraft06}) {}
};

TEST_F(Draft06Test, TheOldFieldsWithTheSameFigures) {
  const HttpResponse answer = Check(One("gcra"));
  EXPECT_EQ(Header(answer, "RateLimit-Limit"), "20");  // Was 10, with Remaining 19.
  EXPECT_EQ(Header(answer, "RateLimit-Remaining"), "19");
  EXPECT_EQ(Header(answer, "RateLimit-Reset"), "1");  // 0.1 s, rounded up.
  EXPECT_EQ(Header(answer, "RateLimit-Policy"), "20;w=2");
  EXPECT_EQ(Header(answer, "RateLimit"), "(none)");
  const HttpResponse never = Check(One("fixed_window"), 4);
  EXPECT_EQ(Header(never, "RateLimit-Remaining"), "0");   // Was 2.
  EXPECT_EQ(Header(never, "RateLimit-Reset"), "(none)");  // Was 0.
  EXPECT_EQ(Header(never, "Retry-After"), "(none)");
}

class XRateLimitTest : public HeadersTest {
 protected:
  XRateLimitTest() : HeadersTest({.format = HeaderFormat::kXRateLimit}) {}
};

TEST_F(XRateLimitTest, GitHubsFieldsWithResetInEpochSeconds) {
  clock_.Advance(Micros{250'000});
  Check(One("fixed_window"));
  const HttpResponse answer = Check(One("fixed_window"));
  EXPECT_EQ(Header(answer, "X-RateLimit-Limit"), "3");
  EXPECT_EQ(Header(answer, "X-RateLimit-Remaining"), "1");
  EXPECT_EQ(Header(answer, "X-RateLimit-Used"), "2");
  EXPECT_EQ(Header(answer, "X-RateLimit-Reset"), "1700000001");  // The window's end.
  EXPECT_EQ(Header(answer, "RateLimit-Policy"), "(none)");
}

// Threads race on one key at a frozen instant: each admitted request is told a remaining of
// its own (20 admitted: 19 down to 0, each once), never above the quota; denials say 0.
TEST_F(HeadersTest, ConcurrentRequestsAreEachToldTheirOwnRemaining) {
  constexpr int kThreads = 8;
  constexpr int kEach = 10;
  internal::Mutex mutex;
  std::vector<int64_t> admitted;
  int denied = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        const HttpResponse answer = Check(One("gcra", "shared"));
        const int64_t remaining = Remaining(Header(answer, "RateLimit"), "h.gcra");
        internal::MutexLock lock(mutex);
        EXPECT_GE(remaining, 0);
        EXPECT_LE(remaining, 20);
        if (answer.result() == http::status::ok) {
          admitted.push_back(remaining);
        } else {
          EXPECT_EQ(remaining, 0);
          ++denied;
        }
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  std::sort(admitted.begin(), admitted.end());
  std::vector<int64_t> expected(20);
  for (int64_t i = 0; i < 20; ++i) {
    expected[static_cast<size_t>(i)] = i;
  }
  EXPECT_EQ(admitted, expected);
  EXPECT_EQ(denied, kThreads * kEach - 20);
}

}  // namespace
}  // namespace sluice::server
