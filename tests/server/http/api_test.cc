#include "server/http/api.h"

#include <optional>
#include <string>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "sluice/memory_store.h"
#include "tests/testing/rules.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

namespace http = boost::beast::http;
using ::sluice::testing::At;
using ::testing::HasSubstr;

constexpr int64_t kSecond = 1'000'000;
// A whole second, so that windows of a second start with the test.
constexpr int64_t kStart = 1'700'000'000 * kSecond;

constexpr char kRules[] = R"(
domain: api
auth:
  - - {key: remote_address, header: ":remote_addr"}
  - - {key: api_key, header: x-api-key}
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: slow
    rate_limit: {algorithm: gcra, requests_per_unit: 1, period: 2500ms}
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: api_key
    limits:
      - {requests_per_unit: 5, unit: second}
      - {requests_per_unit: 100, unit: day}
)";

class HttpApiTest : public ::testing::Test {
 protected:
  HttpApiTest()
      : clock_(At(kStart)),
        service_(store_, clock_, metrics_),
        api_(service_, metrics_, clock_, [] { return std::string("sluice_store_keys 0\n"); }) {
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
  }

  HttpResponse Send(http::verb method, std::string target, std::string body = "",
                    std::vector<std::pair<std::string, std::string>> headers = {}) {
    HttpRequest request{method, target, 11};
    for (auto& [name, value] : headers) {
      request.set(name, value);
    }
    request.body() = std::move(body);
    request.prepare_payload();
    std::optional<HttpResponse> response;
    api_.Handle(request, "192.0.2.9", [&](HttpApi::Build build) { response = std::move(build)(); });
    // The memory store answers at once, so the answer comes before Handle returns.
    EXPECT_TRUE(response.has_value());
    return response ? *std::move(response) : HttpResponse{};
  }

  HttpResponse Post(std::string target, std::string body) {
    return Send(http::verb::post, std::move(target), std::move(body));
  }

  static nlohmann::json Body(const HttpResponse& response) {
    return nlohmann::json::parse(response.body(), nullptr, false);
  }

  static std::string Header(const HttpResponse& response, std::string_view name) {
    return response.has(name) ? std::string(response[name]) : "(none)";
  }

  MemoryStore store_;
  ManualClock clock_;
  Metrics metrics_;
  RateLimitService service_;
  HttpApi api_;
};

constexpr char kBob[] =
    R"({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "bob"}]}]})";

