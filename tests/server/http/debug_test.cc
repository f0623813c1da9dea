#include "server/http/debug.h"

#include <optional>
#include <string>

#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "tests/testing/rules.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

namespace http = boost::beast::http;

// Their example's shapes (nested descriptors, unlimited, requests_per_unit 0, shadow_mode,
// quota_mode) and sluice's own (a limit written with `period`, two limits on one descriptor), in
// two domains.
constexpr char kRules[] = R"(
domain: rl
descriptors:
  - key: foo
    rate_limit: {unit: minute, requests_per_unit: 2}
    descriptors:
      - key: bar
        value: banned
        rate_limit: {unit: minute, requests_per_unit: 0}
      - key: baz
        value: shady
        shadow_mode: true
        rate_limit: {unit: minute, requests_per_unit: 3}
  - key: bay
    rate_limit: {unlimited: true}
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: slow
    rate_limit: {algorithm: gcra, requests_per_unit: 1, period: 2500ms}
  - key: api_key
    limits:
      - {requests_per_unit: 5, unit: second}
      - {requests_per_unit: 100, unit: day}
)";

constexpr char kOther[] = R"(
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 500}
)";

class DebugApiTest : public ::testing::Test {
 protected:
  DebugApiTest() : clock_(testing::At(1'700'000'000'000'000)), service_(store_, clock_, metrics_) {}

  HttpResponse Send(http::verb method, std::string target) {
    const HttpRequest request{method, target, 11};
    std::optional<HttpResponse> response;
    api_.Handle(
        request, "192.0.2.9", [&](HttpHandler::Build build) { response = std::move(build)(); },
        nullptr);
    EXPECT_TRUE(response.has_value());  // Every page is answered at once.
    return response ? *std::move(response) : HttpResponse{};
  }

  MemoryStore store_;
  ManualClock clock_;
  Metrics metrics_;
  RateLimitService service_;
  DebugApi api_{service_};
};

TEST_F(DebugApiTest, RlconfigListsEveryLimitAsEnvoyproxyRatelimitDoes) {
  EXPECT_EQ(Send(http::verb::get, "/rlconfig").body(), "");  // No rules yet.
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
      RuleSet::Parse({{"rl.yaml", kRules}, {"mongo.yaml", kOther}}, metrics_.rules(),
                     [this](const Limit& limit) { return store_.CheckLimit(limit); });
  ASSERT_TRUE(rules.ok()) << rules.status();
  service_.SetRules(*rules);
  const HttpResponse response = Send(http::verb::get, "/rlconfig");
  EXPECT_EQ(response.result(), http::status::ok);
  EXPECT_EQ(response["Content-Type"], "text/plain; charset=utf-8");
  EXPECT_EQ(response.body(),
            "rl.foo: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false\n"
            "rl.foo.bar_banned: unit=MINUTE requests_per_unit=0, shadow_mode: false, "
            "quota_mode: false\n"
            "rl.foo.baz_shady: unit=MINUTE requests_per_unit=3, shadow_mode: true, "
            "quota_mode: false\n"
            "rl.bay: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n"
            "rl.service_service_1: unit=MINUTE requests_per_unit=1, shadow_mode: false, "
            "quota_mode: true\n"
            "rl.slow: unit=UNKNOWN requests_per_unit=1, shadow_mode: false, quota_mode: false, "
            "period: 2500ms\n"
            "rl.api_key: unit=SECOND requests_per_unit=5, shadow_mode: false, quota_mode: false\n"
            "rl.api_key: unit=DAY requests_per_unit=100, shadow_mode: false, quota_mode: false\n"
            "mongo_cps.database_users: unit=SECOND requests_per_unit=500, shadow_mode: false, "
            "quota_mode: false\n");
  const HttpResponse head = Send(http::verb::head, "/rlconfig");
  EXPECT_EQ(head.result(), http::status::ok);
  EXPECT_EQ(head.body(), "");
}

TEST_F(DebugApiTest, OtherPagesAndMethods) {
  const HttpResponse index = Send(http::verb::get, "/");
  EXPECT_EQ(index.result(), http::status::ok);
  EXPECT_NE(index.body().find("/rlconfig"), std::string::npos) << index.body();
  EXPECT_EQ(Send(http::verb::get, "/json").result(), http::status::not_found);
  const HttpResponse post = Send(http::verb::post, "/rlconfig");
  EXPECT_EQ(post.result(), http::status::method_not_allowed);
  EXPECT_EQ(post["Allow"], "GET, HEAD");
}

}  // namespace
}  // namespace sluice::server
