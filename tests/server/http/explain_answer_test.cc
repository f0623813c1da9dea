// The "explain" object of the HTTP answers (server/http/explain_answer.h): POST /v1/check's for
// rules and ad hoc checks, POST /json's per descriptor, the debug listener's POST /json, and
// the refusals (a non-boolean explain, an acquire asked to explain).

#include <optional>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "server/http/api.h"
#include "server/http/debug.h"
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
    limits:
      - {name: minute, requests_per_unit: 10, unit: minute}
      - {name: second, requests_per_unit: 1, unit: second}
)";

class ExplainAnswerTest : public ::testing::Test {
 protected:
  ExplainAnswerTest()
      : clock_(At(kStart)),
        service_(store_, clock_, metrics_),
        api_(service_, metrics_, clock_, [] { return std::string(); }),
        debug_(service_, &api_) {
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
  }

  HttpResponse Post(HttpHandler& handler, std::string target, std::string body) {
    HttpRequest request{http::verb::post, target, 11};
    request.body() = std::move(body);
    request.prepare_payload();
    std::optional<HttpResponse> response;
    handler.Handle(
        request, "192.0.2.9", [&](HttpApi::Build build) { response = std::move(build)(); },
        nullptr);
    EXPECT_TRUE(response.has_value());  // The memory store answers at once.
    return response ? *std::move(response) : HttpResponse{};
  }

  static nlohmann::json Body(const HttpResponse& response) {
    return nlohmann::json::parse(response.body(), nullptr, false);
  }

  MemoryStore store_;
  ManualClock clock_;
  Metrics metrics_;
  RateLimitService service_;
  HttpApi api_;
  DebugApi debug_;
};

constexpr char kAnn[] =
    R"({"domain": "api", "explain": true, "descriptors": [{"entries": [{"key": "user", "value": "ann"}]}, {"entries": [{"key": "team", "value": "t"}]}]})";

TEST_F(ExplainAnswerTest, ACheckExplainsEachDescriptorAndTheDecider) {
  Post(api_, "/v1/check", kAnn);
  const HttpResponse denied = Post(api_, "/v1/check", kAnn);
  ASSERT_EQ(denied.result(), http::status::too_many_requests);
  const nlohmann::json body = Body(denied);
  ASSERT_TRUE(body.is_object()) << denied.body();
  const nlohmann::json& e = body["explain"];
  EXPECT_EQ(e["domain"], "api");
  EXPECT_EQ(e["cost"], 1);
  EXPECT_EQ(e["admitted"], false);
  EXPECT_EQ(e["decided_by"], (nlohmann::json{{"descriptor", 0}, {"limit", 1}, {"name", "second"}}));
  EXPECT_FALSE(e.contains("error"));
  const nlohmann::json& ann = e["descriptors"][0];
  EXPECT_EQ(ann["entries"], nlohmann::json::parse(R"([{"key":"user","value":"ann"}])"));
  EXPECT_EQ(ann["rule"], "api.user");
  EXPECT_EQ(ann["match"], "rule api.user");
  ASSERT_EQ(ann["limits"].size(), 2U);
  const nlohmann::json& second = ann["limits"][1];
  EXPECT_EQ(second["name"], "second");
  EXPECT_EQ(second["algorithm"], "fixed_window");
  EXPECT_EQ(second["allowed"], false);
  EXPECT_EQ(second["source"], "api.user");
  EXPECT_EQ(second["key"], "api user=ann");
  EXPECT_EQ(second["before"], nlohmann::json::parse(R"({"remaining":0,"reset_after_us":1000000})"));
  EXPECT_EQ(second["after"], second["before"]);
  EXPECT_EQ(second["verdict"], "denied");
  const nlohmann::json& team = e["descriptors"][1];
  EXPECT_TRUE(team["rule"].is_null());
  EXPECT_EQ(team["limits"], nlohmann::json::array());
}

TEST_F(ExplainAnswerTest, AnAdHocCheckIsExplained) {
  const HttpResponse response =
      Post(api_, "/v1/check", R"({"key": "k", "limit": 3, "period": "1m", "explain": true})");
  ASSERT_EQ(response.result(), http::status::ok);
  const nlohmann::json e = Body(response)["explain"];
  EXPECT_TRUE(e["domain"].is_null());
  EXPECT_EQ(e["descriptors"][0]["limits"][0]["key"], "k");
  EXPECT_EQ(e["descriptors"][0]["limits"][0]["after"]["remaining"], 2);
}

TEST_F(ExplainAnswerTest, EnvoysJsonExplainsEachDescriptorOnTheApiAndTheDebugListener) {
  constexpr char kEnvoy[] =
      R"({"domain": "api", "explain": true, "descriptors": [{"entries": [{"key": "user", "value": "bob"}]}]})";
  for (HttpHandler* handler :
       {static_cast<HttpHandler*>(&api_), static_cast<HttpHandler*>(&debug_)}) {
    clock_.Advance(std::chrono::seconds(1));
    const HttpResponse response = Post(*handler, "/json", kEnvoy);
    ASSERT_EQ(response.result(), http::status::ok) << response.body();
    const nlohmann::json body = Body(response);
    EXPECT_EQ(body["overallCode"], "OK");
    const nlohmann::json& d = body["explain"]["descriptors"][0];
    EXPECT_EQ(d["rule"], "api.user");
    EXPECT_EQ(d["cost"], 1);
    EXPECT_EQ(d["admitted"], true);
    EXPECT_EQ(d["decided_by"]["name"], "second");
    EXPECT_EQ(d["limits"][1]["after"]["remaining"], 0);
  }
  // Each descriptor's explanation sits at its index, and names it as the decider's.
  const HttpResponse two = Post(
      api_, "/json",
      R"({"domain": "api", "explain": true, "descriptors": [{"entries": [{"key": "team", "value": "t"}]}, {"entries": [{"key": "user", "value": "dee"}]}]})");
  const nlohmann::json explained = Body(two)["explain"]["descriptors"];
  ASSERT_EQ(explained.size(), 2U) << two.body();
  EXPECT_TRUE(explained[0]["decided_by"].is_null());
  EXPECT_EQ(explained[1]["decided_by"]["descriptor"], 1);
  // Without "explain", the answer is Envoy's alone.
  const HttpResponse plain =
      Post(api_, "/json",
           R"({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "cy"}]}]})");
  EXPECT_FALSE(Body(plain).contains("explain"));
}

TEST_F(ExplainAnswerTest, ExplainMustBeABooleanAndAnAcquireIsNotExplained) {
  HttpResponse response =
      Post(api_, "/v1/check", R"({"key": "k", "limit": 3, "period": "1m", "explain": 1})");
  EXPECT_EQ(response.result(), http::status::bad_request);
  EXPECT_NE(Body(response).value("error", "").find("explain"), std::string::npos);
  response =
      Post(api_, "/v1/acquire", R"({"key": "k", "limit": 3, "period": "1m", "explain": true})");
  EXPECT_EQ(response.result(), http::status::bad_request);
  EXPECT_NE(Body(response).value("error", "").find("POST /v1/check"), std::string::npos);
}

}  // namespace
}  // namespace sluice::server
