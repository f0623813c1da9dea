#pragma once

// What the HTTP targets (http_fuzz.cc, json_fuzz.cc) answer requests with: sluiced's HTTP API
// (server/http/api.h) over a memory store, on a manual clock and manual timers, with rules of
// every mode. A fresh world per input, so that a crash replays from its input alone.
// Serve checks what every answer must be, whatever was asked: exactly one answer, waits
// included (played out on the manual clock), and a JSON answer that is JSON.

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "nlohmann/json.hpp"

#include "server/http/api.h"
#include "server/rules/rules.h"
#include "server/service/service.h"
#include "sluice/clock.h"
#include "sluice/memory_store.h"
#include "tests/testing/timers.h"

namespace sluice::fuzz {

inline constexpr char kRules[] = R"(
domain: api
ip_keys: [remote_address]
auth:
  - - {key: remote_address, header: ":remote_addr"}
  - - {key: api_key, header: x-api-key}
    - {key: path, header: ":path"}
pools:
  spare: {requests_per_unit: 5, unit: second}
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: user
    value: alice
    rate_limit: {name: alice, algorithm: sliding_log, unit: second, requests_per_unit: 3}
  - key: remote_address
    rate_limit: {algorithm: gcra, requests_per_unit: 1, period: 2500ms, burst: 2}
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: api_key
    limits:
      - {requests_per_unit: 5, unit: second, algorithm: sliding_window}
      - {requests_per_unit: 100, unit: day}
  - key: path
    value: /search*
    descriptors:
      - key: user
        mode: soft
        soft_percent: 20
        rate_limit: {algorithm: token_bucket, requests_per_unit: 2, unit: second}
  - key: job
    mode: elastic
    pool: spare
    rate_limit: {algorithm: sliding_buckets, buckets: 10, requests_per_unit: 3, unit: second}
  - key: job
    value: export
    concurrency: 2
    lease_ttl: 10s
  - key: queue
    rate_limit: {algorithm: leaky_bucket, requests_per_unit: 2, unit: second, burst: 3}
  - key: trial
    shadow_mode: true
    rate_limit: {requests_per_unit: 1, unit: minute}
  - key: free
    rate_limit: {unlimited: true}
)";

class ApiWorld {
 public:
  ApiWorld()
      : clock_(Timestamp{std::chrono::seconds(1'700'000'000)}),
        service_(store_, clock_, metrics_, &timers_),
        api_(service_, metrics_, clock_, [] { return std::string("sluice_store_keys 0\n"); }) {
    service_.SetRules(Rules());
  }

  // Answers `request` (twice: a second answer sees what the first stored), and aborts on an
  // answer that breaks what Serve promises.
  void Serve(const server::HttpRequest& request) {
    for (int i = 0; i < 2; ++i) {
      int answers = 0;
      std::optional<server::HttpResponse> response;
      api_.Handle(request, "192.0.2.9", [&](server::HttpHandler::Build build) {
        ++answers;
        response = std::move(build)();
      });
      // POST /v1/acquire waits at most an hour (its max_wait's bound).
      timers_.RunUntil(clock_, clock_.Now() + std::chrono::hours(1) + std::chrono::seconds(1));
      if (answers != 1 || timers_.pending() != 0) {
        std::abort();
      }
      // (A HEAD's answer has the headers alone.)
      if (request.method() != boost::beast::http::verb::head &&
          (*response)[boost::beast::http::field::content_type] == "application/json" &&
          !nlohmann::json::accept(response->body())) {
        std::abort();
      }
    }
  }

 private:
  // Parsed once: the rules are immutable, and their counters are only counted into.
  static std::shared_ptr<const server::RuleSet> Rules() {
    static server::CounterRegistry counters;
    static const MemoryStore checker;
    static const std::shared_ptr<const server::RuleSet> rules = [] {
      absl::StatusOr<std::shared_ptr<const server::RuleSet>> parsed =
          server::RuleSet::Parse({{"rules.yaml", kRules}}, counters,
                                 [](const Limit& limit) { return checker.CheckLimit(limit); });
      if (!parsed.ok()) {
        std::abort();
      }
      return *parsed;
    }();
    return rules;
  }

  MemoryStore store_;
  ManualClock clock_;
  server::Metrics metrics_;
  testing::ManualTimers timers_;
  server::RateLimitService service_;
  server::HttpApi api_;
};

}  // namespace sluice::fuzz
