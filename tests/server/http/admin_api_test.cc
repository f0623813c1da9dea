// POST /v1/settle and POST /v1/reset through HttpApi: the receipt a check answers, its
// settle, and the admin token the reset needs (off without one, 401 without the header, 403
// with a wrong token); an explanation at cost 0 (a look at keys that may be another's) and the
// top offenders (GET /v1/top) need it too.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "server/http/api.h"
#include "sluice/memory_store.h"
#include "tests/testing/rules.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

namespace http = boost::beast::http;
using ::sluice::testing::At;

constexpr int64_t kStart = 1'700'000'000'000'000;  // A whole minute.

constexpr char kRules[] = R"(
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
)";
constexpr char kUser[] =
    R"({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "ann"}]}]})";
constexpr char kToken[] = "0123456789abcdef-admin";

class AdminApiTest : public ::testing::Test {
 protected:
  AdminApiTest()
      : clock_(At(kStart)),
        service_(store_, clock_, metrics_),
        api_(service_, metrics_, clock_, [] { return std::string(); }) {
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
  }

  HttpResponse Post(std::string target, std::string body,
                    std::optional<std::string> authorization = std::nullopt,
                    http::verb method = http::verb::post) {
    HttpRequest request{method, target, 11};
    if (authorization) {
      request.set(http::field::authorization, *authorization);
    }
    request.body() = std::move(body);
    request.prepare_payload();
    std::optional<HttpResponse> response;
    api_.Handle(request, "192.0.2.9", [&](HttpApi::Build build) { response = std::move(build)(); });
    EXPECT_TRUE(response.has_value());  // The memory store answers at once.
    return response ? *std::move(response) : HttpResponse{};
  }

  static nlohmann::json Body(const HttpResponse& response) {
    return nlohmann::json::parse(response.body(), nullptr, false);
  }

  // A check of kUser with a receipt; the receipt.
  std::string Charge() {
    std::string body = kUser;
    body.insert(body.size() - 1, R"(, "receipt": true)");
    const HttpResponse response = Post("/v1/check", body);
    EXPECT_EQ(response.result(), http::status::ok) << response.body();
    const nlohmann::json json = Body(response);
    EXPECT_GT(json.value("receipt_ttl_us", int64_t{0}), 0);
    return json.value("receipt", "");
  }

  int64_t Remaining() {
    std::string body = kUser;
    body.insert(body.size() - 1, R"(, "cost": 0)");
    return Body(Post("/v1/check", body)).value("remaining", int64_t{-1});
  }

  MemoryStore store_;
  ManualClock clock_;
  Metrics metrics_;
  RateLimitService service_;
  HttpApi api_;
};

TEST_F(AdminApiTest, ACheckAnswersAReceiptThatSettlesOnce) {
  const std::string receipt = Charge();
  ASSERT_FALSE(receipt.empty());
  ASSERT_EQ(Remaining(), 1);
  const std::string settle = nlohmann::json{{"receipt", receipt}, {"cost", 0}}.dump();
  HttpResponse response = Post("/v1/settle", settle);
  ASSERT_EQ(response.result(), http::status::ok) << response.body();
  const nlohmann::json json = Body(response);
  EXPECT_EQ(json["settled"], true);
  EXPECT_EQ(json["given_back"], 1);
  EXPECT_EQ(json["charged"], 0);
  EXPECT_EQ(json["limits"][0]["name"], "api.user");
  EXPECT_EQ(json["limits"][0]["remaining"], 2);
  EXPECT_EQ(Remaining(), 2);
  response = Post("/v1/settle", settle);
  EXPECT_EQ(response.result(), http::status::bad_request);
  EXPECT_EQ(Body(response)["error"], "receipt was settled already");
  EXPECT_EQ(Remaining(), 2);
}