TEST_F(HttpApiTest, CheckAnswersWithTheFiguresAndTheStandardHeaders) {
  clock_.Advance(Micros{250'000});
  const HttpResponse first = Post("/v1/check", kBob);
  EXPECT_EQ(first.result(), http::status::ok);
  EXPECT_EQ(Header(first, "RateLimit-Policy"), R"("api.user";q=2;w=1)");
  EXPECT_EQ(Header(first, "RateLimit"), R"("api.user";r=1;t=1)");  // 0.75 s, rounded up.
  EXPECT_EQ(Header(first, "Retry-After"), "(none)");
  const nlohmann::json body = Body(first);
  EXPECT_EQ(body["allowed"], true);
  EXPECT_EQ(body["remaining"], 1);
  EXPECT_EQ(body["reset_after_us"], 750'000);
  EXPECT_EQ(body["limits"][0]["name"], "api.user");
  EXPECT_EQ(body["limits"][0]["algorithm"], "fixed_window");
  EXPECT_EQ(body["limits"][0]["period"], "1s");
  // The documented order of the fields.
  EXPECT_THAT(first.body(), ::testing::StartsWith(R"({"allowed":true,"remaining":1,)"));

  EXPECT_EQ(Post("/v1/check", kBob).result(), http::status::ok);
  const HttpResponse denied = Post("/v1/check", kBob);
  EXPECT_EQ(denied.result(), http::status::too_many_requests);
  EXPECT_EQ(Header(denied, "Retry-After"), "1");
  EXPECT_EQ(Body(denied)["retry_after_us"], 750'000);
}

TEST_F(HttpApiTest, RetryAfterIsWholeSecondsRoundedUp) {
  const std::string slow =
      R"({"domain": "api", "descriptors": [{"entries": [{"key": "slow", "value": "s"}]}]})";
  EXPECT_EQ(Post("/v1/check", slow).result(), http::status::ok);
  const HttpResponse denied = Post("/v1/check", slow);
  EXPECT_EQ(Body(denied)["retry_after_us"], 2'500'000);
  EXPECT_EQ(Header(denied, "Retry-After"), "3");
  clock_.Advance(Micros{2'499'999});
  const HttpResponse almost = Post("/v1/check", slow);
  EXPECT_EQ(Body(almost)["retry_after_us"], 1);
  EXPECT_EQ(Header(almost, "Retry-After"), "1");  // Never 0.
}

TEST_F(HttpApiTest, NeverAllowedHasNoRetryAfter) {
  const HttpResponse denied =
      Post("/v1/check",
           R"({"domain": "api", "descriptors": [{"entries": [{"key": "banned", "value": "x"}]}]})");
  EXPECT_EQ(denied.result(), http::status::too_many_requests);
  EXPECT_EQ(Body(denied)["retry_after_us"], -1);
  EXPECT_EQ(Header(denied, "Retry-After"), "(none)");
}

TEST_F(HttpApiTest, BadRequestsNameTheProblemAndChangeNothing) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "malformed JSON"},
      {"[1]", "JSON object"},
      {R"({"domain": 7, "descriptors": []})", "domain must be a string"},
      {R"({"domain": "api", "descriptors": {}})", "descriptors must be an array"},
      {R"({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "bob"}]}],
           "cost": -2})",
       "cost must be zero or more"},
      {R"({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "bob"}]}],
           "cost": "1"})",
       "cost must be an integer"},
      {R"({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "bob"}]}],
           "costs": 1})",
       "unknown field 'costs'"},
      {R"({"domain": "api", "descriptors": [{"entries": [{"value": "bob"}]}]})",
       "descriptors[0].entries[0].key is missing"},
      {R"({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "bob"}]}],
           "cost": 1.5})",
       "cost must be an integer"},
      {R"({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "bob"}]}],
           "cost": 9223372036854775808})",
       "cost is too large"},
      {R"({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "bob"}]}],
           "cost": 100000000000000000000000})",
       "malformed JSON: a number out of range"},
      {"{\"domain\": \"api\xff\", \"descriptors\": []}", "malformed JSON: not UTF-8"},
      {R"({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "bob"}]}],
           "cost": 0, "cost": 1})",
       "field 'cost' appears twice"},
      {R"({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "bob"}]},
           {"entries": [{"key": "user", "value": "bob", "key": "x"}]}]})",
       "field 'descriptors[1].entries[0].key' appears twice"},
      {R"({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": 3}]}]})",
       "descriptors[0].entries[0].value must be a string"},
      {R"({"key": "k", "limit": 5, "period": "1s", "algorithm": "magic"})",
       "unknown algorithm 'magic'"},
      {R"({"key": "k", "limit": 5, "period": "soon"})", "period"},
      {R"({"key": "k", "period": "1s"})", "limit is missing"},
      {R"({"key": "k", "limit": -5, "period": "1s"})", "limit"},
      {R"({"key": "", "limit": 5, "period": "1s"})", "key must be 1 to"},
  };
  for (const auto& [body, says] : cases) {
    const HttpResponse response = Post("/v1/check", body);
    EXPECT_EQ(response.result(), http::status::bad_request) << body;
    EXPECT_THAT(std::string(Body(response)["error"]), HasSubstr(says)) << body;
  }
  EXPECT_EQ(Body(Post("/v1/check", kBob))["remaining"], 1);
  EXPECT_THAT(Send(http::verb::get, "/metrics").body(),
              HasSubstr(fmt::format("sluice_bad_requests_total {}", cases.size())));
}

