// EnvoySettings::stop_others_over_limit, envoyproxy/ratelimit's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT as their Redis cache does it: a look at every
// descriptor's count first; when one would pass its limit with its hits, only those that would
// are counted, and the others are answered as they stand. Each expectation is what the
// reference answered to the same requests (bench/peers/compare.sh), on a manual clock.

#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "server/service/service.h"
#include "sluice/memory_store.h"
#include "tests/testing/rules.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

using ::sluice::testing::At;
using ::sluice::testing::kEpoch;

constexpr int64_t kMinute = 60'000'000;
constexpr int64_t kStart = kEpoch + kMinute - kEpoch % kMinute + kMinute / 4;

constexpr char kRules[] = R"(
domain: api
descriptors:
  - key: four
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
)";

class StopOthersTest : public ::testing::TestWithParam<bool> {
 protected:
  StopOthersTest()
      : clock_(At(kStart)),
        service_(store_, clock_, metrics_, nullptr, {.stop_others_over_limit = GetParam()}) {
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
  }

  // One descriptor per (key, value, hits); each result's (over, limit_remaining).
  std::vector<std::pair<bool, uint32_t>> Ask(
      std::vector<std::tuple<std::string, std::string, int64_t>> descriptors) {
    CheckRequest request{.domain = "api"};
    for (auto& [key, value, hits] : descriptors) {
      request.descriptors.push_back({.entries = {{key, value}}, .cost = hits});
    }
    absl::StatusOr<std::vector<DescriptorResult>> results = service_.ShouldRateLimit(request);
    EXPECT_TRUE(results.ok()) << results.status();
    std::vector<std::pair<bool, uint32_t>> out;
    for (const DescriptorResult& r : results.value_or(std::vector<DescriptorResult>{})) {
      out.emplace_back(r.over_limit, r.limit_remaining);
    }
    return out;
  }

  MemoryStore store_;
  ManualClock clock_;
  Metrics metrics_;
  RateLimitService service_;
};

using Answers = std::vector<std::pair<bool, uint32_t>>;

TEST_P(StopOthersTest, OneOverStopsTheOthers) {
  const bool stop = GetParam();
  // 5 hits of 4 would pass: it is counted (over), and b's hit is not (b answered as it stands).
  EXPECT_EQ(Ask({{"four", "a", 5}, {"four", "b", 1}}),
            (stop ? Answers{{true, 0}, {false, 4}} : Answers{{true, 0}, {false, 3}}));
  EXPECT_EQ(Ask({{"four", "b", 1}}), (stop ? Answers{{false, 3}} : Answers{{false, 2}}));
  // a, over already, would pass again with any hit, and stops b again; a keeps counting.
  EXPECT_EQ(Ask({{"four", "b", 1}, {"four", "a", 1}}),
            (stop ? Answers{{false, 3}, {true, 0}} : Answers{{false, 1}, {true, 0}}));
  // Without a hit a (at 6 of 4) still passes its limit: b is not counted.
  EXPECT_EQ(Ask({{"four", "a", 0}, {"four", "b", 1}}),
            (stop ? Answers{{true, 0}, {false, 3}} : Answers{{true, 0}, {false, 0}}));
}

TEST_P(StopOthersTest, NoneOverCountsEveryOne) {
  // Each looked at alone fits (3 and 1 of 4 left): both counted, one after the other on the same
  // key, so the second passes the limit, as their INCRBYs do.
  EXPECT_EQ(Ask({{"four", "c", 3}, {"four", "c", 2}}), (Answers{{false, 1}, {true, 0}}));
  // Exactly to the limit is not over: d's 4 of 4 stops nothing.
  EXPECT_EQ(Ask({{"four", "d", 4}, {"four", "e", 1}}), (Answers{{false, 0}, {false, 3}}));
}

TEST_P(StopOthersTest, AShadowLimitStopsTheOthersToo) {
  const bool stop = GetParam();
  // The shadow rule's 2 of 1 would pass (the request is still admitted): as theirs, it stops f.
  EXPECT_EQ(Ask({{"shadow", "s", 2}, {"four", "f", 1}}),
            (stop ? Answers{{false, 0}, {false, 4}} : Answers{{false, 0}, {false, 3}}));
}

INSTANTIATE_TEST_SUITE_P(OnAndOff, StopOthersTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "On" : "Off"; });

}  // namespace
}  // namespace sluice::server