TEST_F(AdminApiTest, ABadSettleIs400NamingItsProblem) {
  const std::string receipt = Charge();
  for (const auto& [body, says] : std::vector<std::pair<std::string, std::string>>{
           {R"({"receipt": "r1.x.y", "cost": 0})", "receipt"},
           {R"({"cost": 0})", "receipt is empty"},
           {nlohmann::json{{"receipt", receipt}}.dump(), "cost is missing"},
           {nlohmann::json{{"receipt", receipt}, {"cost", -1}}.dump(), "cost"},
           {nlohmann::json{{"receipt", receipt}, {"cost", 0}, {"extra", 1}}.dump(), "extra"},
           {R"({"receipt": 7, "cost": 0})", "receipt"},
           {"{", "JSON"}}) {
    const HttpResponse response = Post("/v1/settle", body);
    EXPECT_EQ(response.result(), http::status::bad_request) << body;
    EXPECT_NE(Body(response).value("error", "").find(says), std::string::npos)
        << body << " answered " << response.body();
  }
  EXPECT_EQ(Remaining(), 1);  // Nothing was given back.
}

TEST_F(AdminApiTest, ResetIsOffWithoutAnAdminToken) {
  const HttpResponse response = Post("/v1/reset", kUser, std::string("Bearer ") + kToken);
  EXPECT_EQ(response.result(), http::status::forbidden);
  EXPECT_NE(Body(response).value("error", "").find("--admin-token-file"), std::string::npos);
}

TEST_F(AdminApiTest, ResetNeedsTheRightBearerToken) {
  api_.SetAdminToken(AdminToken::Create(kToken).value());
  Charge();
  Charge();
  ASSERT_EQ(Remaining(), 0);
  HttpResponse response = Post("/v1/reset", kUser);
  EXPECT_EQ(response.result(), http::status::unauthorized);
  EXPECT_EQ(response[http::field::www_authenticate], "Bearer");
  response = Post("/v1/reset", kUser, "Bearer wrong-token-of-some-length");
  EXPECT_EQ(response.result(), http::status::forbidden);
  response = Post("/v1/reset", kUser, std::string("Bearer ") + kToken + "x");
  EXPECT_EQ(response.result(), http::status::forbidden);
  EXPECT_EQ(Remaining(), 0);  // Refused resets forgot nothing.
  EXPECT_EQ(metrics_.admin_refused(), 3U);
  response = Post("/v1/reset", kUser, std::string("Bearer ") + kToken);
  ASSERT_EQ(response.result(), http::status::ok) << response.body();
  EXPECT_EQ(Body(response)["limits"][0]["name"], "api.user");
  EXPECT_EQ(Remaining(), 2);
}

TEST_F(AdminApiTest, AnExplanationAtCostZeroNeedsTheAdminToken) {
  std::string look = kUser;
  look.insert(look.size() - 1, R"(, "cost": 0, "explain": true)");
  std::string own = kUser;
  own.insert(own.size() - 1, R"(, "explain": true)");
  HttpResponse response = Post("/v1/check", look, std::string("Bearer ") + kToken);
  EXPECT_EQ(response.result(), http::status::forbidden);  // Off without a token.
  EXPECT_NE(Body(response).value("error", "").find("an explanation at cost 0"), std::string::npos);
  // The caller's own request, charged, is explained to anyone.
  response = Post("/v1/check", own);
  ASSERT_EQ(response.result(), http::status::ok);
  EXPECT_EQ(Body(response)["explain"]["descriptors"][0]["limits"][0]["after"]["remaining"], 1);

  api_.SetAdminToken(AdminToken::Create(kToken).value());
  EXPECT_EQ(Post("/v1/check", look).result(), http::status::unauthorized);
  EXPECT_EQ(Post("/v1/check", look, "Bearer wrong-token-of-some-length").result(),
            http::status::forbidden);
  EXPECT_EQ(metrics_.admin_refused(), 3U);
  response = Post("/v1/check", look, std::string("Bearer ") + kToken);
  ASSERT_EQ(response.result(), http::status::ok) << response.body();
  const nlohmann::json limit = Body(response)["explain"]["descriptors"][0]["limits"][0];
  EXPECT_EQ(limit["before"]["remaining"], 1);
  EXPECT_EQ(limit["after"]["remaining"], 1);
  EXPECT_EQ(Remaining(), 1);  // The look charged nothing.
}

