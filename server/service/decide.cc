#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "openssl/sha.h"

#include "server/service/deciding.h"
#include "server/service/store_answer.h"

namespace sluice::server {
namespace {

// The decision a request is denied with when its rule allows nothing (requests_per_unit: 0).
constexpr Decision kAlwaysDenied{.allowed = false, .retry_after = kNeverAllowed};

void Count(const LimitOutcome& outcome, RuleCounters& counters, bool admitted, int64_t hits);

}  // namespace

void CountOutcomes(const CheckResult& result) {
  for (const LimitOutcome& outcome : result.limits) {
    if (outcome.counters != nullptr) {
      Count(outcome, *outcome.counters, result.combined.allowed, result.cost);
    }
  }
}

namespace {

// envoyproxy/ratelimit's near-limit threshold of a limit of `nominal`: floor(nominal * ratio),
// multiplied in float32 as theirs, so that the same hits count the same.
int64_t NearThreshold(int64_t nominal, const RuleCounters& counters) {
  const float ratio = counters.near_limit_ratio != nullptr
                          ? counters.near_limit_ratio->load(std::memory_order_relaxed)
                          : CounterRegistry::kDefaultNearLimitRatio;
  return static_cast<int64_t>(std::floor(static_cast<double>(static_cast<float>(nominal) * ratio)));
}

void Add(std::atomic<uint64_t>& counter, int64_t n) {
  counter.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
}

// What the limit's key held before a request of `hits`, in the limit's units: the count
// before its hits for a counted limit; else the limit less what it had left, which is after
// the request when the store recorded it (the request was admitted and the limit allowed it)
// and as it stood otherwise.
int64_t UsedBefore(const LimitOutcome& outcome, bool admitted, int64_t hits) {
  if (outcome.count) {
    return *outcome.count - hits;
  }
  const bool recorded = admitted && outcome.decision.allowed;
  return outcome.nominal - outcome.decision.remaining - (recorded ? hits : 0);
}

// The hit counters (RuleCounters says what each counts), with envoyproxy/ratelimit's partial
// counting of a request that crosses the limit or the near-limit threshold.
void CountHits(const LimitOutcome& outcome, RuleCounters& counters, bool admitted, int64_t hits) {
  const int64_t limit = outcome.nominal;
  const int64_t near = NearThreshold(limit, counters);
  const int64_t before = UsedBefore(outcome, admitted, hits);
  const int64_t after = before + hits;
  Add(counters.total_hits, hits);
  if (after > limit) {
    const int64_t over = before >= limit ? hits : after - limit;
    Add(counters.over_limit_hits, over);
    if (before < limit) {
      Add(counters.near_limit_hits, limit - std::max(near, before));
    }
    if (outcome.mode == Mode::kShadow) {
      Add(counters.shadow_mode_hits, over);
    }
    return;
  }
  if (after > near) {
    Add(counters.near_limit_hits, before >= near ? hits : after - near);
  }
  Add(counters.within_limit_hits, hits);
}

void Count(const LimitOutcome& outcome, RuleCounters& counters, bool admitted, int64_t hits) {
  counters.checks.fetch_add(1, std::memory_order_relaxed);
  if (admitted) {
    counters.admitted.fetch_add(1, std::memory_order_relaxed);
    // Near the limit: more of it used than the near-limit ratio (0.8 by default).
    if (!outcome.unlimited && !outcome.pool &&
        outcome.nominal - outcome.decision.remaining > NearThreshold(outcome.nominal, counters)) {
      counters.near_limit.fetch_add(1, std::memory_order_relaxed);
    }
  } else if (!outcome.decision.allowed && outcome.mode != Mode::kShadow) {
    counters.denied.fetch_add(1, std::memory_order_relaxed);
  }
  if (admitted && outcome.mode == Mode::kShadow && !outcome.decision.allowed) {
    counters.shadow_denied.fetch_add(1, std::memory_order_relaxed);
  }
  if (outcome.over_soft) {
    counters.over_soft.fetch_add(1, std::memory_order_relaxed);
  }
  if (outcome.borrowed) {
    counters.borrowed.fetch_add(1, std::memory_order_relaxed);
  }
  if (outcome.blocked) {
    counters.blocked.fetch_add(1, std::memory_order_relaxed);
  }
  if (outcome.paused) {
    counters.paused.fetch_add(1, std::memory_order_relaxed);
  }
  if (outcome.paced) {
    counters.paced.fetch_add(1, std::memory_order_relaxed);
  }
  // As envoyproxy/ratelimit: an unlimited rule counts no hits (nor does a concurrency limit,
  // which is sluice's own).
  if (!outcome.unlimited && outcome.concurrency == 0 && hits > 0) {
    CountHits(outcome, counters, admitted, hits);
  }
}

}  // namespace

RateLimitService::CheckTask RateLimitService::Decide(std::vector<Planned>& planned, int64_t cost,
                                                     Timestamp now, bool denied_elsewhere,
                                                     bool count, bool receipt) {
  Deciding deciding{.service = *this, .planned = planned, .now = now, .receipt = receipt};
  deciding.result.cost = cost;
  deciding.Classify(cost);
  deciding.admitted = !deciding.always_denied && !denied_elsewhere;
  if (!deciding.blocking.empty()) {
    if (absl::Status s = co_await deciding.CheckBlocks(); !s.ok()) {
      co_return s;
    }
    if (absl::Status s = co_await deciding.Pace(denied_elsewhere ? 0 : cost); !s.ok()) {
      co_return s;
    }
  }
  // A blocked request is only asked how its limits stand: it charges nothing.
  const int64_t charged = deciding.blocked ? 0 : cost;
  if (!deciding.counting.empty()) {
    if (absl::Status s = co_await deciding.DecideCounting(charged); !s.ok()) {
      co_return s;
    }
  }
  if (!deciding.enforced.empty()) {
    if (absl::Status s = co_await deciding.DecideEnforced(charged); !s.ok()) {
      co_return s;
    }
    if (!deciding.admitted && !deciding.always_denied && !deciding.counted_over &&
        !deciding.blocked && !denied_elsewhere) {
      if (absl::Status s = co_await deciding.BorrowFromPools(cost); !s.ok()) {
        co_return s;
      }
    }
  }
  deciding.ApplyBlocks();
  if (!deciding.paced.empty()) {
    if (absl::Status s = co_await deciding.Unpace(); !s.ok()) {
      co_return s;
    }
  }
  if (!deciding.blocking.empty() && !denied_elsewhere) {
    if (absl::Status s = co_await deciding.StartBlocks(cost); !s.ok()) {
      co_return s;
    }
  }
  if (!deciding.shadow.empty()) {
    if (absl::Status s = co_await deciding.DecideShadow(cost); !s.ok()) {
      co_return s;
    }
  }
  deciding.CopyRepeats();
  deciding.ApplySoft();
  deciding.Summarise(count);
  if (receipt && deciding.admitted && cost > 0 && !deciding.receipt_limits.empty()) {
    IssueReceipt(std::move(deciding.receipt_limits), now, deciding.result);
  }
  co_return std::move(deciding.result);
}

namespace {

// Limits of one request that share a name (one rule applied to two descriptor values) are
// told apart in the RateLimit headers by a partition: the first 9 bytes of the SHA-256 of
// each one's key, the same on every server of a fleet and naming no value.
void SetPartitions(std::vector<LimitOutcome>& limits, const std::vector<std::string_view>& keys) {
  std::vector<size_t> order(keys.size());
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return limits[a].name < limits[b].name; });
  for (size_t first = 0, last = 0; first < order.size(); first = last) {
    const std::string& name = limits[order[first]].name;
    last = first + 1;
    bool mixed = false;
    for (; last < order.size() && limits[order[last]].name == name; ++last) {
      mixed = mixed || keys[order[last]] != keys[order[first]];
    }
    for (size_t k = first; mixed && k < last; ++k) {
      const std::string_view key = keys[order[k]];
      unsigned char digest[SHA256_DIGEST_LENGTH];
      SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest);
      limits[order[k]].partition.assign(reinterpret_cast<const char*>(digest), 9);
    }
  }
}

}  // namespace

