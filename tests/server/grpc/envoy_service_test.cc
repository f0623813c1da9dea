#include "server/grpc/envoy_service.h"

#include <map>
#include <memory>
#include <string>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "tests/testing/grpc.h"
#include "tests/testing/rules.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

namespace rls = envoy::service::ratelimit::v3;
using ::sluice::testing::At;

constexpr int64_t kSecond = 1'000'000;
// 1,700,000,040 s: a whole minute, 250 ms before the next second of the test.
constexpr int64_t kStart = 1'700'000'040 * kSecond;

constexpr char kRules[] = R"(
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
  - key: free
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: smooth
    rate_limit: {algorithm: gcra, requests_per_unit: 4, period: 1s}
)";

// The service over a real gRPC server on a loopback port, asked through a real channel.
class GrpcServiceTest : public ::testing::Test {
 protected:
  void StartWith(EnvoyOptions options, bool with_rules = true, EnvoySettings settings = {}) {
    service_ = std::make_unique<RateLimitService>(store_, clock_, metrics_, nullptr, settings);
    if (with_rules) {
      service_->SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
    }
    envoy_ = std::make_unique<EnvoyGrpcService>(*service_, options);
    absl::StatusOr<testing::LocalGrpc> grpc = testing::StartLocalGrpc(*envoy_);
    ASSERT_TRUE(grpc.ok()) << grpc.status();
    grpc_ = *std::move(grpc);
  }

  // A request with one descriptor per (key, value).
  static rls::RateLimitRequest Request(std::vector<std::pair<std::string, std::string>> entries,
                                       std::string domain = "api") {
    rls::RateLimitRequest request;
    request.set_domain(std::move(domain));
    for (auto& [key, value] : entries) {
      auto* entry = request.add_descriptors()->add_entries();
      entry->set_key(key);
      entry->set_value(value);
    }
    return request;
  }

  grpc::Status Ask(const rls::RateLimitRequest& request, rls::RateLimitResponse& response) {
    grpc::ClientContext context;
    return grpc_.stub->ShouldRateLimit(&context, request, &response);
  }

