// The configuration examples of envoyproxy/ratelimit's README over gRPC, as Envoy asks: the
// overall code and the current limit on the wire. envoy_examples_test.cc decides the same
// examples through the service, and envoy_examples.h is the fixture of both.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

#include "server/grpc/envoy_service.h"
#include "tests/server/envoy_examples.h"
#include "tests/testing/grpc.h"

namespace sluice::server {
namespace {

namespace rls = envoy::service::ratelimit::v3;

class EnvoyExamplesGrpcTest : public EnvoyExamplesTest {
 protected:
  void SetUp() override {
    envoy_ = std::make_unique<EnvoyGrpcService>(service_, EnvoyOptions{});
    absl::StatusOr<testing::LocalGrpc> grpc = testing::StartLocalGrpc(*envoy_);
    ASSERT_TRUE(grpc.ok()) << grpc.status();
    grpc_ = *std::move(grpc);
  }

  rls::RateLimitResponse MustAsk(const std::string& domain,
                                 const std::vector<Descriptor>& descriptors) {
    rls::RateLimitRequest request;
    request.set_domain(domain);
    for (const Descriptor& entries : descriptors) {
      auto* descriptor = request.add_descriptors();
      for (const Entry& entry : entries) {
        auto* added = descriptor->add_entries();
        added->set_key(entry.key);
        added->set_value(entry.value);
      }
    }
    rls::RateLimitResponse response;
    grpc::ClientContext context;
    const grpc::Status status = grpc_.stub->ShouldRateLimit(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.statuses_size(), static_cast<int>(descriptors.size()));
    return response;
  }

  std::unique_ptr<EnvoyGrpcService> envoy_;
  testing::LocalGrpc grpc_;
};

TEST_F(EnvoyExamplesGrpcTest, Example2OverallCodeIsTheOrOfTheDescriptors) {
  ASSERT_TRUE(Load("example2.yaml"));
  const std::vector<Descriptor> request = {
      {{"message_type", "marketing"}, {"to_number", "2061111111"}},
      {{"to_number", "2061111111"}},
  };
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(MustAsk("messaging", request).overall_code(), rls::RateLimitResponse::OK) << i;
  }
  const rls::RateLimitResponse sixth = MustAsk("messaging", request);
  ASSERT_EQ(sixth.statuses_size(), 2);
  EXPECT_EQ(sixth.overall_code(), rls::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(sixth.statuses(0).code(), rls::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(sixth.statuses(0).current_limit().requests_per_unit(), 5U);
  EXPECT_EQ(sixth.statuses(0).current_limit().unit(), rls::RateLimitResponse::RateLimit::DAY);
  EXPECT_EQ(sixth.statuses(0).limit_remaining(), 0U);
  EXPECT_EQ(sixth.statuses(1).code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(sixth.statuses(1).current_limit().requests_per_unit(), 100U);
  EXPECT_EQ(sixth.statuses(1).current_limit().unit(), rls::RateLimitResponse::RateLimit::DAY);
  EXPECT_EQ(sixth.statuses(1).limit_remaining(), 94U);
  // 43,199.75 s to midnight, in whole seconds as theirs: 43,200.
  EXPECT_EQ(sixth.statuses(1).duration_until_reset().seconds(), 43'200);
  EXPECT_EQ(sixth.statuses(1).duration_until_reset().nanos(), 0);
}

TEST_F(EnvoyExamplesGrpcTest, Example5UnlimitedIsOkWithMaxUint32AndNoCurrentLimit) {
  ASSERT_TRUE(Load("example5.yaml"));
  const rls::RateLimitResponse response =
      MustAsk("internal", {{{"ldap", "lookup"}}, {{"kerberos", "lookup"}}, {{"azure", "blob"}}});
  ASSERT_EQ(response.statuses_size(), 3);
  EXPECT_EQ(response.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(response.statuses(0).code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(response.statuses(0).limit_remaining(), kMaxUint32);
  EXPECT_FALSE(response.statuses(0).has_current_limit());
  // A descriptor that does not exist: OK too, but nothing remaining.
  EXPECT_EQ(response.statuses(1).code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(response.statuses(1).limit_remaining(), 0U);
  EXPECT_FALSE(response.statuses(1).has_current_limit());
  EXPECT_EQ(response.statuses(2).current_limit().requests_per_unit(), 100U);
  EXPECT_EQ(response.statuses(2).current_limit().unit(), rls::RateLimitResponse::RateLimit::MINUTE);
  EXPECT_EQ(response.statuses(2).limit_remaining(), 99U);
}

TEST_F(EnvoyExamplesGrpcTest, Example6ShadowModeAnswersOkOverall) {
  ASSERT_TRUE(Load("example6.yaml"));
  const Descriptor user_a = {{"service", "auth-service"}, {"user", "user-a"}};
  const Descriptor user_b = {{"service", "auth-service"}, {"user", "user-b"}};
  for (int i = 0; i < 20; ++i) {
    MustAsk("example6", {user_a, user_b});
  }
  const rls::RateLimitResponse shadow = MustAsk("example6", {user_a});
  EXPECT_EQ(shadow.overall_code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(shadow.statuses(0).code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(shadow.statuses(0).current_limit().requests_per_unit(), 10U);
  EXPECT_EQ(shadow.statuses(0).current_limit().unit(), rls::RateLimitResponse::RateLimit::SECOND);
  EXPECT_EQ(shadow.statuses(0).limit_remaining(), 0U);
  const rls::RateLimitResponse enforced = MustAsk("example6", {user_a, user_b});
  EXPECT_EQ(enforced.overall_code(), rls::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(enforced.statuses(0).code(), rls::RateLimitResponse::OK);
  EXPECT_EQ(enforced.statuses(1).code(), rls::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(enforced.statuses(1).current_limit().requests_per_unit(), 20U);
}

TEST_F(EnvoyExamplesGrpcTest, Example7ReplacedDescriptorHasNoCurrentLimit) {
  ASSERT_TRUE(Load("example7.yaml"));
  const rls::RateLimitResponse response = MustAsk(
      "example7",
      {{{"key_1", "value_1"}, {"user", "bkthomps"}}, {{"key_2", "value_2"}, {"user", "bkthomps"}}});
  ASSERT_EQ(response.statuses_size(), 2);
  EXPECT_EQ(response.statuses(0).code(), rls::RateLimitResponse::OK);
  EXPECT_FALSE(response.statuses(0).has_current_limit());
  EXPECT_EQ(response.statuses(1).current_limit().requests_per_unit(), 10U);
  EXPECT_EQ(response.statuses(1).limit_remaining(), 9U);
}

// Not in the README's text, but in what envoyproxy/ratelimit answers: current_limit carries
// rate_limit.name, so none for a rate_limit without one (sluiced's own path name for it,
// "mongo_cps.database_users", stays in /v1/check and /metrics).
TEST_F(EnvoyExamplesGrpcTest, UnnamedLimitHasNoNameOnTheWire) {
  ASSERT_TRUE(Load("example1.yaml"));
  const rls::RateLimitResponse response = MustAsk("mongo_cps", {{{"database", "users"}}});
  ASSERT_EQ(response.statuses_size(), 1);
  EXPECT_EQ(response.statuses(0).current_limit().requests_per_unit(), 500U);
  EXPECT_EQ(response.statuses(0).current_limit().name(), "");
}

}  // namespace
}  // namespace sluice::server