void RateLimitService::Deciding::Classify(int64_t cost) {
  result.limits.reserve(planned.size() + 1);
  for (size_t i = 0; i < planned.size(); ++i) {
    const Planned& p = planned[i];
    const auto earlier = std::find_if(
        planned.begin(), planned.begin() + static_cast<ptrdiff_t>(i), [&](const Planned& q) {
          return q.rule_limit->limit == p.rule_limit->limit && q.key == p.key && q.mode == p.mode;
        });
    const RuleLimit& rule_limit = *p.rule_limit;
    LimitOutcome& outcome = result.limits.emplace_back();
    outcome.name = rule_limit.name;
    outcome.named = rule_limit.named;
    outcome.limit = rule_limit.limit;
    outcome.nominal = rule_limit.nominal;
    outcome.unit = rule_limit.unit;
    outcome.mode = p.mode;
    outcome.descriptor = p.descriptor;
    outcome.unlimited = rule_limit.unlimited;
    if (rule_limit.unlimited) {
      outcome.decision.allowed = true;
    } else if (p.counting) {
      counting.push_back(i);
    } else if (earlier != planned.begin() + static_cast<ptrdiff_t>(i) && rule_limit.limit) {
      repeats.emplace_back(i, static_cast<size_t>(earlier - planned.begin()));
    } else if (!rule_limit.limit) {
      outcome.decision = cost == 0 ? Decision{.allowed = true} : kAlwaysDenied;
      always_denied = always_denied || (cost > 0 && p.mode != Mode::kShadow);
    } else {
      (p.mode == Mode::kShadow ? shadow : enforced).push_back(i);
    }
    // A shadow limit never blocks: it never changes an answer.
    if ((rule_limit.block || rule_limit.feedback) && p.mode != Mode::kShadow &&
        !rule_limit.unlimited && (rule_limit.limit || p.counting) &&
        (earlier == planned.begin() + static_cast<ptrdiff_t>(i))) {
      blocking.push_back(i);
    }
  }
  // Most requests have no two limits of one name: found out without allocating.
  bool shared = false;
  for (size_t i = 0; i < planned.size() && planned.size() <= 16 && !shared; ++i) {
    for (size_t j = i + 1; j < planned.size() && !shared; ++j) {
      shared = result.limits[i].name == result.limits[j].name;
    }
  }
  if (!shared && planned.size() <= 16) {
    return;
  }
  std::vector<std::string_view> keys;
  keys.reserve(planned.size());
  for (const Planned& p : planned) {
    keys.emplace_back(p.key);
  }
  SetPartitions(result.limits, keys);
}