  rls::RateLimitResponse MustAsk(const rls::RateLimitRequest& request) {
    rls::RateLimitResponse response;
    const grpc::Status status = Ask(request, response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  MemoryStore store_;
  ManualClock clock_{At(kStart)};
  Metrics metrics_;
  std::unique_ptr<RateLimitService> service_;
  std::unique_ptr<EnvoyGrpcService> envoy_;
  testing::LocalGrpc grpc_;
};

TEST_F(GrpcServiceTest, FixedWindowAsEnvoyproxyRatelimit) {
  StartWith({});
  clock_.Advance(Micros{15 * kSecond});  // 45 s left in the minute.
  rls::RateLimitResponse first = MustAsk(Request({{"user", "bob"}, {"nothing", "x"}}));
  EXPECT_EQ(first.overall_code(), rls::RateLimitResponse::OK);
  ASSERT_EQ(first.statuses_size(), 2);
  const auto& status = first.statuses(0);
  EXPECT_EQ(status.code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(status.current_limit().name(), "per_user");
  EXPECT_EQ(status.current_limit().requests_per_unit(), 2U);
  EXPECT_EQ(status.current_limit().unit(), rls::RateLimitResponse::RateLimit::MINUTE);
  EXPECT_EQ(status.limit_remaining(), 1U);
  EXPECT_EQ(status.duration_until_reset().seconds(), 45);
  // No rule: OK, and no current limit.
  EXPECT_EQ(first.statuses(1).code(), rls::RateLimitResponse::OK);
  EXPECT_FALSE(first.statuses(1).has_current_limit());

  MustAsk(Request({{"user", "bob"}}));
  const rls::RateLimitResponse over = MustAsk(Request({{"user", "bob"}}));
  EXPECT_EQ(over.overall_code(), rls::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(over.statuses(0).code(), rls::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(over.statuses(0).limit_remaining(), 0U);
}

TEST_F(GrpcServiceTest, UnlimitedZeroAndOtherAlgorithms) {
  StartWith({});
  const rls::RateLimitResponse response =
      MustAsk(Request({{"free", "x"}, {"banned", "x"}, {"smooth", "s"}}));
  EXPECT_EQ(response.overall_code(), rls::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(response.statuses(0).code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(response.statuses(0).limit_remaining(), 4294967295U);
  EXPECT_FALSE(response.statuses(0).has_current_limit());
  EXPECT_EQ(response.statuses(1).code(), rls::RateLimitResponse::OVER_LIMIT);
  // gcra: the spec's reset_after (one emission interval, 250 ms), exact to the nanosecond.
  EXPECT_EQ(response.statuses(2).code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(response.statuses(2).current_limit().unit(), rls::RateLimitResponse::RateLimit::SECOND);
  EXPECT_EQ(response.statuses(2).duration_until_reset().seconds(), 0);
  EXPECT_EQ(response.statuses(2).duration_until_reset().nanos(), 250'000'000);
}

TEST_F(GrpcServiceTest, HitsAddendAndOverrides) {
  StartWith({});
  rls::RateLimitRequest request = Request({{"user", "carol"}, {"anything", "y"}});
  request.set_hits_addend(2);
  request.mutable_descriptors(1)->mutable_limit()->set_requests_per_unit(3);
  request.mutable_descriptors(1)->mutable_limit()->set_unit(envoy::type::v3::HOUR);
  rls::RateLimitResponse response = MustAsk(request);
  EXPECT_EQ(response.statuses(0).limit_remaining(), 0U);  // 2 of 2.
  EXPECT_EQ(response.statuses(1).current_limit().requests_per_unit(), 3U);
  EXPECT_EQ(response.statuses(1).limit_remaining(), 1U);
  // A per-descriptor hits_addend of 0 checks without counting.
  request.mutable_descriptors(0)->mutable_hits_addend()->set_value(0);
  request.mutable_descriptors(1)->mutable_hits_addend()->set_value(0);
  response = MustAsk(request);
  EXPECT_EQ(response.statuses(0).code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(response.statuses(1).limit_remaining(), 1U);
}

TEST_F(GrpcServiceTest, ShadowModes) {
  StartWith({.response_headers = true}, true, {.shadow_mode = true});
  MustAsk(Request({{"trial", "t"}}));
  // Per rule: the status itself is OK.
  const rls::RateLimitResponse trial = MustAsk(Request({{"trial", "t"}}));
  EXPECT_EQ(trial.statuses(0).code(), rls::RateLimitResponse::OK);
  // Global: the overall code is OK, the status still OVER_LIMIT.
  const rls::RateLimitResponse banned = MustAsk(Request({{"banned", "b"}}));
  EXPECT_EQ(banned.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(banned.statuses(0).code(), rls::RateLimitResponse::OVER_LIMIT);
  // The headers of the descriptor closest to its limit, by default as envoyproxy/ratelimit
  // names and tells them: a reset (the second's end) even for a request no wait lets through.
  ASSERT_EQ(banned.response_headers_to_add_size(), 3);
  EXPECT_EQ(banned.response_headers_to_add(0).key(), "RateLimit-Limit");
  EXPECT_EQ(banned.response_headers_to_add(0).value(), "0");
  EXPECT_EQ(banned.response_headers_to_add(1).key(), "RateLimit-Remaining");
  EXPECT_EQ(banned.response_headers_to_add(1).value(), "0");
  EXPECT_EQ(banned.response_headers_to_add(2).key(), "RateLimit-Reset");
  EXPECT_EQ(banned.response_headers_to_add(2).value(), "1");
}

std::map<std::string, std::string> Headers(const rls::RateLimitResponse& response) {
  std::map<std::string, std::string> headers;
  for (const auto& header : response.response_headers_to_add()) {
    EXPECT_TRUE(headers.emplace(header.key(), header.value()).second) << header.key();
  }
  return headers;
}

// envoyproxy/ratelimit's choice of the status its headers tell, found different by replaying
// requests to both (bench/peers/compare.sh): the first with the fewest remaining, a shadow-mode
// one included, unless one is over its limit outside quota mode (then the last such).
TEST_F(GrpcServiceTest, ResponseHeadersChooseAsTheReference) {
  StartWith({.response_headers = true});
  const auto request = Request({{"user", "u"}, {"trial", "t"}, {"smooth", "s"}});
  // The user's 1 left and the smooth limit's 3: the user's.
  rls::RateLimitResponse first = MustAsk(Request({{"user", "u"}, {"smooth", "s"}}));
  EXPECT_EQ(Headers(first), (std::map<std::string, std::string>{{"RateLimit-Limit", "2"},
                                                                {"RateLimit-Remaining", "1"},
                                                                {"RateLimit-Reset", "60"}}));
  // The user's and the shadow-mode trial's none left: the first of them.
  rls::RateLimitResponse second = MustAsk(request);
  EXPECT_EQ(second.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(Headers(second), (std::map<std::string, std::string>{{"RateLimit-Limit", "2"},
                                                                 {"RateLimit-Remaining", "0"},
                                                                 {"RateLimit-Reset", "60"}}));
  // A shadow-mode trial with none left (1,700,000,040 s is 840 s into an hour), over its limit
  // the second time: told, though it denies nothing.
  rls::RateLimitResponse third =
      MustAsk(Request({{"smooth", "s"}, {"trial", "t2"}, {"trial", "t2"}}));
  EXPECT_EQ(third.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(third.statuses(2).code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(Headers(third), (std::map<std::string, std::string>{{"RateLimit-Limit", "1"},
                                                                {"RateLimit-Remaining", "0"},
                                                                {"RateLimit-Reset", "2760"}}));
  // Over its limit (the user's third): that one, after any with none left.
  rls::RateLimitResponse fourth = MustAsk(Request({{"trial", "t2"}, {"user", "u"}}));
  EXPECT_EQ(fourth.overall_code(), rls::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(Headers(fourth), (std::map<std::string, std::string>{{"RateLimit-Limit", "2"},
                                                                 {"RateLimit-Remaining", "0"},
                                                                 {"RateLimit-Reset", "60"}}));
}

// The Envoy API tells the same figures as the HTTP API (rate_limit_headers.h), in the format
// chosen: draft-06 under envoyproxy/ratelimit's names by default, renamed by --header-*.
TEST_F(GrpcServiceTest, ResponseHeadersInEveryFormat) {
  StartWith({.response_headers = true,
             .headers = {.format = HeaderFormat::kDraft06, .limit_name = "A-Limit"},
             .clock = &clock_});
  auto request = Request({{"user", "u"}, {"smooth", "s"}});
  EXPECT_EQ(Headers(MustAsk(request)),
            (std::map<std::string, std::string>{
                {"A-Limit", "2"}, {"RateLimit-Remaining", "1"}, {"RateLimit-Reset", "60"}}));
  grpc_ = {};
  envoy_.reset();
  StartWith({.response_headers = true, .headers = {}, .clock = &clock_});
  EXPECT_EQ(Headers(MustAsk(request)),
            (std::map<std::string, std::string>{
                {"RateLimit-Policy", R"("per_user";q=2;w=60, "api.smooth";q=4;w=1)"},
                {"RateLimit", R"("per_user";r=0;t=60)"}}));
  grpc_ = {};
  envoy_.reset();
  StartWith({.response_headers = true,
             .headers = {.format = HeaderFormat::kXRateLimit},
             .clock = &clock_});
  const auto over = Headers(MustAsk(request));  // The user's third in the minute: over.
  EXPECT_EQ(over, (std::map<std::string, std::string>{{"X-RateLimit-Limit", "2"},
                                                      {"X-RateLimit-Remaining", "0"},
                                                      {"X-RateLimit-Used", "2"},
                                                      {"X-RateLimit-Reset", "1700000100"}}));
}

TEST_F(GrpcServiceTest, ErrorsAreGrpcErrorsNeverUnknown) {
  StartWith({});
  rls::RateLimitResponse response;
  EXPECT_EQ(Ask(Request({{"user", "x"}}, ""), response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Ask(Request({}), response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // An unknown domain is not an error: every status OK.
  const rls::RateLimitResponse unknown = MustAsk(Request({{"user", "x"}}, "other"));
  EXPECT_EQ(unknown.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_FALSE(unknown.statuses(0).has_current_limit());
}

TEST_F(GrpcServiceTest, NoRulesIsUnavailable) {
  StartWith({}, /*with_rules=*/false);
  rls::RateLimitResponse response;
  EXPECT_EQ(Ask(Request({{"user", "x"}}), response).error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace sluice::server