TEST_F(HttpApiTest, EnvoyJsonEndpoint) {
  const std::string request = R"({"domain": "api", "hitsAddend": 1, "descriptors": [
      {"entries": [{"key": "user", "value": "eve"}]},
      {"entries": [{"key": "nothing", "value": "x"}]},
      {"entries": [{"key": "user", "value": "eve2"}], "hits_addend": "3"}]})";
  const HttpResponse response = Post("/json", request);
  EXPECT_EQ(response.result(), http::status::too_many_requests);
  const nlohmann::json body = Body(response);
  EXPECT_EQ(body["overallCode"], "OVER_LIMIT");
  ASSERT_EQ(body["statuses"].size(), 3U);
  EXPECT_EQ(body["statuses"][0]["code"], "OK");
  EXPECT_EQ(body["statuses"][0]["currentLimit"]["requestsPerUnit"], 2);
  EXPECT_EQ(body["statuses"][0]["currentLimit"]["unit"], "SECOND");
  EXPECT_EQ(body["statuses"][0]["limitRemaining"], 1);
  EXPECT_EQ(body["statuses"][0]["durationUntilReset"], "1s");
  EXPECT_EQ(body["statuses"][1], nlohmann::json({{"code", "OK"}}));
  EXPECT_EQ(body["statuses"][2]["code"], "OVER_LIMIT");
  EXPECT_FALSE(body["statuses"][2].contains("limitRemaining"));  // 0 is omitted.

  EXPECT_EQ(Post("/json", R"({"domain": "", "descriptors": []})").result(),
            http::status::bad_request);
  EXPECT_EQ(Post("/json", R"({"domain": "api", "descriptors": []})").result(),
            http::status::bad_request);
  EXPECT_EQ(
      Post("/json", R"({"domain": "api", "descriptors": [{"entries": []}], "x": 1})").result(),
      http::status::bad_request);
  const HttpResponse bad_unit =
      Post("/json",
           R"({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "eve"}]},
          {"entries": [], "limit": {"requestsPerUnit": 3, "unit": "FORTNIGHT"}}]})");
  EXPECT_EQ(bad_unit.result(), http::status::bad_request);
  EXPECT_THAT(std::string(Body(bad_unit)["error"]),
              HasSubstr("descriptors[1].limit.unit must be SECOND"));
  const HttpResponse big_hits =
      Post("/json", R"({"domain": "api", "descriptors": [{"entries": [], "hitsAddend": "-1"}]})");
  EXPECT_THAT(std::string(Body(big_hits)["error"]),
              HasSubstr("descriptors[0].hitsAddend must be zero or more"));
}

TEST_F(HttpApiTest, AuthTakesDescriptorsFromHeadersAndThePeer) {
  const HttpResponse first = Send(http::verb::get, "/v1/auth", "", {{"X-Api-Key", "k1"}});
  EXPECT_EQ(first.result(), http::status::ok);
  EXPECT_EQ(Header(first, "RateLimit-Policy"),
            R"("api.remote_address";q=1;w=60, "api.api_key[0]";q=5;w=1, )"
            R"("api.api_key[1]";q=100;w=86400)");
  // The peer's limit is the closest.
  EXPECT_EQ(Header(first, "RateLimit"), R"("api.remote_address";r=0;t=40)");
  const HttpResponse second = Send(http::verb::get, "/v1/auth", "", {{"X-Api-Key", "k1"}});
  EXPECT_EQ(second.result(), http::status::forbidden);
  EXPECT_EQ(Header(second, "Retry-After"), "40");  // kStart is 20 s into its minute.
}

// A domain that is not loaded, or defines no 'auth', limits nothing: the request is admitted,
// as envoyproxy/ratelimit admits a domain it has no rules for, and as a request whose headers
// make no descriptor is. It was 503, which nginx's auth_request turns into 500.
TEST_F(HttpApiTest, AuthAdmitsADomainThatDefinesNoAuth) {
  for (int i = 0; i < 3; ++i) {  // The domain 'api' would deny the second.
    const HttpResponse answer =
        Send(http::verb::get, "/v1/auth?domain=other", "", {{"X-Api-Key", "k1"}});
    EXPECT_EQ(answer.result(), http::status::ok);
    EXPECT_EQ(Header(answer, "RateLimit"), "(none)");
  }
}

TEST_F(HttpApiTest, HeadIsAnsweredWithTheHeadersAlone) {
  const HttpResponse head = Send(http::verb::head, "/healthz");
  EXPECT_EQ(head.result(), http::status::ok);
  EXPECT_EQ(head.body(), "");
  EXPECT_EQ(Header(head, "Content-Length"), "15");  // As for GET: {"status":"ok"}.
  EXPECT_EQ(Send(http::verb::head, "/v1/auth", "", {{"X-Api-Key", "h"}}).body(), "");
}

TEST_F(HttpApiTest, AnswersAreValidJsonWhateverTheNamesHold) {
  // A rule file may hold bytes that are not UTF-8 (JSON requests cannot), and a quote.
  service_.SetRules(testing::MustParseRules(
      "domain: bad\ndescriptors:\n  - key: k\n    rate_limit: {name: \"n\xff\\\"x\", "
      "algorithm: gcra, unit: second, requests_per_unit: 5}\n",
      metrics_.rules(), store_, "bad.yaml"));
  const std::string replaced = "n\ufffd\"x";
  const nlohmann::json shown = Body(Send(http::verb::get, "/v1/rules"));
  ASSERT_TRUE(shown.is_object());
  EXPECT_EQ(shown["domains"][0]["rules"][0]["limits"][0]["name"], replaced);
  EXPECT_EQ(shown["domains"][0]["rules"][0]["limits"][0]["burst"], 5);
  const HttpResponse checked =
      Post("/v1/check",
           R"({"domain": "bad", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}]})");
  const nlohmann::json body = Body(checked);
  ASSERT_TRUE(body.is_object()) << checked.body();
  EXPECT_EQ(body["limits"][0]["name"], replaced);
}

