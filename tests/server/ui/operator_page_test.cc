// OperatorPage (server/ui/operator_page.h) without sockets: who may see the page and its data
// (the admin token as Bearer or as a browser's Basic credential, and only under /ui), what it
// forwards to the API, the CSRF checks of its one POST, the headers of every answer, the series
// and the burst picture. The page in a browser: tests/ui/page.test.js.

#include "server/ui/operator_page.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "server/ui/burst_picture.h"
#include "sluice/memory_store.h"
#include "tests/testing/rules.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

namespace http = boost::beast::http;
using ::sluice::testing::At;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr int64_t kStart = 1'700'000'000'000'000;

constexpr char kRules[] = R"(
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: plan
    limits:
      - {name: burst, algorithm: token_bucket, requests_per_unit: 10, period: 1m, burst: 4}
      - {name: daily, algorithm: fixed_window, requests_per_unit: 100, period: 1d}
  - key: health
    rate_limit: {unlimited: true}
)";
constexpr char kToken[] = "operator-page-token-0123";
constexpr char kCheck[] =
    R"({"domain": "shop", "descriptors": [{"entries": [{"key": "user", "value": "ann"}]}],
        "cost": 0, "explain": true})";

std::string Basic(const std::string& user_password) {
  std::string encoded;
  absl::Base64Escape(user_password, &encoded);
  return "Basic " + encoded;
}

// What a request to the page carries: by default, the page's own POST with the token.
struct Headers {
  std::optional<std::string> authorization = Basic(std::string("operator:") + kToken);
  std::string content_type = "application/json";
  std::string fetch_site;
};

class OperatorPageTest : public ::testing::Test {
 protected:
  OperatorPageTest()
      : clock_(At(kStart)),
        service_(store_, clock_, metrics_),
        api_(service_, metrics_, clock_, [] { return std::string(); }),
        page_(api_, service_, history_, metrics_, *AdminToken::Create(kToken), clock_) {
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
    api_.SetAdminToken(*AdminToken::Create(kToken));
  }

