#pragma once

// The private parts of RateLimitService (service.h), shared by the files that implement it:
//
//   service.cc   the entry points: the rules in force, requests validated, checks (rules,
//                Envoy's per descriptor, ad hoc) both async and waiting, WaitIdle
//   plan.cc      Plan: the limits that apply to a request, each with the key it counts under
//   decide.cc    Decide: those limits in their modes, one step each (enforce, borrow from a
//                pool, shadow, soft, summarise), and their counting for /metrics
//   leases.cc    concurrency limits: leases taken beside the rate limits, given back
//                (ReleaseAsync), and the tokens clients hold them by
//   acquire.cc   AcquireAsync: a request waiting in line until it may go ahead
//
// The store is awaited through store_answer.h. A Planned or PlannedLease belongs to one
// decision and is used by one thread at a time; the service itself is thread-safe as
// service.h says.

#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

#include "server/rules/rules.h"
#include "server/service/explain.h"
#include "server/service/key_names.h"
#include "server/service/service.h"
#include "server/service/task.h"

namespace sluice::server {

// --- Planning (plan.cc) ---

// Separators of RuleKey, and the escape byte that precedes any of them inside a part.
inline constexpr char kEscape = '\x1b';
inline constexpr char kPoolSeparator = '\x1c';
inline constexpr char kDomainMark = '\x1d';
inline constexpr char kEntrySeparator = '\x1e';
inline constexpr char kValueSeparator = '\x1f';

// The key an elastic pool of `domain` counts under.
std::string PoolKey(std::string_view domain, std::string_view pool);

// `entries` as they are counted: IP addresses grouped (IPv6 by the domain's prefix).
std::vector<Entry> CountedEntries(const Domain& domain, std::vector<Entry> entries);

// One limit that applies to a request, with the key it counts under.
// A request to a domain no rule knows is admitted, as envoyproxy/ratelimit admits it, but not
// in silence: counted (one series, no label: the domain is the caller's choice, and a series
// per value would let any caller grow /metrics without bound) and said at debug level, the
// domain cut short and its control bytes replaced, for it is the caller's text.
void CountUnknownDomain(Metrics& metrics, std::string_view domain);

struct RateLimitService::Planned {
  const RuleLimit* rule_limit = nullptr;  // Into the RuleSet, or into `owned`.
  const Rule* rule = nullptr;             // Its rule in the RuleSet; null for an override.
  std::unique_ptr<RuleLimit> owned;       // An Envoy limit override.
  Mode mode = Mode::kHard;
  const Pool* pool = nullptr;      // The elastic pool of its rule.
  const Domain* domain = nullptr;  // Owned by the RuleSet the request holds.
  std::string key;
  size_t descriptor = 0;
  RuleCounters* counters = nullptr;  // Where it is counted for /metrics.
  // The Envoy API counting every hit (EnvoySettings::count_over_limit): decided on
  // rule_limit->counter rather than on its limit.
  bool counting = false;
  bool quota_mode = false;  // Its rule's quota_mode, or EnvoySettings::quota_mode.
};

// A concurrency limit that applies to a request, with the key its leases are held on.
struct RateLimitService::PlannedLease {
  const ConcurrencyLimit* limit = nullptr;  // Into the RuleSet the request holds.
  std::string key;
  size_t descriptor = 0;
};

// --- Explaining a decision (explain.cc) ---

// The explanation of one decision (CheckRequest::explain) in the making: the keys of its
// limits, asked about at cost 0 before and after the decision (Ask), then the explanation
// (Build). Lives in the deciding coroutine's frame, so the store may read `keys` until it
// answers.
struct RateLimitService::Explaining {
  static constexpr size_t kNone = static_cast<size_t>(-1);

  RateLimitService& service;
  const Domain* domain = nullptr;  // Null: an unknown domain, or an ad hoc check.
  Timestamp now;
  const KeyNames& names;

  // The keys asked about: one per distinct limit and key of `planned`, then the pools elastic
  // limits may borrow from; the concurrency limits' keys apart.
  void Prepare(const std::vector<Planned>& planned, const std::vector<PlannedLease>& leases);
  // Asks the store how every key stands (cost 0), before or after the decision: whether it
  // could tell. A failure is kept in `error`: the decision goes on without that state.
  internal::Task<bool> Ask(bool after);
  // The explanation of `result`, decided on `planned` and `leases`, for the request's
  // descriptors at `descriptors`.
  std::shared_ptr<const Explanation> Build(const CheckRequest& request,
                                           std::span<const size_t> descriptors,
                                           const std::vector<Planned>& planned,
                                           const std::vector<PlannedLease>& leases,
                                           const CheckResult& result) const;
  // An ad hoc check's, whose one key the caller put in `keys`.
  std::shared_ptr<const Explanation> BuildAdHoc(const AdHocRequest& request,
                                                const CheckResult& result) const;

  // Descriptor `d` of `request`: its entries, and the rule it matched or why none.
  DescriptorExplanation Describe(const CheckRequest& request, size_t d) const;
  // The limits of `out`'s rule that a `replaces` left out of `planned`, said so.
  void AddReplaced(const std::vector<Planned>& planned, const RequestDescriptor& descriptor,
                   DescriptorExplanation& out) const;
  // The state of keys[at] as the answer tells figures; empty when not asked or not known.
  std::optional<Decision> State(bool after, size_t at, const RuleLimit* rule_limit,
                                bool counting) const;

  std::vector<LimitedKey> keys;
  std::vector<size_t> slot;  // Per planned limit: its key in `keys`, or kNone.
  std::vector<std::pair<const Pool*, size_t>> pools;  // Each with its key in `keys`.
  std::vector<std::string> pool_keys;
  std::vector<LeasedKey> lease_keys;
  std::vector<Decision> rates_before, rates_after, leases_before, leases_after;
  std::string error;
};

// --- Checks shared by the entry points (service.cc) ---

// The limit of an ad hoc request, its key, cost and max_debt checked: InvalidArgument naming
// the field otherwise.
absl::StatusOr<Limit> AdHocLimit(const AdHocRequest& request);

// --- Running a decision for an *Async call (service.cc, leases.cc, acquire.cc) ---

template <typename T>
internal::Detached RateLimitService::Run(internal::Task<T> task, Done<T> done) {
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  {
    // Locals, so that the task's frames and the callback are gone before the count drops
    // (WaitIdle's caller then tears down what they refer to).
    internal::Task<T> running = std::move(task);
    Done<T> answer = std::move(done);
    // A decision that throws (a bug, or memory exhausted) fails alone: the server goes on.
    std::optional<T> result;
    try {
      result.emplace(co_await std::move(running));
    } catch (const std::exception& e) {
      result.emplace(absl::InternalError(fmt::format("the decision failed: {}", e.what())));
    }
    try {
      std::move(answer)(*std::move(result));
    } catch (const std::exception& e) {
      spdlog::error("answering a decision failed: {}", e.what());
    }
  }
  in_flight_.fetch_sub(1, std::memory_order_release);
}

}  // namespace sluice::server
