#pragma once

// Metrics: what sluiced counts, rendered in Prometheus's text format for GET /metrics (and
// sent over statsd by server/stats/). Per rule limit: checks, admitted, denied, near limit,
// shadow denials, soft and elastic admissions, and hits as envoyproxy/ratelimit counts them
// (RuleCounters, kept by a CounterRegistry across reloads). Server-wide: store errors, config
// reloads, requests to unknown domains, a histogram of decision latency, and the build's
// version (sluice_build_info).
//
// Thread-safe: counters are relaxed atomics, incremented from any thread.

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "server/rules/rules.h"
#include "server/stats/top_keys.h"
#include "sluice/clock.h"
#include "src/core/mutex.h"

namespace sluice::server {

// A histogram of durations in fixed buckets (their upper bounds kBucketsUs, then +Inf), as
// Prometheus's text format shows one. Thread-safe: relaxed atomics.
class LatencyHistogram {
 public:
  static constexpr std::array<int64_t, 12> kBucketsUs = {
      25, 50, 100, 250, 500, 1'000, 2'500, 5'000, 10'000, 25'000, 100'000, 1'000'000};

  void Record(Micros latency);
  // The count of each bucket (not cumulative), the last for +Inf.
  std::array<uint64_t, kBucketsUs.size() + 1> Counts() const;
  // The family `name` with its HELP text, appended to `out`.
  void Append(std::string& out, std::string_view name, std::string_view help) const;

 private:
  std::array<std::atomic<uint64_t>, kBucketsUs.size() + 1> buckets_{};
  std::atomic<uint64_t> sum_us_{0};
};

class Metrics {
 public:
  // The most domains no rule knows that are counted each by name (CountDomainNotFound):
  // callers choose them, and each name is a statsd series.
  static constexpr size_t kMaxUnknownDomains = 64;

  CounterRegistry& rules() { return rules_; }
  const CounterRegistry& rules() const { return rules_; }
  // Each rule limit's top offenders (top_keys.h): off until enabled.
  TopOffenders& top() { return top_; }
  const TopOffenders& top() const { return top_; }

  void RecordLatency(Micros latency) { latency_.Record(latency); }
  // Envoy's ShouldRateLimit over gRPC, from its arrival to its answer (envoyproxy/ratelimit's
  // ratelimit_server.ShouldRateLimit.total_requests and .response_time).
  LatencyHistogram& grpc_calls() { return grpc_calls_; }
  const LatencyHistogram& grpc_calls() const { return grpc_calls_; }
  // An Envoy request refused before any decision (no domain, no descriptors, no rules loaded):
  // their should_rate_limit.service_error.
  void CountServiceError() { service_errors_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t service_errors() const { return service_errors_.load(std::memory_order_relaxed); }
  // `descriptors` of an Envoy request to `domain`, which no rule knows (their
  // rate_limit.DOMAIN.domain_not_found, counted per descriptor as theirs). The first
  // kMaxUnknownDomains names are counted each; later ones are not (the total is
  // CountUnknownDomain's).
  void CountDomainNotFound(std::string_view domain, uint64_t descriptors);
  // Each counted name and its count.
  std::vector<std::pair<std::string, uint64_t>> DomainsNotFound() const;
  void CountStoreError() { store_errors_.fetch_add(1, std::memory_order_relaxed); }
  void CountReload(bool ok) {
    (ok ? reloads_ : reload_failures_).fetch_add(1, std::memory_order_relaxed);
  }
  void CountBadRequest() { bad_requests_.fetch_add(1, std::memory_order_relaxed); }
  // A request to a domain no rule knows (admitted: nothing limits it).
  void CountUnknownDomain() { unknown_domain_.fetch_add(1, std::memory_order_relaxed); }
  // An Envoy answer over the limit made OK by the global shadow mode (--shadow-mode).
  void CountGlobalShadowMode() { global_shadow_mode_.fetch_add(1, std::memory_order_relaxed); }
  // A limit given by a caller refused: callers had kMaxCallerLimits in use (CallerLimits).
  void CountCallerLimitRefused() { caller_limits_refused_.fetch_add(1, std::memory_order_relaxed); }
  // Settles of receipts (POST /v1/settle): made, or refused for their receipt (forged,
  // changed, expired, settled already, malformed).
  void CountSettle(bool made) {
    (made ? settles_ : settles_refused_).fetch_add(1, std::memory_order_relaxed);
  }
  void CountReset() { resets_.fetch_add(1, std::memory_order_relaxed); }
  // A partner's answer told (POST /v1/feedback), and the parts of it ignored or bounded.
  void CountFeedback(uint64_t notes) {
    feedback_.fetch_add(1, std::memory_order_relaxed);
    feedback_notes_.fetch_add(notes, std::memory_order_relaxed);
  }
  // A request to an admin endpoint without the right token (401, 403).
  void CountAdminRefused() { admin_refused_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t settles() const { return settles_.load(std::memory_order_relaxed); }
  uint64_t settles_refused() const { return settles_refused_.load(std::memory_order_relaxed); }
  uint64_t admin_refused() const { return admin_refused_.load(std::memory_order_relaxed); }
  uint64_t caller_limits_refused() const {
    return caller_limits_refused_.load(std::memory_order_relaxed);
  }
  uint64_t global_shadow_mode() const {
    return global_shadow_mode_.load(std::memory_order_relaxed);
  }
  uint64_t store_errors() const { return store_errors_.load(std::memory_order_relaxed); }
  uint64_t reloads() const { return reloads_.load(std::memory_order_relaxed); }
  uint64_t reload_failures() const { return reload_failures_.load(std::memory_order_relaxed); }

  // The Prometheus text exposition of everything above, plus `extra` lines appended as they
  // are (the store's own gauges).
  std::string Render(std::string_view extra = {}) const;
  // The top `n` keys of each rule limit followed by top(), by denials and by hits over its
  // window at `now`, as gauges labelled with the rule and the key as `show` names it
  // (sluiced's --top-metrics): at most 2 * n * TopOffenders::kMaxRules series, whatever the
  // callers send.
  std::string RenderTop(size_t n, Timestamp now,
                        const std::function<std::string(std::string_view)>& show) const;

 private:
  // Render's part: the rules' counters.
  void AppendRuleFamilies(std::string& out) const;

  CounterRegistry rules_;
  TopOffenders top_;
  std::atomic<uint64_t> store_errors_{0};
  std::atomic<uint64_t> reloads_{0};
  std::atomic<uint64_t> reload_failures_{0};
  std::atomic<uint64_t> bad_requests_{0};
  std::atomic<uint64_t> global_shadow_mode_{0};
  std::atomic<uint64_t> caller_limits_refused_{0};
  std::atomic<uint64_t> unknown_domain_{0};
  std::atomic<uint64_t> settles_{0};
  std::atomic<uint64_t> settles_refused_{0};
  std::atomic<uint64_t> resets_{0};
  std::atomic<uint64_t> feedback_{0};
  std::atomic<uint64_t> feedback_notes_{0};
  std::atomic<uint64_t> admin_refused_{0};
  std::atomic<uint64_t> service_errors_{0};
  LatencyHistogram latency_;
  LatencyHistogram grpc_calls_;
  mutable internal::Mutex unknown_domains_mutex_;
  absl::flat_hash_map<std::string, uint64_t> unknown_domains_
      ABSL_GUARDED_BY(unknown_domains_mutex_);
};

}  // namespace sluice::server