auto RateLimitService::Deciding::StoreCall(const std::vector<size_t>& group, int64_t group_cost,
                                           const std::vector<const Pool*>& pools) {
  keys.clear();
  for (size_t i : group) {
    const RuleLimit& rule_limit = *planned[i].rule_limit;
    keys.push_back({.limit = &*rule_limit.limit,
                    .key = planned[i].key,
                    .share = rule_limit.share ? &*rule_limit.share : nullptr,
                    .before = rule_limit.before});
  }
  pool_keys.clear();
  pool_keys.reserve(pools.size());
  for (const Pool* pool : pools) {
    pool_keys.push_back(PoolKey(planned.front().domain->name, pool->name));
    keys.push_back(
        {.limit = &*pool->limit.limit, .key = pool_keys.back(), .before = pool->limit.before});
  }
  each.assign(keys.size(), Decision{});
  // A receipt's calls charge, so that what they took can be given back; ChargeAllAsync
  // decides as DecideAllAsync does (shares aside: a charge to settle is the store's own).
  charges.assign(receipt ? keys.size() : 0, Charge{});
  return StoreAnswer([this, group_cost](DecideDone done) {
    if (receipt) {
      service.store_.ChargeAllAsync(keys, group_cost, now, each, charges, std::move(done));
    } else {
      service.store_.DecideAllAsync(keys, group_cost, now, each, std::move(done));
    }
  });
}

