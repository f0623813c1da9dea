#pragma once

// The fixture of the tests on envoyproxy/ratelimit's README examples (envoy_examples_test.cc,
// through the service; envoy_examples_grpc_test.cc, over gRPC): a rate limit service on a memory
// store and a manual clock at a fixed start, which loads tests/server/envoy_examples/FILE as
// sluiced loads --config FILE and asks Envoy's ShouldRateLimit. Each test has its own; not
// thread-safe.

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

#include "server/rules/rules.h"
#include "server/service/service.h"
#include "sluice/memory_store.h"
#include "tests/testing/util.h"

#ifndef SLUICE_ENVOY_EXAMPLES_DIR
#error "SLUICE_ENVOY_EXAMPLES_DIR must name tests/server/envoy_examples (set by CMake)"
#endif

namespace sluice::server {

inline constexpr int64_t kSecond = 1'000'000;
inline constexpr int64_t kMinute = 60 * kSecond;
inline constexpr int64_t kDay = 86'400 * kSecond;
// 2023-11-15T00:00:00Z: aligned to every unit up to a day, as envoyproxy/ratelimit's windows
// are (they count from the epoch).
inline constexpr int64_t kMidnight = 1'700'006'400 * kSecond;
static_assert(kMidnight % kDay == 0);
// The tests start at noon and a quarter of a second: 750 ms are left in the second, 59.75 s
// in the minute and 43,199.75 s in the day.
inline constexpr int64_t kStart = kMidnight + kDay / 2 + 250'000;

inline constexpr uint32_t kMaxUint32 = std::numeric_limits<uint32_t>::max();

inline std::string ExamplePath(const std::string& file) {
  return std::string(SLUICE_ENVOY_EXAMPLES_DIR) + "/" + file;
}

// One request descriptor: its entries in order.
using Descriptor = std::vector<Entry>;

class EnvoyExamplesTest : public ::testing::Test {
 protected:
  EnvoyExamplesTest() : service_(store_, clock_, metrics_) {}

  // Loads tests/server/envoy_examples/`file` as sluiced loads --config FILE, and puts it in
  // force.
  ::testing::AssertionResult Load(const std::string& file) {
    absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
        RuleSet::Load(ExamplePath(file), metrics_.rules(),
                      [this](const Limit& limit) { return store_.CheckLimit(limit); });
    if (!rules.ok()) {
      return ::testing::AssertionFailure() << file << " does not load: " << rules.status();
    }
    service_.SetRules(*std::move(rules));
    return ::testing::AssertionSuccess();
  }

  // Envoy's ShouldRateLimit with these descriptors and hits_addend 1: one result each.
  std::vector<DescriptorResult> Ask(const std::string& domain,
                                    const std::vector<Descriptor>& descriptors) {
    CheckRequest request{.domain = domain};
    for (const Descriptor& entries : descriptors) {
      request.descriptors.push_back({.entries = entries});
    }
    absl::StatusOr<std::vector<DescriptorResult>> results = service_.ShouldRateLimit(request);
    EXPECT_TRUE(results.ok()) << results.status();
    if (!results.ok() || results->size() != descriptors.size()) {
      ADD_FAILURE() << "no result for each descriptor";
      return std::vector<DescriptorResult>(descriptors.size());
    }
    return *std::move(results);
  }

  DescriptorResult AskOne(const std::string& domain, const Descriptor& descriptor) {
    return Ask(domain, {descriptor}).front();
  }

  // The counters named `name`, or nullptr when no rule limit has that name.
  const RuleCounters* FindCounters(const std::string& name) {
    for (const auto& [counter_name, counters] : metrics_.rules().All()) {
      if (counter_name == name) {
        return counters;
      }
    }
    return nullptr;
  }

  MemoryStore store_;
  ManualClock clock_{testing::At(kStart)};
  Metrics metrics_;
  RateLimitService service_;
};

}  // namespace sluice::server
