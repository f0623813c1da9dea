// A reload that changes a limit (RuleLimit::before, docs/server.md "Changing a limit"): the
// keys keep what they have used under the old figures, lowered, raised or reshaped, across
// several reloads; a renamed limit or another rule starts afresh; a reset forgets the key under
// every figure. On the memory store and a manual clock.

#include <memory>
#include <string>
#include <string_view>

#include "gtest/gtest.h"

#include "server/service/service.h"
#include "sluice/memory_store.h"
#include "tests/testing/rules.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

using ::sluice::testing::At;

constexpr int64_t kHour = testing::kHourUs;
constexpr int64_t kStart = testing::kHourStart;

// A domain whose `user` rule allows `per_hour`, named `name`, and whose `job` rule has two
// named limits.
std::string Rules(int per_hour, std::string_view name = "users", std::string_view unit = "hour") {
  return "domain: api\n"
         "descriptors:\n"
         "  - key: user\n"
         "    rate_limit: {name: " +
         std::string(name) + ", unit: " + std::string(unit) +
         ", requests_per_unit: " + std::to_string(per_hour) +
         "}\n"
         "  - key: job\n"
         "    limits:\n"
         "      - {name: burst, unit: second, requests_per_unit: 10}\n"
         "      - {name: hourly, unit: hour, requests_per_unit: " +
         std::to_string(per_hour) + "}\n";
}

class ChangeTest : public ::testing::Test {
 protected:
  ChangeTest() : clock_(At(kStart)), service_(store_, clock_, metrics_) { Load(Rules(100)); }

  void Load(const std::string& text) {
    service_.SetRules(
        testing::MustParseRules(text, metrics_.rules(), store_, "rules.yaml", service_.rules()));
  }

  // Requests of cost 1 admitted on descriptor (key, value), up to `most`.
  int64_t Admit(std::string_view key, std::string_view value, int64_t most) {
    int64_t admitted = 0;
    while (admitted < most) {
      CheckRequest request{.domain = "api", .cost = 1};
      request.descriptors.push_back({.entries = {{std::string(key), std::string(value)}}});
      absl::StatusOr<CheckResult> result = service_.Check(request);
      EXPECT_TRUE(result.ok()) << result.status();
      if (!result.ok() || !result->combined.allowed) {
        break;
      }
      ++admitted;
    }
    return admitted;
  }

  MemoryStore store_;
  ManualClock clock_;
  Metrics metrics_;
  RateLimitService service_;
};

TEST_F(ChangeTest, ALoweredLimitDeniesAKeyThatHasUsedItAlready) {
  ASSERT_EQ(Admit("user", "ann", 60), 60);
  Load(Rules(50));
  EXPECT_EQ(Admit("user", "ann", 100), 0) << "60 used of the new 50";
  EXPECT_EQ(Admit("user", "bob", 100), 50) << "a key with nothing used has the new limit";
  clock_.Set(At(kStart + kHour));
  EXPECT_EQ(Admit("user", "ann", 100), 50);
}

TEST_F(ChangeTest, ARaisedLimitGivesOnlyTheDifference) {
  ASSERT_EQ(Admit("user", "ann", 100), 100);
  Load(Rules(250));
  EXPECT_EQ(Admit("user", "ann", 1000), 150);
}

TEST_F(ChangeTest, EveryLimitOfARuleCarriesItsOwnUnits) {
  ASSERT_EQ(Admit("job", "mail", 10), 10);  // 10 of the burst, 10 of the hourly 100.
  clock_.Set(At(kStart + 1'000'000));
  ASSERT_EQ(Admit("job", "mail", 10), 10);  // 20 of the hourly.
  Load(Rules(30));
  clock_.Set(At(kStart + 2'000'000));
  EXPECT_EQ(Admit("job", "mail", 100), 10) << "the hourly limit, 20 used of 30";
}

TEST_F(ChangeTest, UntouchedKeysCarryThroughSeveralReloads) {
  ASSERT_EQ(Admit("user", "ann", 90), 90);
  Load(Rules(200));
  Load(Rules(120));
  EXPECT_EQ(Admit("user", "ann", 1000), 30) << "adopted from the first figures";
}

TEST_F(ChangeTest, AChangeOfPeriodHoldsTheKeyToTheStricterLimit) {
  ASSERT_EQ(Admit("user", "ann", 100), 100);
  // 100 per hour to 100 per day: the old limit allows no more this hour, and 100 in each of
  // the 23 hours left; the new one no more than 100 less the 100 used.
  Load(Rules(100, "users", "day"));
  EXPECT_EQ(Admit("user", "ann", 1000), 0);
}

TEST_F(ChangeTest, ARenamedLimitStartsAfresh) {
  ASSERT_EQ(Admit("user", "ann", 100), 100);
  Load(Rules(50, "people"));
  EXPECT_EQ(Admit("user", "ann", 100), 50);
}

TEST_F(ChangeTest, AResetForgetsTheKeyUnderTheFiguresItHadBefore) {
  ASSERT_EQ(Admit("user", "ann", 100), 100);
  Load(Rules(50));
  CheckRequest reset{.domain = "api"};
  reset.descriptors.push_back({.entries = {{"user", "ann"}}});
  ASSERT_TRUE(service_.Reset(reset).ok());
  EXPECT_EQ(Admit("user", "ann", 100), 50);
}

}  // namespace
}  // namespace sluice::server
