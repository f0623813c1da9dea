// Explanations (explain.h): the service's side. Explaining gathers the keys of a decision's
// limits, asks the store how they stand before and after it (cost 0), and puts the
// explanation together from the plan, the match and the outcomes.

#include "server/service/explain.h"

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "fmt/ranges.h"

#include "server/service/service_internal.h"
#include "server/service/store_answer.h"
#include "src/core/status.h"

namespace sluice::server {
namespace {

// What one limit did, in words.
std::string Verdict(const LimitOutcome& o, bool admitted) {
  const Decision& d = o.decision;
  if (o.unlimited) {
    return "unlimited: never counted, never denies";
  }
  if (o.blocked) {
    return "denied: its key is blocked (the rule's block), until retry_after";
  }
  if (o.paused) {
    return "denied: its partner asked for a pause (feedback), until retry_after";
  }
  if (o.paced) {
    return "denied: its rate is cut below the limit by its partner's 429s (adaptive)";
  }
  if (o.pool) {
    return "lent what a borrowing limit lacked (an elastic pool)";
  }
  if (o.borrowed) {
    return "over its own limit; admitted on its pool";
  }
  if (!o.limit && o.concurrency == 0 && !d.allowed) {
    return "denied: its rule admits nothing (requests_per_unit 0)";
  }
  if (o.mode == Mode::kShadow) {
    return d.allowed ? "admitted (shadow mode: counts, never denies)"
                     : "would deny; admitted (shadow mode)";
  }
  if (o.over_soft) {
    return "admitted past its nominal limit (soft mode)";
  }
  if (!d.allowed) {
    return d.never_allowed() ? "denied: the cost is more than it can ever admit" : "denied";
  }
  return admitted ? "admitted" : "would admit; nothing charged, as the request was denied";
}

// A query's answer (cost 0) in the figures the answer tells: a counted limit's count against
// its nominal limit; soft mode's stored room less what soft mode adds.
Decision Shown(const RuleLimit* rule_limit, bool counting, Decision raw) {
  Decision shown{.allowed = true, .remaining = raw.remaining, .reset_after = raw.reset_after};
  if (rule_limit == nullptr) {
    return shown;
  }
  if (counting) {
    shown.remaining =
        std::max<int64_t>(0, rule_limit->nominal - (Limit::kMaxCount - raw.remaining));
  } else if (rule_limit->soft_extra > 0) {
    shown.remaining = std::max<int64_t>(0, raw.remaining - rule_limit->soft_extra);
  }
  return shown;
}

// Explanation::decided_by: the limit whose figures the answer's are.
void FindDecider(Explanation& e) {
  const auto wait = [](Micros m) { return m == kNeverAllowed ? Micros::max() : m; };
  for (size_t d = 0; d < e.descriptors.size(); ++d) {
    const std::vector<LimitExplanation>& limits = e.descriptors[d].limits;
    for (size_t j = 0; j < limits.size(); ++j) {
      const LimitOutcome& o = limits[j].outcome;
      if (!limits[j].decided || o.unlimited || o.borrowed) {
        continue;
      }
      const bool denies = !o.decision.allowed && o.mode != Mode::kShadow;
      if (e.admitted == denies) {
        continue;
      }
      if (!e.decided_by) {
        e.decided_by = Explanation::At{d, j};
        continue;
      }
      const LimitOutcome& best =
          e.descriptors[e.decided_by->descriptor].limits[e.decided_by->limit].outcome;
      if (e.admitted ? o.decision.remaining < best.decision.remaining
                     : wait(o.decision.retry_after) > wait(best.decision.retry_after)) {
        e.decided_by = Explanation::At{d, j};
      }
    }
  }
}

}  // namespace

void RateLimitService::Explaining::Prepare(const std::vector<Planned>& planned,
                                           const std::vector<PlannedLease>& leases) {
  slot.assign(planned.size(), kNone);
  for (size_t i = 0; i < planned.size(); ++i) {
    const Planned& p = planned[i];
    const RuleLimit& rule_limit = *p.rule_limit;
    const Limit* limit = p.counting         ? &*rule_limit.counter
                         : rule_limit.limit ? &*rule_limit.limit
                                            : nullptr;
    if (rule_limit.unlimited || limit == nullptr) {
      continue;
    }
    const auto same = std::find_if(keys.begin(), keys.end(), [&](const LimitedKey& k) {
      return *k.limit == *limit && k.key == p.key;
    });
    slot[i] = static_cast<size_t>(same - keys.begin());
    if (same == keys.end()) {
      // A counter is never converted (DecideCounting names no earlier figures): a query that
      // did so would change what the next decision finds.
      keys.push_back({.limit = limit,
                      .key = p.key,
                      .before = p.counting ? std::span<const Limit>() : rule_limit.before});
    }
    if (p.pool != nullptr && p.mode == Mode::kElastic &&
        std::none_of(pools.begin(), pools.end(),
                     [&](const auto& q) { return q.first == p.pool; })) {
      pools.emplace_back(p.pool, kNone);
    }
  }
  pool_keys.reserve(pools.size());  // keys hold views of them.
  for (auto& [pool, at] : pools) {
    pool_keys.push_back(PoolKey(domain->name, pool->name));
    at = keys.size();
    keys.push_back(
        {.limit = &*pool->limit.limit, .key = pool_keys.back(), .before = pool->limit.before});
  }
  for (const PlannedLease& lease : leases) {
    lease_keys.push_back({.key = lease.key, .capacity = lease.limit->capacity});
  }
}

internal::Task<bool> RateLimitService::Explaining::Ask(bool after) {
  std::vector<Decision>& rates = after ? rates_after : rates_before;
  std::vector<Decision>& held = after ? leases_after : leases_before;
  if (!keys.empty()) {
    rates.assign(keys.size(), Decision{});
    const absl::StatusOr<Decision> asked =
        co_await StoreDecision(service.store_, keys, 0, now, rates);
    if (!asked.ok()) {
      rates.clear();
      error = fmt::format("the state {} the decision could not be read: {}",
                          after ? "after" : "before", internal::Message(asked.status()));
    }
  }
  if (!lease_keys.empty()) {
    held.assign(lease_keys.size(), Decision{});
    const absl::StatusOr<Decision> asked =
        co_await StoreLeases(service.store_, LeaseOp::kQuery, lease_keys, "",
                             ConcurrencyLimit::kDefaultLeaseTtl, now, held);
    if (!asked.ok()) {
      held.clear();
      error = fmt::format("the leases {} the decision could not be read: {}",
                          after ? "after" : "before", internal::Message(asked.status()));
    }
  }
  co_return error.empty();
}

std::optional<Decision> RateLimitService::Explaining::State(bool after, size_t at,
                                                            const RuleLimit* rule_limit,
                                                            bool counting) const {
  const std::vector<Decision>& rates = after ? rates_after : rates_before;
  if (at == kNone || at >= rates.size()) {
    return std::nullopt;
  }
  return Shown(rule_limit, counting, rates[at]);
}

DescriptorExplanation RateLimitService::Explaining::Describe(const CheckRequest& request,
                                                             size_t d) const {
  DescriptorExplanation out;
  const RequestDescriptor& descriptor = request.descriptors[d];
  out.entries = descriptor.entries;
  if (domain == nullptr) {
    out.match = fmt::format("no rule: no rules file has domain \"{}\"", request.domain);
  } else if (descriptor.limit && descriptor.limit->unit != Unit::kUnknown) {
    out.rule = fmt::format("{}.override", domain->name);
    out.match = fmt::format("Envoy's limit in the request, {} per {}: the rules are not asked",
                            descriptor.limit->requests_per_unit, UnitName(descriptor.limit->unit));
  } else {
    const MatchReport report = ExplainMatch(*domain, descriptor.entries);
    out.match = DescribeMatch(*domain, descriptor.entries, report);
    if (report.rule != nullptr) {
      out.rule = report.rule->path;
      if (report.rule->unlimited) {
        out.match += " (unlimited)";
      }
    }
  }
  return out;
}

void RateLimitService::Explaining::AddReplaced(const std::vector<Planned>& planned,
                                               const RequestDescriptor& descriptor,
                                               DescriptorExplanation& out) const {
  // An override replaces the rules (no limit of theirs was asked, none was replaced).
  const bool override = descriptor.limit && descriptor.limit->unit != Unit::kUnknown;
  const MatchReport report = domain != nullptr && !out.rule.empty() && !override
                                 ? ExplainMatch(*domain, out.entries)
                                 : MatchReport{};
  if (report.rule == nullptr) {
    return;
  }
  for (const RuleLimit& rule_limit : report.rule->limits) {
    if (std::any_of(planned.begin(), planned.end(),
                    [&](const Planned& p) { return p.rule_limit == &rule_limit; })) {
      continue;
    }
    std::vector<std::string_view> by;
    for (const Planned& p : planned) {
      if (std::find(p.rule_limit->replaces.begin(), p.rule_limit->replaces.end(),
                    rule_limit.name) != p.rule_limit->replaces.end()) {
        by.push_back(p.rule_limit->name);
      }
    }
    LimitExplanation& l = out.limits.emplace_back();
    l.outcome.name = rule_limit.name;
    l.outcome.limit = rule_limit.limit;
    l.outcome.nominal = rule_limit.nominal;
    l.outcome.mode = report.rule->mode;
    l.source = report.rule->path;
    l.decided = false;
    // Envoy's API decides each descriptor apart: the limit that replaced it may be another's.
    l.verdict = by.empty() ? "replaced by a limit of another descriptor: not asked"
                           : fmt::format("replaced by {}: not asked", fmt::join(by, ", "));
  }
}

std::shared_ptr<const Explanation> RateLimitService::Explaining::Build(
    const CheckRequest& request, std::span<const size_t> descriptors,
    const std::vector<Planned>& planned, const std::vector<PlannedLease>& leases,
    const CheckResult& result) const {
  auto e = std::make_shared<Explanation>();
  e->domain = request.domain;
  // The Envoy API decides each descriptor on its own, at its own cost.
  e->cost = request.envoy && descriptors.size() == 1
                ? request.descriptors[descriptors.front()].cost.value_or(request.cost)
                : request.cost;
  e->admitted = result.combined.allowed;
  e->error = error;
  for (size_t d : descriptors) {
    e->descriptors.push_back(Describe(request, d));
  }
  size_t lease = 0;
  for (size_t i = 0; i < result.limits.size(); ++i) {
    const LimitOutcome& outcome = result.limits[i];
    const auto at = std::find(descriptors.begin(), descriptors.end(), outcome.descriptor);
    if (at == descriptors.end()) {
      continue;
    }
    LimitExplanation& l =
        e->descriptors[static_cast<size_t>(at - descriptors.begin())].limits.emplace_back();
    l.outcome = outcome;
    l.outcome.counters = nullptr;
    l.verdict = Verdict(outcome, e->admitted);
    if (i < planned.size()) {
      const Planned& p = planned[i];
      l.source = p.rule != nullptr ? p.rule->path : p.rule_limit->name;
      l.key = names.Show(p.key);
      l.before = State(false, slot[i], p.rule_limit, p.counting);
      l.after = State(true, slot[i], p.rule_limit, p.counting);
    } else if (outcome.pool) {
      for (size_t k = 0; k < pools.size(); ++k) {
        if (pools[k].first->limit.name == outcome.name) {
          l.source = fmt::format("pool {}", pools[k].first->name);
          l.key = names.Show(pool_keys[k]);
          l.before = State(false, pools[k].second, nullptr, false);
          l.after = State(true, pools[k].second, nullptr, false);
        }
      }
    } else if (outcome.concurrency > 0 && lease < leases.size()) {
      l.source = outcome.name;
      l.key = names.Show(leases[lease].key);
      if (lease < leases_before.size()) {
        l.before = leases_before[lease];
      }
      if (lease < leases_after.size()) {
        l.after = leases_after[lease];
      }
      ++lease;
    }
  }
  for (size_t i = 0; i < descriptors.size(); ++i) {
    AddReplaced(planned, request.descriptors[descriptors[i]], e->descriptors[i]);
  }
  FindDecider(*e);
  return e;
}

std::shared_ptr<const Explanation> RateLimitService::Explaining::BuildAdHoc(
    const AdHocRequest& request, const CheckResult& result) const {
  auto e = std::make_shared<Explanation>();
  e->cost = request.cost;
  e->admitted = result.combined.allowed;
  e->error = error;
  DescriptorExplanation& out = e->descriptors.emplace_back();
  out.match = "ad hoc: the limit is in the request";
  for (const LimitOutcome& outcome : result.limits) {
    LimitExplanation& l = out.limits.emplace_back();
    l.outcome = outcome;
    l.outcome.counters = nullptr;
    l.source = "ad hoc";
    l.key = names.Show(request.key);
    l.verdict = Verdict(outcome, e->admitted);
    l.before = State(false, 0, nullptr, false);
    l.after = State(true, 0, nullptr, false);
  }
  FindDecider(*e);
  return e;
}

RateLimitService::CheckTask RateLimitService::DecideExplained(
    const Domain& domain, const CheckRequest& request, std::vector<size_t> descriptors,
    std::vector<Planned>& planned, std::vector<PlannedLease>& leases, int64_t cost, Timestamp now,
    bool count, bool matched) {
  Explaining explaining{.service = *this, .domain = &domain, .now = now, .names = names_};
  explaining.Prepare(planned, leases);
  co_await explaining.Ask(/*after=*/false);
  absl::StatusOr<CheckResult> result = CheckResult{.unmatched = !matched};
  if (!leases.empty()) {
    result = co_await DecideLeased(planned, leases, cost, now, count, request.receipt);
  } else if (!planned.empty()) {
    result =
        co_await Decide(planned, cost, now, /*denied_elsewhere=*/false, count, request.receipt);
  }
  if (result.ok()) {
    co_await explaining.Ask(/*after=*/true);
    result->explanation = explaining.Build(request, descriptors, planned, leases, *result);
  }
  co_return result;
}

RateLimitService::CheckTask RateLimitService::ExplainAdHoc(AdHocRequest request, bool count) {
  absl::StatusOr<Limit> limit = AdHocLimit(request);
  if (!limit.ok()) {
    co_return limit.status();
  }
  // Admitted among the caller limits before it is asked about: a query may make a limit's
  // table in the memory store, which the bound on callers' limits is there to hold.
  if (absl::Status s = AdmitCallerLimit(*limit, clock_.Now()); !s.ok()) {
    co_return s;
  }
  Explaining explaining{.service = *this, .now = clock_.Now(), .names = names_};
  explaining.keys.push_back({.limit = &*limit, .key = request.key});
  co_await explaining.Ask(/*after=*/false);
  request.explain = false;
  absl::StatusOr<CheckResult> result = co_await DecideAdHoc(request, count);
  if (result.ok()) {
    explaining.now = clock_.Now();
    co_await explaining.Ask(/*after=*/true);
    result->explanation = explaining.BuildAdHoc(request, *result);
  }
  co_return result;
}

std::shared_ptr<const Explanation> RateLimitService::ExplainUnmatched(
    const Domain* domain, const CheckRequest& request, std::vector<size_t> descriptors) {
  const Explaining explaining{
      .service = *this, .domain = domain, .now = clock_.Now(), .names = names_};
  return explaining.Build(request, descriptors, {}, {}, CheckResult{});
}

}  // namespace sluice::server
