#include "server/stats/envoy_stats.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sluice::server {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::IsEmpty;

TEST(SanitizeStatNameTest, ColonsAndPipesBecomeUnderscores) {
  EXPECT_EQ(SanitizeStatName("api.user_a:b|c"), "api.user_a_b_c");
  EXPECT_EQ(SanitizeStatName("api.user"), "api.user");
}

TEST(SanitizeStatNameTest, TheDotsOfIpv4AddressesBecomeUnderscores) {
  EXPECT_EQ(SanitizeStatName("api.remote_address_10.0.0.1"), "api.remote_address_10_0_0_1");
  EXPECT_EQ(SanitizeStatName("a.1.2.3.4.b.5.6.7.8"), "a.1_2_3_4.b.5_6_7_8");
  // As their regexp, unanchored: 4 digits start no group, the address starts one digit on;
  // the last group takes at most 3 digits.
  EXPECT_EQ(SanitizeStatName("x.1234.5.6.7.8"), "x.1234_5_6_7.8");
  EXPECT_EQ(SanitizeStatName("x.1.2.3.4567"), "x.1_2_3_4567");
  EXPECT_EQ(SanitizeStatName("x.1.2.3"), "x.1.2.3");    // Three groups: no address.
  EXPECT_EQ(SanitizeStatName("v.1.2.3."), "v.1.2.3.");  // No digit after the last dot.
}

TEST(SanitizeStatNameTest, ControlCharactersCannotStartALine) {
  EXPECT_EQ(SanitizeStatName(std::string("a\nb\rc\0d\x7f", 8)), "a_b_c_d_");
}

std::vector<Stat> Named(const std::vector<Stat>& stats, const std::string& prefix) {
  std::vector<Stat> out;
  for (const Stat& stat : stats) {
    if (stat.name.starts_with(prefix)) {
      out.push_back(stat);
    }
  }
  return out;
}

TEST(EnvoyStatsTest, EachRuleHasItsFiveHitCountersByTheirNames) {
  Metrics metrics;
  RuleCounters& user = *metrics.rules().Get("api.user");
  user.total_hits = 12;
  user.over_limit_hits = 2;
  user.near_limit_hits = 3;
  user.within_limit_hits = 9;
  user.checks = 100;  // Not theirs: not sent.
  const std::vector<Stat> stats = EnvoyStats(metrics, {});
  auto stat = [](const std::string& name, uint64_t value) {
    return AllOf(Field(&Stat::name, name), Field(&Stat::value, value),
                 Field(&Stat::kind, Stat::Kind::kCounter));
  };
  EXPECT_THAT(Named(stats, "ratelimit.service.rate_limit."),
              ElementsAre(stat("ratelimit.service.rate_limit.api.user.near_limit", 3),
                          stat("ratelimit.service.rate_limit.api.user.over_limit", 2),
                          stat("ratelimit.service.rate_limit.api.user.shadow_mode", 0),
                          stat("ratelimit.service.rate_limit.api.user.total_hits", 12),
                          stat("ratelimit.service.rate_limit.api.user.within_limit", 9)));
}

TEST(EnvoyStatsTest, NamesThatSanitizeAlikeAddUp) {
  Metrics metrics;
  metrics.rules().Get("api.k_a:b")->total_hits = 2;
  metrics.rules().Get("api.k_a|b")->total_hits = 3;
  metrics.rules().Get("api.k_a_b")->total_hits = 4;
  const std::vector<Stat> stats = EnvoyStats(metrics, {});
  EXPECT_THAT(Named(stats, "ratelimit.service.rate_limit.api.k_a_b.total_hits"),
              ElementsAre(Field(&Stat::value, 9U)));
}

