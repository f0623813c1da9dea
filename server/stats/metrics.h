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

#include "server/rules/rules.h"
#include "server/stats/top_keys.h"
#include "sluice/clock.h"

namespace sluice::server {

class Metrics {
 public:
  // Upper bounds of the latency histogram's buckets, in microseconds (then +Inf).
  static constexpr std::array<int64_t, 12> kLatencyBucketsUs = {
      25, 50, 100, 250, 500, 1'000, 2'500, 5'000, 10'000, 25'000, 100'000, 1'000'000};

  CounterRegistry& rules() { return rules_; }
  const CounterRegistry& rules() const { return rules_; }
  // Each rule limit's top offenders (top_keys.h): off until enabled.
  TopOffenders& top() { return top_; }
  const TopOffenders& top() const { return top_; }

  void RecordLatency(Micros latency);
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
  // Render's parts: the rules' counters, and the latency histogram.
  void AppendRuleFamilies(std::string& out) const;
  void AppendLatency(std::string& out) const;

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
  std::array<std::atomic<uint64_t>, kLatencyBucketsUs.size() + 1> latency_buckets_{};
  std::atomic<uint64_t> latency_sum_us_{0};
};

}  // namespace sluice::server