TEST_F(AdminApiTest, EnvoysJsonExplainedAtHitsAddendZeroNeedsTheAdminTokenToo) {
  constexpr char kLook[] =
      R"({"domain": "api", "explain": true, "descriptors": [{"entries": [{"key": "user", "value": "ann"}], "hitsAddend": 0}]})";
  constexpr char kOwn[] =
      R"({"domain": "api", "explain": true, "descriptors": [{"entries": [{"key": "user", "value": "ann"}]}]})";
  EXPECT_EQ(Post("/json", kLook).result(), http::status::forbidden);  // Off without a token.
  EXPECT_EQ(Post("/json", kOwn).result(), http::status::ok);
  api_.SetAdminToken(AdminToken::Create(kToken).value());
  EXPECT_EQ(Post("/json", kLook).result(), http::status::unauthorized);
  const HttpResponse response = Post("/json", kLook, std::string("Bearer ") + kToken);
  ASSERT_EQ(response.result(), http::status::ok) << response.body();
  EXPECT_TRUE(Body(response)["explain"]["descriptors"][0].is_object());
}

TEST_F(AdminApiTest, TopOffendersNeedTheAdminTokenAndHideKeysWhenAsked) {
  const auto get = [&](std::string target, std::optional<std::string> authorization) {
    return Post(std::move(target), "", std::move(authorization), http::verb::get);
  };
  const std::string bearer = std::string("Bearer ") + kToken;
  EXPECT_EQ(get("/v1/top", bearer).result(), http::status::forbidden);  // Off without a token.
  api_.SetAdminToken(AdminToken::Create(kToken).value());
  metrics_.top().Enable(true);  // As sluiced does with a token.
  for (int i = 0; i < 3; ++i) {
    Post("/v1/check", kUser);
  }
  EXPECT_EQ(get("/v1/top", std::nullopt).result(), http::status::unauthorized);
  HttpResponse response = get("/v1/top?rule=api.user&by=denied&n=5", bearer);
  ASSERT_EQ(response.result(), http::status::ok) << response.body();
  nlohmann::json body = Body(response);
  EXPECT_EQ(body["by"], "denied");
  EXPECT_EQ(body["window_s"], 300);
  ASSERT_EQ(body["rules"].size(), 1U);
  EXPECT_EQ(body["rules"][0]["rule"], "api.user");
  EXPECT_EQ(body["rules"][0]["total"], 1);
  EXPECT_EQ(body["rules"][0]["keys"][0]["key"], "api user=ann");
  EXPECT_EQ(body["rules"][0]["keys"][0]["count"], 1);
  body = Body(get("/v1/top?by=hits&rule=api%2Euser", bearer));
  EXPECT_EQ(body["rules"][0]["keys"][0]["count"], 3);
  EXPECT_EQ(Body(get("/v1/top?rule=nothing", bearer))["rules"], nlohmann::json::array());
  for (const char* bad :
       {"/v1/top?by=most", "/v1/top?n=0", "/v1/top?n=101", "/v1/top?x=1", "/v1/top?rule=%zz"}) {
    EXPECT_EQ(get(bad, bearer).result(), http::status::bad_request) << bad;
  }
  service_.SetKeyNames(KeyNames(/*hide=*/true));
  const std::string hidden = Body(get("/v1/top", bearer))["rules"][0]["keys"][0]["key"];
  EXPECT_EQ(hidden.size(), 17U);
  EXPECT_EQ(hidden.find("ann"), std::string::npos);
}

}  // namespace
}  // namespace sluice::server