  HttpResponse Ask(std::string target, http::verb method = http::verb::get, std::string body = {},
                   Headers headers = {}) {
    HttpRequest request{method, target, 11};
    if (headers.authorization) {
      request.set(http::field::authorization, *headers.authorization);
    }
    if (!headers.content_type.empty()) {
      request.set(http::field::content_type, headers.content_type);
    }
    if (!headers.fetch_site.empty()) {
      request.set("Sec-Fetch-Site", headers.fetch_site);
    }
    request.body() = std::move(body);
    request.prepare_payload();
    std::optional<HttpResponse> response;
    page_.Handle(
        request, "192.0.2.9", [&](HttpHandler::Build build) { response = std::move(build)(); },
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
  RateHistory history_;
  OperatorPage page_;
};

TEST_F(OperatorPageTest, NothingUnderUiWithoutTheToken) {
  const uint64_t refused = metrics_.admin_refused();
  for (const char* target :
       {"/ui", "/ui/", "/ui/ui.js", "/ui/api/series", "/ui/api/rules", "/ui/api/health",
        "/ui/api/top", "/ui/api/simulate?rule=shop.user&burst=3", "/ui/nothing"}) {
    for (const std::optional<std::string>& authorization :
         {std::optional<std::string>(),
          std::optional<std::string>(Basic("operator:wrong-token-0123")),
          std::optional<std::string>("Bearer wrong-token-012345"),
          std::optional<std::string>(Basic(std::string(kToken) + ":"))}) {
      const HttpResponse response =
          Ask(target, http::verb::get, {}, Headers{.authorization = authorization});
      EXPECT_EQ(response.result(), http::status::unauthorized) << target;
      EXPECT_THAT(std::string(response[http::field::www_authenticate]), StartsWith("Basic realm="));
      EXPECT_THAT(response.body(), Not(HasSubstr("<html")));
      EXPECT_THAT(std::string(response["Content-Security-Policy"]),
                  HasSubstr("default-src 'none'"));
    }
  }
  EXPECT_EQ(Ask("/ui/api/check", http::verb::post, kCheck, Headers{.authorization = std::nullopt})
                .result(),
            http::status::unauthorized);
  EXPECT_GT(metrics_.admin_refused(), refused);
}

TEST_F(OperatorPageTest, TheTokenAsBasicOrBearerOpensThePage) {
  for (const std::string& authorization :
       {Basic(std::string("anyone:") + kToken), std::string("Bearer ") + kToken}) {
    const HttpResponse response =
        Ask("/ui/", http::verb::get, {}, Headers{.authorization = authorization});
    ASSERT_EQ(response.result(), http::status::ok);
    EXPECT_THAT(std::string(response[http::field::content_type]), StartsWith("text/html"));
    EXPECT_THAT(response.body(), HasSubstr("/ui/charts.js"));
    EXPECT_THAT(std::string(response["Content-Security-Policy"]), HasSubstr("script-src 'self'"));
    EXPECT_EQ(response["X-Content-Type-Options"], "nosniff");
    EXPECT_EQ(response[http::field::cache_control], "no-store");
  }
  const HttpResponse script = Ask("/ui/ui.js");
  EXPECT_EQ(script.result(), http::status::ok);
  EXPECT_THAT(std::string(script[http::field::content_type]), StartsWith("text/javascript"));
  EXPECT_EQ(Ask("/ui/ui.css").result(), http::status::ok);
  EXPECT_EQ(Ask("/ui/charts.js").result(), http::status::ok);
  EXPECT_EQ(Ask("/ui/nothing.js").result(), http::status::not_found);
  EXPECT_EQ(Ask("/ui/../etc/passwd").result(), http::status::not_found);
  const HttpResponse moved = Ask("/ui");
  EXPECT_EQ(moved.result(), http::status::permanent_redirect);
  EXPECT_EQ(moved[http::field::location], "/ui/");
  const HttpResponse head = Ask("/ui/", http::verb::head);
  EXPECT_EQ(head.result(), http::status::ok);
  EXPECT_TRUE(head.body().empty());
  EXPECT_EQ(Ask("/ui/", http::verb::post).result(), http::status::method_not_allowed);
}

// The browser's Basic credential opens the page's paths only: the API's admin endpoints still
// take Bearer alone (a browser sends Basic with cross-site requests too).
TEST_F(OperatorPageTest, BasicOpensNothingOutsideThePage) {
  EXPECT_EQ(Ask("/v1/top").result(), http::status::unauthorized);
  EXPECT_EQ(Ask("/v1/reset", http::verb::post, kCheck).result(), http::status::unauthorized);
  EXPECT_EQ(Ask("/v1/check", http::verb::post, kCheck).result(), http::status::unauthorized);
  // Requests that are not the page's reach the API as they came.
  EXPECT_EQ(Ask("/healthz", http::verb::get, {}, Headers{.authorization = std::nullopt}).result(),
            http::status::ok);
  EXPECT_EQ(
      Ask("/v1/top", http::verb::get, {}, Headers{.authorization = std::string("Bearer ") + kToken})
          .result(),
      http::status::ok);
}

TEST_F(OperatorPageTest, ForwardsItsDataToTheApiAsAnAdministrator) {
  const nlohmann::json rules = Body(Ask("/ui/api/rules"));
  ASSERT_TRUE(rules.contains("domains")) << rules;
  EXPECT_EQ(rules["domains"][0]["domain"], "shop");
  EXPECT_EQ(Body(Ask("/ui/api/health"))["status"], "ok");
  const HttpResponse top = Ask("/ui/api/top?by=hits&n=3");
  EXPECT_EQ(top.result(), http::status::ok) << top.body();
  EXPECT_EQ(Body(top)["by"], "hits");
  EXPECT_EQ(Ask("/ui/api/top?by=nonsense").result(), http::status::bad_request);
  // The explanation at cost 0, which /v1/check gives an administrator alone.
  const HttpResponse check = Ask("/ui/api/check", http::verb::post, kCheck);
  ASSERT_EQ(check.result(), http::status::ok) << check.body();
  EXPECT_EQ(Body(check)["explain"]["descriptors"][0]["rule"], "shop.user");
  EXPECT_THAT(std::string(check["Content-Security-Policy"]), HasSubstr("frame-ancestors 'none'"));
}

TEST_F(OperatorPageTest, ItsPostMustBeItsOwn) {
  EXPECT_EQ(Ask("/ui/api/check", http::verb::post, kCheck, Headers{.content_type = "text/plain"})
                .result(),
            http::status::forbidden);
  EXPECT_EQ(Ask("/ui/api/check", http::verb::post, kCheck, Headers{.content_type = ""}).result(),
            http::status::forbidden);
  EXPECT_EQ(
      Ask("/ui/api/check", http::verb::post, kCheck, Headers{.fetch_site = "cross-site"}).result(),
      http::status::forbidden);
  EXPECT_EQ(
      Ask("/ui/api/check", http::verb::post, kCheck, Headers{.fetch_site = "same-site"}).result(),
      http::status::forbidden);
  EXPECT_EQ(
      Ask("/ui/api/check", http::verb::post, kCheck,
          Headers{.content_type = "Application/JSON; charset=utf-8", .fetch_site = "same-origin"})
          .result(),
      http::status::ok);
  EXPECT_EQ(Ask("/ui/api/check").result(), http::status::method_not_allowed);
}

// Another site's <img src=/ui/api/simulate?...> carries the browser's Basic credential: it is
// refused before anything is drawn.
TEST_F(OperatorPageTest, AnotherSitesRequestForTheDataIsRefused) {
  for (const char* target : {"/ui/api/simulate?rule=shop.user&burst=10000", "/ui/api/series",
                             "/ui/api/top", "/ui/api/rules"}) {
    EXPECT_EQ(Ask(target, http::verb::get, {}, Headers{.fetch_site = "cross-site"}).result(),
              http::status::forbidden)
        << target;
    EXPECT_EQ(Ask(target, http::verb::get, {}, Headers{.fetch_site = "same-origin"}).result(),
              http::status::ok)
        << target;
  }
  // The page itself may be opened from a link anywhere.
  EXPECT_EQ(Ask("/ui/", http::verb::get, {}, Headers{.fetch_site = "cross-site"}).result(),
            http::status::ok);
}

TEST_F(OperatorPageTest, SeriesAreTheHistorysSeconds) {
  history_.Sample(metrics_.rules(), clock_.Now());
  for (int i = 0; i < 7; ++i) {
    Ask("/v1/check", http::verb::post,
        R"({"domain": "shop", "descriptors": [{"entries": [{"key": "user", "value": "ann"}]}]})",
        Headers{.authorization = std::nullopt});
  }
  clock_.Advance(std::chrono::seconds(1));
  history_.Sample(metrics_.rules(), clock_.Now());
  const HttpResponse response = Ask("/ui/api/series?seconds=2");
  ASSERT_EQ(response.result(), http::status::ok) << response.body();
  const nlohmann::json series = Body(response);
  EXPECT_EQ(series["seconds"], 2);
  EXPECT_EQ(series["end_ms"], kStart / 1000 + 1000);
  ASSERT_EQ(series["series"].size(), 1U) << series;
  EXPECT_EQ(series["series"][0]["name"], "shop.user");
  EXPECT_EQ(series["series"][0]["admitted"], nlohmann::json::array({0, 5}));
  EXPECT_EQ(series["series"][0]["denied"], nlohmann::json::array({0, 2}));
  EXPECT_EQ(Body(Ask("/ui/api/series"))["series"][0]["admitted"].size(),
            static_cast<size_t>(RateHistory::kSeconds));
  for (const char* bad :
       {"/ui/api/series?seconds=0", "/ui/api/series?seconds=901", "/ui/api/series?seconds=x",
        "/ui/api/series?other=1", "/ui/api/series?seconds=%zz"}) {
    EXPECT_EQ(Ask(bad).result(), http::status::bad_request) << bad;
  }
}

TEST_F(OperatorPageTest, SimulateDrawsTheRuleAgainstABurst) {
  const HttpResponse one = Ask("/ui/api/simulate?rule=shop.user&burst=30");
  ASSERT_EQ(one.result(), http::status::ok) << one.body();
  EXPECT_EQ(one[http::field::content_type], "image/svg+xml");
  EXPECT_THAT(one.body(), StartsWith("<svg"));
  // The burst of 30 at one instant: 5 admitted of it (fixed window, 5 per second).
  EXPECT_THAT(one.body(), HasSubstr("admitted"));
  // One lane per limit of the rule.
  const HttpResponse two = Ask("/ui/api/simulate?rule=shop.plan&burst=10");
  ASSERT_EQ(two.result(), http::status::ok) << two.body();
  EXPECT_THAT(two.body(), HasSubstr("token_bucket"));
  EXPECT_THAT(two.body(), HasSubstr("fixed_window"));
  EXPECT_EQ(Ask("/ui/api/simulate?rule=shop.nobody&burst=3").result(), http::status::not_found);
  EXPECT_EQ(Ask("/ui/api/simulate?rule=shop.health&burst=3").result(), http::status::bad_request);
  for (const char* bad :
       {"/ui/api/simulate?rule=shop.user", "/ui/api/simulate?burst=3",
        "/ui/api/simulate?rule=shop.user&burst=0", "/ui/api/simulate?rule=shop.user&burst=10001",
        "/ui/api/simulate?rule=shop.user&burst=3&x=1"}) {
    EXPECT_EQ(Ask(bad).result(), http::status::bad_request) << bad;
  }
}

// The picture's trace: the burst, then twice the fastest rate for two of the longest periods,
// bounded; what the limit admitted of it is in the lane's title.
TEST(BurstPictureTest, AdmitsWhatTheLimitAllowsOfTheBurst) {
  MemoryStore store;
  Metrics metrics;
  const auto rules = testing::MustParseRules(kRules, metrics.rules(), store);
  absl::StatusOr<std::string> svg = BurstPicture(*rules, "shop.user", 30, At(kStart));
  ASSERT_TRUE(svg.ok()) << svg.status();
  // 30 at 0 (5 admitted), then one every 100 ms up to 2 s: 9 rejected in the first second, 5
  // of 10 admitted in the next, and the one at 2 s admitted.
  EXPECT_THAT(*svg, HasSubstr("admitted 11, rejected 39"));
  // Bounded whatever the figures: a day's limit at 10^9 a second still draws.
  constexpr char kFast[] = R"(
domain: fast
descriptors:
  - key: k
    limits:
      - {name: peak, algorithm: gcra, requests_per_unit: 1000000000, period: 1s}
      - {name: day, algorithm: fixed_window, requests_per_unit: 1000000000000, period: 1d}
)";
  const auto fast = testing::MustParseRules(kFast, metrics.rules(), store);
  absl::StatusOr<std::string> bounded = BurstPicture(*fast, "fast.k", kMaxBurst, At(kStart));
  ASSERT_TRUE(bounded.ok()) << bounded.status();
  EXPECT_LT(bounded->size(), size_t{8} << 20);
  // A rule of many limits draws its first kMaxLanes.
  std::string many = "domain: many\ndescriptors:\n  - key: k\n    limits:\n";
  for (int i = 0; i < 20; ++i) {
    many += "      - {name: l" + std::to_string(i) +
            ", requests_per_unit: " + std::to_string(i + 1) + ", unit: second}\n";
  }
  const auto wide = testing::MustParseRules(many, metrics.rules(), store);
  absl::StatusOr<std::string> drawn = BurstPicture(*wide, "many.k", 5, At(kStart));
  ASSERT_TRUE(drawn.ok()) << drawn.status();
  size_t lanes = 0;
  for (size_t at = drawn->find("class=\"title\""); at != std::string::npos;
       at = drawn->find("class=\"title\"", at + 1)) {
    ++lanes;
  }
  EXPECT_EQ(lanes, kMaxLanes);
  EXPECT_EQ(BurstPicture(*rules, "shop.user", kMaxBurst + 1, At(kStart)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::server