TEST(EnvoyStatsTest, ServiceStatsCountTheLoadAtStartAsTheirsDoes) {
  Metrics metrics;
  metrics.CountReload(true);
  metrics.CountReload(false);
  metrics.CountStoreError();
  metrics.CountStoreError();
  metrics.CountGlobalShadowMode();
  const std::vector<Stat> started = EnvoyStats(metrics, {.loaded_at_start = true});
  EXPECT_THAT(Named(started, "ratelimit.service.config_load_success"),
              ElementsAre(Field(&Stat::value, 2U)));
  EXPECT_THAT(Named(started, "ratelimit.service.config_load_error"),
              ElementsAre(Field(&Stat::value, 1U)));
  EXPECT_THAT(Named(started, "ratelimit.service.call.should_rate_limit.redis_error"),
              ElementsAre(Field(&Stat::value, 2U)));
  EXPECT_THAT(Named(started, "ratelimit.service.global_shadow_mode"),
              ElementsAre(Field(&Stat::value, 1U)));
  EXPECT_THAT(Named(EnvoyStats(metrics, {}), "ratelimit.service.config_load_success"),
              ElementsAre(Field(&Stat::value, 1U)));
}

// Their gRPC server's and their service's: the calls and their times, the requests refused
// before a decision, and each unknown domain by name (bounded: callers choose the names).
TEST(EnvoyStatsTest, CallsTheirTimesServiceErrorsAndUnknownDomains) {
  Metrics metrics;
  metrics.grpc_calls().Record(Micros{20});
  metrics.grpc_calls().Record(Micros{20});
  metrics.grpc_calls().Record(Micros{3'000});
  metrics.grpc_calls().Record(Micros{5'000'000});
  metrics.CountServiceError();
  metrics.CountDomainNotFound("ghost", 2);
  metrics.CountDomainNotFound("ghost", 1);
  metrics.CountDomainNotFound("10.1.2.3:x", 1);
  const std::vector<Stat> stats = EnvoyStats(metrics, {});
  EXPECT_THAT(Named(stats, "ratelimit_server.ShouldRateLimit.total_requests"),
              ElementsAre(Field(&Stat::value, 4U)));
  const std::vector<Stat> timer = Named(stats, "ratelimit_server.ShouldRateLimit.response_time");
  ASSERT_EQ(timer.size(), 1U);
  EXPECT_EQ(timer[0].kind, Stat::Kind::kTimer);
  // Each call as its bucket's upper bound in milliseconds: 25 us, 5 ms, and past the last
  // bound (1 s), twice it.
  std::vector<std::pair<double, uint64_t>> nonzero;
  for (const auto& sample : timer[0].samples) {
    if (sample.second > 0) {
      nonzero.push_back(sample);
    }
  }
  EXPECT_THAT(nonzero,
              ElementsAre(std::pair(0.025, 2U), std::pair(5.0, 1U), std::pair(2000.0, 1U)));
  EXPECT_THAT(Named(stats, "ratelimit.service.call.should_rate_limit.service_error"),
              ElementsAre(Field(&Stat::value, 1U)));
  EXPECT_THAT(Named(stats, "ratelimit.service.rate_limit.ghost.domain_not_found"),
              ElementsAre(Field(&Stat::value, 3U)));
  EXPECT_THAT(Named(stats, "ratelimit.service.rate_limit.10_1_2_3_x.domain_not_found"),
              ElementsAre(Field(&Stat::value, 1U)));
  for (size_t i = 0; i < 2 * Metrics::kMaxUnknownDomains; ++i) {
    metrics.CountDomainNotFound("flood" + std::to_string(i), 1);
  }
  EXPECT_EQ(metrics.DomainsNotFound().size(), Metrics::kMaxUnknownDomains);
  metrics.CountDomainNotFound("ghost", 1);  // A name counted already still counts.
  EXPECT_THAT(Named(EnvoyStats(metrics, {}), "ratelimit.service.rate_limit.ghost."),
              ElementsAre(Field(&Stat::value, 4U)));
}

TEST(EnvoyStatsTest, TheRedisPoolGaugeOnlyWithRedis) {
  Metrics metrics;
  EXPECT_THAT(Named(EnvoyStats(metrics, {}), "ratelimit.redis_pool."), IsEmpty());
  EXPECT_THAT(Named(EnvoyStats(metrics, {.redis_connections = 2}), "ratelimit.redis_pool."),
              ElementsAre(AllOf(Field(&Stat::name, "ratelimit.redis_pool.cx_active"),
                                Field(&Stat::value, 2U), Field(&Stat::kind, Stat::Kind::kGauge))));
}

}  // namespace
}  // namespace sluice::server