void RateLimitService::Deciding::Keep(const std::vector<size_t>& outcomes,
                                      const std::vector<const Pool*>& pools) {
  if (!receipt) {
    return;
  }
  for (size_t j = 0; j < keys.size(); ++j) {
    const RuleLimit& rule_limit =
        j < outcomes.size() ? *planned[outcomes[j]].rule_limit : pools[j - outcomes.size()]->limit;
    receipt_limits.push_back({.name = rule_limit.name,
                              .limit = *keys[j].limit,
                              .key = std::string(keys[j].key),
                              .charge = charges[j],
                              .max_debt = rule_limit.max_debt.value_or(rule_limit.nominal)});
  }
}

absl::StatusOr<bool> RateLimitService::Deciding::AdmittedBy(
    const absl::StatusOr<Decision>& combined) {
  if (!combined.ok()) {
    service.CountStoreFailure(combined.status());
    return combined.status();
  }
  return combined->allowed;
}

namespace {

// Whether `counter` is the `allow` failure policy's answer (allowed, every figure 0) rather than
// a counter's: a counter that allowed a request keeps a trace of it (reset_after > 0), and one
// asked a query (cost 0) has room left. Its count is unknown; the policy admits the request.
bool FellBackToAllow(const Decision& counter) {
  return counter.allowed && counter.remaining == 0 && counter.reset_after == Micros{0};
}

// A counted limit of `nominal` as the Envoy API answers it, from its counter's decision on a
// request of `cost`: over when the count, this request's hits included, passes the limit, and
// then until its window ends (the count only grows). A counter too full to count (beyond
// Limit::kMaxCount) is over whatever the limit.
Decision Counted(const Decision& counter, int64_t nominal, int64_t cost) {
  if (FellBackToAllow(counter)) {
    return counter;
  }
  Decision decision{.reset_after = counter.reset_after};
  const int64_t count = Limit::kMaxCount - counter.remaining;
  decision.allowed = counter.allowed && count <= nominal;
  decision.remaining = counter.allowed ? std::max<int64_t>(0, nominal - count) : 0;
  if (!decision.allowed) {
    decision.retry_after = cost > nominal ? kNeverAllowed : counter.reset_after;
  }
  return decision;
}

}  // namespace

internal::Task<absl::Status> RateLimitService::Deciding::DecideCounting(int64_t cost) {
  // Limits of one period on one key share a counter, charged once.
  keys.clear();
  std::vector<size_t> slot;
  for (size_t i : counting) {
    const Limit* counter = &*planned[i].rule_limit->counter;
    const auto same = std::find_if(keys.begin(), keys.end(), [&](const LimitedKey& k) {
      return *k.limit == *counter && k.key == planned[i].key;
    });
    slot.push_back(static_cast<size_t>(same - keys.begin()));
    if (same == keys.end()) {
      keys.push_back({.limit = counter, .key = planned[i].key});
    }
  }
  each.assign(keys.size(), Decision{});
  const absl::StatusOr<Decision> combined =
      co_await StoreDecision(service.store_, keys, cost, now, each);
  if (absl::IsResourceExhausted(combined.status())) {
    // A failure here is one Envoy's default (failure_mode_deny: false) admits: a key over its
    // limit must not go free because another key of the request found no room. A query
    // (cost 0) creates no key.
    std::vector<Decision> known(keys.size());
    const absl::StatusOr<Decision> query =
        co_await StoreDecision(service.store_, keys, 0, now, known);
    if (query.ok() && OverWhenFull(known, slot, cost)) {
      co_return absl::OkStatus();
    }
  }
  if (const absl::StatusOr<bool> counted = AdmittedBy(combined); !counted.ok()) {
    co_return counted.status();
  }
  for (size_t j = 0; j < counting.size(); ++j) {
    LimitOutcome& outcome = result.limits[counting[j]];
    outcome.decision = Counted(each[slot[j]], outcome.nominal, cost);
    if (each[slot[j]].allowed && !FellBackToAllow(each[slot[j]])) {
      outcome.count = Limit::kMaxCount - each[slot[j]].remaining;
    }
    if (!outcome.decision.allowed && outcome.mode != Mode::kShadow) {
      counted_over = true;
      admitted = false;
    }
  }
  co_return absl::OkStatus();
}