TEST_F(HttpApiTest, OperationalEndpoints) {
  EXPECT_EQ(Send(http::verb::get, "/healthz").result(), http::status::ok);
  Post("/v1/check", kBob);
  const std::string metrics = Send(http::verb::get, "/metrics").body();
  EXPECT_THAT(metrics, HasSubstr("sluice_rule_checks_total{rule=\"api.user\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("sluice_decision_latency_seconds_count 1\n"));
  EXPECT_THAT(metrics, HasSubstr("sluice_store_keys 0\n"));
  const nlohmann::json rules = Body(Send(http::verb::get, "/v1/rules"));
  EXPECT_EQ(rules["domains"][0]["domain"], "api");
  EXPECT_EQ(rules["domains"][0]["rules"][0]["path"], "api.user");
  EXPECT_EQ(Send(http::verb::get, "/nope").result(), http::status::not_found);
  EXPECT_EQ(Send(http::verb::get, "/v1/check").result(), http::status::method_not_allowed);
  const HttpResponse wrong = Send(http::verb::delete_, "/metrics");
  EXPECT_EQ(wrong.result(), http::status::method_not_allowed);
  EXPECT_EQ(Header(wrong, "Allow"), "GET, HEAD");
}

// envoyproxy/ratelimit's /healthcheck: "OK" while the daemon's health says sluiced serves,
// else 500 and why. /healthz: the store's report, 200 while decisions can be made ("ok", or
// "degraded" when the failure policy makes them), else 503 and why.
TEST_F(HttpApiTest, HealthCheckAnswersAsTheHealthItIsGiven) {
  HttpApi::HealthReport health{.store = {{"store", "redis"}, {"redis", "up"}}};
  HttpApi api(service_, metrics_, clock_, nullptr, [&health] { return health; });
  auto get = [&api](std::string target) {
    const HttpRequest request{http::verb::get, target, 11};
    std::optional<HttpResponse> response;
    api.Handle(request, "192.0.2.9", [&](HttpApi::Build build) { response = std::move(build)(); });
    return response ? *std::move(response) : HttpResponse{};
  };
  HttpResponse ok = get("/healthcheck");
  EXPECT_EQ(ok.result(), http::status::ok);
  EXPECT_EQ(ok.body(), "OK");
  EXPECT_EQ(Header(ok, "Content-Type"), "text/plain; charset=utf-8");
  EXPECT_EQ(get("/healthz").body(), R"({"status":"ok","store":"redis","redis":"up"})");

  health.serving = absl::UnavailableError("stopping");  // Decisions are still made.
  HttpResponse down = get("/healthcheck");
  EXPECT_EQ(down.result(), http::status::internal_server_error);
  EXPECT_EQ(down.body(), "stopping\n");
  EXPECT_EQ(get("/healthz").result(), http::status::ok);

  health.store = {{"store", "redis"}, {"redis", "lost"}};
  health.degraded = true;  // The failure policy decides.
  health.serving = absl::OkStatus();
  HttpResponse degraded = get("/healthz");
  EXPECT_EQ(degraded.result(), http::status::ok);
  EXPECT_EQ(degraded.body(), R"({"status":"degraded","store":"redis","redis":"lost"})");

  health.decisions = absl::UnavailableError("no connection to Redis is ready");
  HttpResponse unavailable = get("/healthz");
  EXPECT_EQ(unavailable.result(), http::status::service_unavailable);
  EXPECT_EQ(Body(unavailable)["status"], "unavailable");
  EXPECT_EQ(Body(unavailable)["error"], "no connection to Redis is ready");
  // Without a health function (the api of the tests above), always OK.
  EXPECT_EQ(Send(http::verb::get, "/healthcheck").body(), "OK");
  EXPECT_EQ(Send(http::verb::post, "/healthcheck").result(), http::status::method_not_allowed);
}

}  // namespace
}  // namespace sluice::server
