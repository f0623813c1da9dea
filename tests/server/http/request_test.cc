#include "server/http/request.h"

#include <string>
#include <variant>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "src/core/status.h"

namespace sluice::server {
namespace {

namespace http = boost::beast::http;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

// What api_test.cc does not reach through the handlers: the bounds, the paths in the messages,
// Envoy's per-descriptor overrides, /v1/acquire's max_wait, /v1/release and /v1/auth's query.

HttpRequest Post(std::string body) {
  HttpRequest request{http::verb::post, "/v1/check", 11};
  request.body() = std::move(body);
  request.prepare_payload();
  return request;
}

// The message of a refusal, or "accepted".
template <typename T>
std::string Error(const absl::StatusOr<T>& parsed) {
  if (parsed.ok()) {
    return "accepted";
  }
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(internal::Message(parsed.status()));
}

// A rules-mode body with `descriptors` as its descriptors' JSON.
std::string Rules(std::string_view descriptors) {
  return fmt::format(R"({{"domain": "api", "descriptors": {}}})", descriptors);
}

constexpr char kOneEntry[] = R"({"entries": [{"key": "user", "value": "bob"}]})";

// `n` copies of `item`, as a JSON array.
std::string ArrayOf(size_t n, std::string_view item) {
  std::string out = "[";
  for (size_t i = 0; i < n; ++i) {
    out += (i == 0 ? "" : ",");
    out += item;
  }
  return out + "]";
}

TEST(ParseCheckTest, BoundsTheDescriptorsAndTheirEntries) {
  EXPECT_EQ(Error(ParseCheck(Post(Rules(ArrayOf(kMaxDescriptors, kOneEntry))))), "accepted");
  EXPECT_EQ(Error(ParseCheck(Post(Rules(ArrayOf(kMaxDescriptors + 1, kOneEntry))))),
            "too many descriptors: 65 (at most 64)");

  const std::string entries = ArrayOf(kMaxEntries, R"({"key": "k", "value": "v"})");
  EXPECT_EQ(Error(ParseCheck(Post(Rules(fmt::format(R"([{{"entries": {}}}])", entries))))),
            "accepted");
  const std::string too_many = ArrayOf(kMaxEntries + 1, R"({"key": "k", "value": "v"})");
  EXPECT_EQ(Error(ParseCheck(
                Post(Rules(fmt::format(R"([{}, {{"entries": {}}}])", kOneEntry, too_many))))),
            "descriptors[1].entries has too many entries: 17 (at most 16)");
}

TEST(ParseCheckTest, NamesTheMisshapenPartByItsPath) {
  EXPECT_EQ(Error(ParseCheck(Post(R"({"domain": "api"})"))), "descriptors is missing");
  EXPECT_EQ(Error(ParseCheck(Post(Rules(R"([7])")))), "descriptors[0] must be an object");
  EXPECT_EQ(Error(ParseCheck(Post(Rules(R"([{}])")))), "descriptors[0].entries must be an array");
  EXPECT_EQ(Error(ParseCheck(Post(Rules(R"([{"entries": ["user"]}])")))),
            "descriptors[0].entries[0] must be an object");
  // A limit of one's own is Envoy's (POST /json), not /v1/check's.
  EXPECT_EQ(Error(ParseCheck(Post(Rules(R"([{"entries": [], "limit": {}}])")))),
            "unknown field 'descriptors[0].limit'");
  EXPECT_EQ(Error(ParseCheck(Post(R"({"descriptors": []})"))),
            "give either a domain and descriptors (rules mode) or a key and a limit (ad hoc)");
}

TEST(ParseCheckTest, ReadsARulesModeCheck) {
  const auto parsed = ParseCheck(
      Post(R"({"domain": "api", "cost": 0, "descriptors": [{"entries": [{"key": "user"}]}]})"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const CheckRequest* check = std::get_if<CheckRequest>(&*parsed);
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(check->domain, "api");
  EXPECT_EQ(check->cost, 0);
  ASSERT_EQ(check->descriptors.size(), 1U);
  ASSERT_EQ(check->descriptors[0].entries.size(), 1U);
  EXPECT_EQ(check->descriptors[0].entries[0].key, "user");
  EXPECT_EQ(check->descriptors[0].entries[0].value, "");  // A missing value is empty.
}

TEST(ParseCheckTest, ReadsAnAdHocCheck) {
  const auto parsed = ParseCheck(Post(
      R"({"key": "k", "algorithm": "gcra", "limit": 5, "period": "2s", "burst": 7, "cost": 2})"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const AdHocRequest* adhoc = std::get_if<AdHocRequest>(&*parsed);
  ASSERT_NE(adhoc, nullptr);
  EXPECT_EQ(adhoc->key, "k");
  EXPECT_EQ(adhoc->cost, 2);
  EXPECT_EQ(adhoc->spec.algorithm, Algorithm::kGcra);
  EXPECT_EQ(adhoc->spec.limit, 5);
  EXPECT_EQ(adhoc->spec.period, Micros(2s));
  EXPECT_EQ(adhoc->spec.burst, 7);
  EXPECT_EQ(adhoc->spec.buckets, std::nullopt);

  EXPECT_EQ(Error(ParseCheck(Post(R"({"key": "k", "limit": 5})"))),
            "period is missing (a duration such as \"1s\")");
  EXPECT_EQ(Error(ParseCheck(Post(R"({"key": "k", "limit": 5, "period": "1s", "domain": "a"})"))),
            "unknown field 'domain'");
}

TEST(ParseCheckTest, ReadsACalendarQuotaNamedByItsPeriod) {
  const auto parsed = ParseCheck(Post(
      R"({"key": "k", "limit": 10000, "period": "1mo", "calendar": true, "time_zone": "Europe/Berlin"})"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const AdHocRequest* adhoc = std::get_if<AdHocRequest>(&*parsed);
  ASSERT_NE(adhoc, nullptr);
  ASSERT_TRUE(adhoc->spec.calendar);
  EXPECT_EQ(adhoc->spec.calendar->unit, CalendarUnit::kMonth);
  EXPECT_EQ(adhoc->spec.calendar->time_zone, "Europe/Berlin");
  EXPECT_EQ(adhoc->spec.period, Micros{0});
  const auto utc =
      ParseCheck(Post(R"({"key": "k", "limit": 5, "period": "1w", "calendar": true})"));
  ASSERT_TRUE(utc.ok()) << utc.status();
  EXPECT_EQ(std::get<AdHocRequest>(*utc).spec.calendar->time_zone, "UTC");
  EXPECT_EQ(std::get<AdHocRequest>(*utc).spec.calendar->unit, CalendarUnit::kWeek);

  EXPECT_EQ(
      Error(ParseCheck(Post(R"({"key": "k", "limit": 5, "period": "30d", "calendar": true})"))),
      "period: a calendar quota's period is 1d, 1w, 1mo or 1y, not '30d'");
  EXPECT_THAT(
      Error(ParseCheck(Post(R"({"key": "k", "limit": 5, "period": "1d", "time_zone": "UTC"})"))),
      ::testing::StartsWith("time_zone needs \"calendar\": true"));
  EXPECT_EQ(
      Error(ParseCheck(Post(R"({"key": "k", "limit": 5, "period": "1d", "calendar": "yes"})"))),
      "calendar must be true or false");
}

TEST(ParseCheckTest, MaxWaitOnlyForAcquire) {
  const std::string body = R"({"key": "k", "limit": 5, "period": "1s", "max_wait": "250ms"})";
  std::optional<Micros> max_wait;
  EXPECT_EQ(Error(ParseCheck(Post(body), &max_wait)), "accepted");
  EXPECT_EQ(max_wait, Micros(250ms));
  EXPECT_EQ(Error(ParseCheck(Post(body))), "unknown field 'max_wait'");

  std::optional<Micros> absent;
  EXPECT_EQ(Error(ParseCheck(Post(Rules(R"([])")), &absent)), "accepted");
  EXPECT_EQ(absent, std::nullopt);
  EXPECT_EQ(Error(ParseCheck(Post(R"({"max_wait": 5})"), &absent)), "max_wait must be a string");
  EXPECT_THAT(Error(ParseCheck(Post(R"({"max_wait": "soon"})"), &absent)),
              ::testing::StartsWith("max_wait: "));
}

TEST(ParseEnvoyJsonTest, ReadsPerDescriptorHitsAndLimits) {
  const auto parsed = ParseEnvoyJson(Post(R"({"domain": "api", "hitsAddend": 0, "descriptors": [
      {"entries": [], "hits_addend": "3", "limit": {"requests_per_unit": 9, "unit": 2}},
      {"entries": [], "limit": {"requestsPerUnit": 4, "unit": "HOUR"}},
      {"entries": []}]})"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->cost, 1);  // 0 means 1, as in Envoy's proto.
  ASSERT_EQ(parsed->descriptors.size(), 3U);
  EXPECT_EQ(parsed->descriptors[0].cost, 3);
  ASSERT_TRUE(parsed->descriptors[0].limit.has_value());
  EXPECT_EQ(parsed->descriptors[0].limit->requests_per_unit, 9);
  EXPECT_EQ(parsed->descriptors[0].limit->unit, Unit::kMinute);
  ASSERT_TRUE(parsed->descriptors[1].limit.has_value());
  EXPECT_EQ(parsed->descriptors[1].limit->unit, Unit::kHour);
  EXPECT_EQ(parsed->descriptors[1].cost, std::nullopt);
  EXPECT_FALSE(parsed->descriptors[2].limit.has_value());
}

TEST(ParseEnvoyJsonTest, RefusesWhatEnvoysProtoCannotHold) {
  EXPECT_EQ(Error(ParseEnvoyJson(Post(R"({"hitsAddend": 4294967295, "descriptors": []})"))),
            "accepted");
  EXPECT_EQ(Error(ParseEnvoyJson(Post(R"({"hitsAddend": 4294967296, "descriptors": []})"))),
            "hitsAddend must fit 32 bits");
  EXPECT_EQ(Error(ParseEnvoyJson(Post(R"({"descriptors": [{"entries": [], "limit": 3}]})"))),
            "descriptors[0].limit must be an object");
  EXPECT_EQ(Error(ParseEnvoyJson(
                Post(R"({"descriptors": [{"entries": [], "limit": {"requestsPerUnit": -1}}]})"))),
            "descriptors[0].limit.requestsPerUnit must be zero or more, not -1");
  EXPECT_EQ(
      Error(ParseEnvoyJson(Post(R"({"descriptors": [{"entries": [], "limit": {"unit": 8}}]})"))),
      "descriptors[0].limit.unit must be SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR");
  EXPECT_EQ(
      Error(ParseEnvoyJson(Post(R"({"descriptors": [{"entries": [], "limit": {"per": 1}}]})"))),
      "unknown field 'descriptors[0].limit.per'");
  EXPECT_EQ(
      Error(ParseEnvoyJson(Post(R"({"descriptors": [{"entries": [], "hitsAddend": "3x"}]})"))),
      "descriptors[0].hitsAddend must be an integer");
}

TEST(ParseReleaseTest, TakesTheLeaseAndNothingElse) {
  EXPECT_EQ(ParseRelease(Post(R"({"lease": "abc"})")).value_or("refused"), "abc");
  EXPECT_EQ(Error(ParseRelease(Post(R"({})"))), "lease is missing");
  EXPECT_EQ(Error(ParseRelease(Post(R"({"lease": 1})"))), "lease must be a string");
  EXPECT_EQ(Error(ParseRelease(Post(R"({"lease": "abc", "ttl": 1})"))), "unknown field 'ttl'");
  EXPECT_EQ(Error(ParseRelease(Post("[]"))), "the body must be a JSON object");
}

TEST(DomainInQueryTest, TakesTheLastDomainParameterAsWritten) {
  EXPECT_EQ(DomainInQuery("/v1/auth"), "");
  EXPECT_EQ(DomainInQuery("/v1/auth?"), "");
  EXPECT_EQ(DomainInQuery("/v1/auth?x=1&domain=api&y"), "api");
  EXPECT_EQ(DomainInQuery("/v1/auth?domain=a&domain=b"), "b");
  EXPECT_EQ(DomainInQuery("/v1/auth?mydomain=a"), "");
  EXPECT_EQ(DomainInQuery("/v1/auth?domain=a%20b"), "a%20b");
}

}  // namespace
}  // namespace sluice::server