bool RateLimitService::Deciding::OverWhenFull(const std::vector<Decision>& known,
                                              const std::vector<size_t>& slot, int64_t cost) {
  bool over = false;
  for (size_t j = 0; j < counting.size(); ++j) {
    Decision charged = known[slot[j]];  // As if this request's hits had been counted.
    charged.remaining = std::max<int64_t>(0, charged.remaining - cost);
    LimitOutcome& outcome = result.limits[counting[j]];
    outcome.decision = Counted(charged, outcome.nominal, cost);
    over = over || (!outcome.decision.allowed && outcome.mode != Mode::kShadow);
  }
  if (over) {
    counted_over = true;
    admitted = false;
  }
  return over;
}

internal::Task<absl::Status> RateLimitService::Deciding::DecideEnforced(int64_t cost) {
  const absl::StatusOr<Decision> combined =
      co_await StoreCall(enforced, always_denied || counted_over ? 0 : cost, {});
  const absl::StatusOr<bool> allowed = AdmittedBy(combined);
  if (!allowed.ok()) {
    co_return allowed.status();
  }
  for (size_t j = 0; j < enforced.size(); ++j) {
    result.limits[enforced[j]].decision = each[j];
  }
  admitted = admitted && *allowed;
  if (admitted) {
    Keep(enforced, {});
  }
  co_return absl::OkStatus();
}

internal::Task<absl::Status> RateLimitService::Deciding::BorrowFromPools(int64_t cost) {
  // Elastic: when only elastic limits denied, and each can borrow, decide again with their
  // pools in their place.
  std::vector<size_t> kept;
  std::vector<size_t> borrowing;
  std::vector<const Pool*> pools;
  bool can_borrow = true;
  for (size_t i : enforced) {
    const Decision& d = result.limits[i].decision;
    if (d.allowed) {
      kept.push_back(i);
    } else if (planned[i].pool != nullptr && !d.never_allowed()) {
      borrowing.push_back(i);
      if (std::find(pools.begin(), pools.end(), planned[i].pool) == pools.end()) {
        pools.push_back(planned[i].pool);
      }
    } else {
      can_borrow = false;
    }
  }
  if (can_borrow && !borrowing.empty()) {
    const absl::StatusOr<Decision> with_pools = co_await StoreCall(kept, cost, pools);
    // A pool whose key finds no room in a full store lends nothing: the denial stands (an
    // error here would fail the request, and Envoy's default would admit it).
    if (absl::IsResourceExhausted(with_pools.status())) {
      co_return absl::OkStatus();
    }
    const absl::StatusOr<bool> pooled = AdmittedBy(with_pools);
    if (!pooled.ok()) {
      co_return pooled.status();
    }
    if (*pooled) {
      admitted = true;
      for (size_t j = 0; j < kept.size(); ++j) {
        result.limits[kept[j]].decision = each[j];
      }
      for (size_t i : borrowing) {
        result.limits[i].borrowed = true;
      }
      Keep(kept, pools);
      for (size_t j = 0; j < pools.size(); ++j) {
        LimitOutcome& outcome = result.limits.emplace_back();
        const RuleLimit& pool_limit = pools[j]->limit;
        outcome.name = pool_limit.name;
        outcome.named = true;
        outcome.limit = pool_limit.limit;
        outcome.nominal = pool_limit.nominal;
        outcome.unit = pool_limit.unit;
        outcome.pool = true;
        outcome.descriptor = planned[borrowing.front()].descriptor;
        outcome.decision = each[kept.size() + j];
      }
    }
  }
  co_return absl::OkStatus();
}

internal::Task<absl::Status> RateLimitService::Deciding::DecideShadow(int64_t cost) {
  // Shadow limits decide as if enforced, but only with what the enforced ones admitted.
  // They never change the answer: when the store cannot decide them (a new key finds no room
  // in a full store, the store fails after the enforced call), the failure is counted and
  // logged (AdmittedBy) and they are reported as allowing, as the `allow` policy answers.
  const absl::StatusOr<Decision> combined = co_await StoreCall(shadow, admitted ? cost : 0, {});
  const absl::StatusOr<bool> shadow_allowed = AdmittedBy(combined);
  const bool decided = shadow_allowed.ok();
  for (size_t j = 0; j < shadow.size(); ++j) {
    result.limits[shadow[j]].decision = decided ? each[j] : Decision{.allowed = true};
  }
  if (decided && *shadow_allowed && admitted) {
    Keep(shadow, {});
  }
  co_return absl::OkStatus();
}

void RateLimitService::Deciding::CopyRepeats() {
  for (const auto& [repeat, first] : repeats) {
    result.limits[repeat].decision = result.limits[first].decision;
    result.limits[repeat].borrowed = result.limits[first].borrowed;
  }
}

void RateLimitService::Deciding::ApplySoft() {
  for (size_t i = 0; i < result.limits.size(); ++i) {
    LimitOutcome& outcome = result.limits[i];
    const RuleLimit* rule_limit = i < planned.size() ? planned[i].rule_limit : nullptr;
    if (rule_limit != nullptr && rule_limit->soft_extra > 0) {
      Decision& d = outcome.decision;
      outcome.over_soft = admitted && d.allowed && d.remaining < rule_limit->soft_extra;
      d.remaining = std::max<int64_t>(0, d.remaining - rule_limit->soft_extra);
    }
  }
}

void RateLimitService::Deciding::Summarise(bool count) {
  std::vector<Decision> views;
  for (const LimitOutcome& outcome : result.limits) {
    if (outcome.unlimited || outcome.borrowed) {
      continue;
    }
    Decision view = outcome.decision;
    if (outcome.mode == Mode::kShadow) {
      view.allowed = true;
      view.retry_after = Micros{0};
    }
    views.push_back(view);
  }
  if (!views.empty()) {
    result.limited = true;
    result.combined = Combine(views);
  }
  result.combined.allowed = admitted;
  for (size_t i = 0; i < result.limits.size(); ++i) {
    RuleCounters* counters = i < planned.size() ? planned[i].counters : nullptr;
    LimitOutcome& outcome = result.limits[i];
    if (outcome.pool) {
      // A pool counts as a rule of its own.
      for (const Planned& p : planned) {
        if (p.pool != nullptr && p.pool->limit.name == outcome.name) {
          counters = p.pool->limit.counters;
        }
      }
    }
    outcome.counters = counters;
  }
  if (count) {
    CountOutcomes(result);
    RecordOffenders();  // (Not an acquire's tries: each would count its request again.)
  }
}

void RateLimitService::Deciding::RecordOffenders() const {
  TopOffenders& top = service.metrics_.top();
  if (!top.enabled()) [[likely]] {
    return;
  }
  // Each rule limit's own keys (a pool's, shared by every key, and a concurrency limit's are
  // not counted). A shadow limit's would-be denials count: they say who it would limit.
  for (size_t i = 0; i < planned.size(); ++i) {
    const LimitOutcome& outcome = result.limits[i];
    RuleCounters* counters = planned[i].rule_limit->counters;
    if (outcome.unlimited || counters == nullptr) {
      continue;
    }
    top.Record(*counters, planned[i].rule_limit->name, planned[i].key, !outcome.decision.allowed,
               static_cast<uint64_t>(result.cost), now);
  }
}

}  // namespace sluice::server
