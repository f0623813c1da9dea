#include "server/service.h"

#include <algorithm>
#include <chrono>
#include <coroutine>
#include <future>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <thread>
#include <utility>
#include <variant>

#include "absl/hash/hash.h"
#include "absl/random/random.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_split.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

#include "server/ip.h"
#include "sluice/duration.h"
#include "src/core/status.h"

namespace sluice::server {
namespace {

// Separators of RuleKey, and the escape byte that precedes any of them inside a part.
constexpr char kEscape = '\x1b';
constexpr char kPoolSeparator = '\x1c';
constexpr char kDomainMark = '\x1d';
constexpr char kEntrySeparator = '\x1e';
constexpr char kValueSeparator = '\x1f';

void AppendEscaped(std::string& key, std::string_view part) {
  for (char c : part) {
    if (c >= kEscape && c <= kValueSeparator) {
      key.push_back(kEscape);
    }
    key.push_back(c);
  }
}

std::string PoolKey(std::string_view domain, std::string_view pool) {
  std::string key(1, kDomainMark);
  AppendEscaped(key, domain);
  key.push_back(kPoolSeparator);
  AppendEscaped(key, pool);
  return key;
}

// The decision a request is denied with when its rule allows nothing (requests_per_unit: 0).
constexpr Decision kAlwaysDenied{.allowed = false, .retry_after = kNeverAllowed};

absl::Status CheckCost(int64_t cost, std::string_view field) {
  if (cost < 0) {
    return absl::InvalidArgumentError(fmt::format("{} must not be negative, not {}", field, cost));
  }
  if (cost > Limit::kMaxCount) {
    return absl::InvalidArgumentError(
        fmt::format("{} must be at most {}, not {}", field, Limit::kMaxCount, cost));
  }
  return absl::OkStatus();
}

void Count(const LimitOutcome& outcome, RuleCounters& counters, bool admitted);

}  // namespace

void CountOutcomes(const CheckResult& result) {
  for (const LimitOutcome& outcome : result.limits) {
    if (outcome.counters != nullptr) {
      Count(outcome, *outcome.counters, result.combined.allowed);
    }
  }
}

namespace {

void Count(const LimitOutcome& outcome, RuleCounters& counters, bool admitted) {
  counters.checks.fetch_add(1, std::memory_order_relaxed);
  if (admitted) {
    counters.admitted.fetch_add(1, std::memory_order_relaxed);
    // Near the limit: less than a fifth of it left (envoyproxy/ratelimit's 0.8 ratio).
    if (!outcome.unlimited && !outcome.pool && outcome.decision.remaining * 5 < outcome.nominal) {
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
}

// Awaits a store call that answers through a DecideDone (DecideAllAsync, LeaseAllAsync):
// `start` makes the call. The store may answer before the call returns (the memory store) or
// later on its own thread (Redis): whichever of the answer and the suspension comes second
// resumes the coroutine, so an answer at once costs no suspension at all.
template <typename Start>
class StoreAnswer {
 public:
  explicit StoreAnswer(Start start) : start_(std::move(start)) {}

  bool await_ready() const noexcept { return false; }
  // Not inlined: clang before 17 may write to the coroutine's frame after an inlined
  // await_suspend has handed the coroutine to another thread (LLVM issues 56301, 65054).
  [[gnu::noinline]] bool await_suspend(std::coroutine_handle<> waiting) {
    waiting_ = waiting;
    start_([this](absl::StatusOr<Decision> result) {
      result_.emplace(std::move(result));
      const std::coroutine_handle<> waiting = waiting_;
      // After this exchange the awaiter may be gone (the coroutine resumed and went on).
      if (state_.exchange(kAnswered, std::memory_order_acq_rel) == kSuspended) {
        waiting.resume();
      }
    });
    return state_.exchange(kSuspended, std::memory_order_acq_rel) != kAnswered;
  }
  absl::StatusOr<Decision> await_resume() { return *std::move(result_); }

 private:
  enum State : int { kStarted, kSuspended, kAnswered };
  Start start_;
  std::coroutine_handle<> waiting_;
  std::optional<absl::StatusOr<Decision>> result_;
  std::atomic<int> state_{kStarted};
};

// co_await StoreDecision(...): Store::DecideAllAsync's answer.
auto StoreDecision(Store& store, std::span<const LimitedKey> keys, int64_t cost, Timestamp now,
                   std::span<Decision> each) {
  return StoreAnswer([&store, keys, cost, now, each](DecideDone done) {
    store.DecideAllAsync(keys, cost, now, each, std::move(done));
  });
}

// co_await StoreLeases(...): Store::LeaseAllAsync's answer.
auto StoreLeases(Store& store, LeaseOp op, std::span<const LeasedKey> keys, std::string_view id,
                 Micros ttl, Timestamp now, std::span<Decision> each) {
  return StoreAnswer([&store, op, keys, id, ttl, now, each](DecideDone done) {
    store.LeaseAllAsync(op, keys, id, ttl, now, each, std::move(done));
  });
}

// A lease's token, as clients hold it: its id, then each key it holds, base64url, each after
// a '.'. Release needs nothing else: not the rules (which may have been reloaded since), not
// this server (another of the fleet may have granted it).
std::string LeaseToken(std::string_view id, std::span<const LeasedKey> keys) {
  std::string token(id);
  for (const LeasedKey& k : keys) {
    token += '.';
    token += absl::WebSafeBase64Escape(absl::string_view(k.key.data(), k.key.size()));
  }
  return token;
}

// A random lease id: 128 bits in hex, which nobody guesses and no two leases share.
std::string NewLeaseId() {
  thread_local absl::BitGen random;
  return fmt::format("{:016x}{:016x}", absl::Uniform<uint64_t>(random),
                     absl::Uniform<uint64_t>(random));
}

}  // namespace

absl::StatusOr<ParsedLease> ParseLeaseToken(std::string_view token) {
  const absl::Status not_a_token =
      absl::InvalidArgumentError("lease is not a lease token from sluiced");
  if (token.size() > kMaxLeaseTokenBytes) {
    return not_a_token;  // Before splitting it: a caller's oversized text costs nothing more.
  }
  const std::vector<absl::string_view> parts =
      absl::StrSplit(absl::string_view(token.data(), token.size()), '.');
  if (parts.size() < 2 || parts.size() > 1 + kMaxDescriptors) {
    return not_a_token;
  }
  ParsedLease lease{.id = std::string(parts[0])};
  for (size_t i = 1; i < parts.size(); ++i) {
    std::string key;
    if (!absl::WebSafeBase64Unescape(parts[i], &key) || key.empty() || key.front() != kDomainMark) {
      return not_a_token;
    }
    lease.keys.push_back(std::move(key));
  }
  return lease;
}

std::string RuleKey(std::string_view domain, const std::vector<Entry>& entries) {
  std::string key(1, kDomainMark);
  AppendEscaped(key, domain);
  for (const Entry& entry : entries) {
    key.push_back(kEntrySeparator);
    AppendEscaped(key, entry.key);
    key.push_back(kValueSeparator);
    AppendEscaped(key, entry.value);
  }
  return key;
}

// One limit that applies to a request, with the key it counts under.
struct RateLimitService::Planned {
  const RuleLimit* rule_limit = nullptr;  // Into the RuleSet, or into `owned`.
  std::unique_ptr<RuleLimit> owned;       // An Envoy limit override.
  Mode mode = Mode::kHard;
  const Pool* pool = nullptr;      // The elastic pool of its rule.
  const Domain* domain = nullptr;  // Owned by the RuleSet the request holds.
  std::string key;
  size_t descriptor = 0;
  RuleCounters* counters = nullptr;  // Where it is counted for /metrics.
};

// A concurrency limit that applies to a request, with the key its leases are held on.
struct RateLimitService::PlannedLease {
  const ConcurrencyLimit* limit = nullptr;  // Into the RuleSet the request holds.
  std::string key;
  size_t descriptor = 0;
};

namespace {
std::atomic<uint64_t> next_service_id{1};
}  // namespace

RateLimitService::RateLimitService(Store& store, Clock& clock, Metrics& metrics, Timers* timers)
    : store_(store),
      clock_(clock),
      metrics_(metrics),
      id_(next_service_id.fetch_add(1)),
      rules_(std::make_shared<const RuleSet>()),
      adhoc_counters_(metrics.rules().Get("adhoc")),
      lines_(timers != nullptr ? std::make_unique<WaitLines>(*timers) : nullptr) {}

std::shared_ptr<const RuleSet> RateLimitService::rules() const {
  struct Copy {
    uint64_t service = 0;
    uint64_t version = 0;
    std::shared_ptr<const RuleSet> rules;
  };
  thread_local Copy copy;
  if (copy.service != id_ || copy.version != rules_version_.load(std::memory_order_acquire)) {
    internal::MutexLock lock(rules_mutex_);
    copy = {
        .service = id_, .version = rules_version_.load(std::memory_order_relaxed), .rules = rules_};
  }
  return copy.rules;
}

void RateLimitService::SetRules(std::shared_ptr<const RuleSet> rules) {
  internal::MutexLock lock(rules_mutex_);
  rules_ = std::move(rules);
  rules_version_.fetch_add(1, std::memory_order_release);
}

absl::Status RateLimitService::Validate(const CheckRequest& request) const {
  if (request.domain.empty()) {
    return absl::InvalidArgumentError("domain must not be empty");
  }
  if (request.descriptors.empty()) {
    return absl::InvalidArgumentError("descriptors must not be empty");
  }
  if (request.descriptors.size() > kMaxDescriptors) {
    return absl::InvalidArgumentError(fmt::format("too many descriptors: {} (at most {})",
                                                  request.descriptors.size(), kMaxDescriptors));
  }
  if (absl::Status s = CheckCost(request.cost, "cost"); !s.ok()) {
    return s;
  }
  for (size_t d = 0; d < request.descriptors.size(); ++d) {
    const RequestDescriptor& descriptor = request.descriptors[d];
    if (descriptor.entries.empty()) {
      return absl::InvalidArgumentError(fmt::format("descriptors[{}] has no entries", d));
    }
    if (descriptor.entries.size() > kMaxEntries) {
      return absl::InvalidArgumentError(
          fmt::format("descriptors[{}] has too many entries: {} "
                      "(at most {})",
                      d, descriptor.entries.size(), kMaxEntries));
    }
    for (size_t e = 0; e < descriptor.entries.size(); ++e) {
      const Entry& entry = descriptor.entries[e];
      if (entry.key.empty() || entry.key.size() > kMaxKeyBytes) {
        return absl::InvalidArgumentError(
            fmt::format("descriptors[{}].entries[{}].key must be 1 to {} bytes, not {}", d, e,
                        kMaxKeyBytes, entry.key.size()));
      }
      if (entry.value.size() > kMaxValueBytes) {
        return absl::InvalidArgumentError(
            fmt::format("descriptors[{}].entries[{}].value must be at most {} bytes, not {}", d, e,
                        kMaxValueBytes, entry.value.size()));
      }
    }
    if (descriptor.cost) {
      if (absl::Status s =
              CheckCost(*descriptor.cost, fmt::format("descriptors[{}].hits_addend", d));
          !s.ok()) {
        return s;
      }
    }
    if (descriptor.limit && descriptor.limit->unit == Unit::kUnknown) {
      return absl::InvalidArgumentError(fmt::format("descriptors[{}].limit.unit is unknown", d));
    }
    if (descriptor.limit && (descriptor.limit->requests_per_unit < 0 ||
                             descriptor.limit->requests_per_unit > Limit::kMaxCount)) {
      return absl::InvalidArgumentError(fmt::format(
          "descriptors[{}].limit.requests_per_unit must be 0 to {}", d, Limit::kMaxCount));
    }
  }
  return absl::OkStatus();
}

bool CallerLimits::Admit(const Limit& limit) {
  const uint64_t hash = absl::Hash<Limit>{}(limit) | 1;  // Never 0, the empty slot.
  for (size_t probe = 0, i = hash & (kSlots - 1); probe < kSlots;
       ++probe, i = (i + 1) & (kSlots - 1)) {
    uint64_t seen = slots_[i].load(std::memory_order_acquire);
    if (seen == hash) {
      return true;
    }
    if (seen != 0) {
      continue;
    }
    if (count_.fetch_add(1, std::memory_order_relaxed) >= kMaxCallerLimits) {
      count_.fetch_sub(1, std::memory_order_relaxed);
      return false;
    }
    if (slots_[i].compare_exchange_strong(seen, hash, std::memory_order_acq_rel)) {
      return true;
    }
    count_.fetch_sub(1, std::memory_order_relaxed);  // Another thread took the slot first.
    if (seen == hash) {
      return true;
    }
  }
  return false;
}

absl::Status RateLimitService::AdmitCallerLimit(const Limit& limit) {
  if (caller_limits_.Admit(limit)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      fmt::format("callers have already used {} distinct limits; {} is refused (use a limit "
                  "already in use, or a rule)",
                  kMaxCallerLimits, limit.ToString()));
}

// envoyproxy/ratelimit's detailed_metric: the rule's limit counted under the request's own
// values, "api.user_alice.path_/search" where the rule's path is "api.user.path_/search" (a
// limit with a name of its own keeps it after a colon). Past CounterRegistry::kMaxDetailed
// such names, the rule's own counters.
RuleCounters* RateLimitService::DetailedCounters(const Domain& domain, const Rule& rule,
                                                 const RuleLimit& rule_limit,
                                                 const std::vector<Entry>& entries) {
  std::string name = domain.name;
  for (const Entry& entry : entries) {
    fmt::format_to(std::back_inserter(name), ".{}_{}", entry.key, entry.value);
  }
  if (rule_limit.name != rule.path) {
    fmt::format_to(std::back_inserter(name), ":{}", rule_limit.name);
  }
  RuleCounters* counters = metrics_.rules().GetDetailed(name);
  if (counters == nullptr) {
    if (!detailed_full_.exchange(true)) {
      spdlog::warn(
          "detailed_metric: {} names in use; '{}' and later ones are counted under their "
          "rule",
          CounterRegistry::kMaxDetailed, name);
    }
    return rule_limit.counters;
  }
  return counters;
}

namespace {

// `entries` as they are counted: IP addresses grouped (IPv6 by the domain's prefix).
std::vector<Entry> CountedEntries(const Domain& domain, std::vector<Entry> entries) {
  for (Entry& entry : entries) {
    if (std::find(domain.ip_keys.begin(), domain.ip_keys.end(), entry.key) !=
        domain.ip_keys.end()) {
      entry.value = GroupAddress(entry.value, domain.ipv6_prefix);
    }
  }
  return entries;
}

}  // namespace

absl::StatusOr<std::vector<RateLimitService::Planned>> RateLimitService::Plan(
    const Domain& domain, const CheckRequest& request, std::vector<PlannedLease>* leases) {
  std::vector<Planned> planned;
  for (size_t d = 0; d < request.descriptors.size(); ++d) {
    const RequestDescriptor& descriptor = request.descriptors[d];
    // Rules match the values as sent (a rule may name one exact address); the count is kept
    // per grouped address.
    const std::vector<Entry> entries = CountedEntries(domain, descriptor.entries);
    std::string key = RuleKey(domain.name, entries);
    if (descriptor.limit) {
      // Envoy's override: a fixed window of its own, never in shadow mode, never replaced.
      auto owned = std::make_unique<RuleLimit>();
      owned->name = fmt::format("{}.override", domain.name);
      owned->nominal = descriptor.limit->requests_per_unit;
      owned->unit = descriptor.limit->unit;
      if (owned->nominal > 0) {
        owned->limit = Limit::Create({.algorithm = Algorithm::kFixedWindow,
                                      .limit = owned->nominal,
                                      .period = UnitPeriod(owned->unit)})
                           .value();  // Validate() bounded both.
        if (absl::Status s = AdmitCallerLimit(*owned->limit); !s.ok()) {
          return s;
        }
      }
      owned->counters = metrics_.rules().Get(owned->name);
      Planned& p = planned.emplace_back();
      p.counters = owned->counters;
      p.rule_limit = owned.get();
      p.owned = std::move(owned);
      p.domain = &domain;
      p.key = std::move(key);
      p.descriptor = d;
      continue;
    }
    const Rule* rule = RuleSet::Match(domain, descriptor.entries);
    if (rule == nullptr) {
      continue;
    }
    if (leases != nullptr && rule->concurrency &&
        std::none_of(leases->begin(), leases->end(),
                     [&](const PlannedLease& l) { return l.key == key; })) {
      leases->push_back({.limit = &*rule->concurrency, .key = key, .descriptor = d});
    }
    for (const RuleLimit& rule_limit : rule->limits) {
      Planned& p = planned.emplace_back();
      p.counters = rule->detailed_metric ? DetailedCounters(domain, *rule, rule_limit, entries)
                                         : rule_limit.counters;
      p.rule_limit = &rule_limit;
      p.mode = rule->mode;
      p.pool = rule->pool;
      p.domain = &domain;
      p.key = key;
      p.descriptor = d;
    }
  }
  // `replaces`, as envoyproxy/ratelimit: a limit named in any matched limit's replaces list is
  // dropped, whichever descriptor it came from.
  std::set<std::string_view> replaced;
  for (const Planned& p : planned) {
    replaced.insert(p.rule_limit->replaces.begin(), p.rule_limit->replaces.end());
  }
  if (!replaced.empty()) {
    std::erase_if(planned, [&](const Planned& p) {
      return !p.owned && replaced.contains(p.rule_limit->name);
    });
  }
  return planned;
}

RateLimitService::CheckTask RateLimitService::Decide(std::vector<Planned>& planned, int64_t cost,
                                                     Timestamp now, bool denied_elsewhere,
                                                     bool count) {
  CheckResult result;
  result.limits.reserve(planned.size() + 1);
  std::vector<size_t> enforced;
  std::vector<size_t> shadow;
  // A limit on a key that an earlier entry already has (a descriptor given twice) is decided
  // once, and reported as that earlier entry.
  std::vector<std::pair<size_t, size_t>> repeats;
  bool always_denied = false;
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
    } else if (earlier != planned.begin() + static_cast<ptrdiff_t>(i) && rule_limit.limit) {
      repeats.emplace_back(i, static_cast<size_t>(earlier - planned.begin()));
    } else if (!rule_limit.limit) {
      outcome.decision = kAlwaysDenied;
      always_denied = always_denied || p.mode != Mode::kShadow;
    } else {
      (p.mode == Mode::kShadow ? shadow : enforced).push_back(i);
    }
  }

  std::vector<LimitedKey> keys;
  std::vector<std::string> pool_keys;
  std::vector<Decision> each;
  // The store call for `group` (indices into `planned`) and the elastic `pools` charged with it.
  auto store_call = [&](const std::vector<size_t>& group, int64_t group_cost,
                        const std::vector<const Pool*>& pools) {
    keys.clear();
    for (size_t i : group) {
      keys.push_back({.limit = &*planned[i].rule_limit->limit, .key = planned[i].key});
    }
    pool_keys.clear();
    pool_keys.reserve(pools.size());
    for (const Pool* pool : pools) {
      pool_keys.push_back(PoolKey(planned.front().domain->name, pool->name));
      keys.push_back({.limit = &*pool->limit.limit, .key = pool_keys.back()});
    }
    each.assign(keys.size(), Decision{});
    return StoreDecision(store_, keys, group_cost, now, each);
  };
  // Whether the store call admitted the request, counting the store's failures.
  auto admitted_by = [&](const absl::StatusOr<Decision>& combined) -> absl::StatusOr<bool> {
    if (!combined.ok()) {
      CountStoreFailure(combined.status());
      return combined.status();
    }
    return combined->allowed;
  };

  bool admitted = !always_denied && !denied_elsewhere;
  if (!enforced.empty()) {
    const absl::StatusOr<Decision> combined =
        co_await store_call(enforced, always_denied ? 0 : cost, {});
    const absl::StatusOr<bool> allowed = admitted_by(combined);
    if (!allowed.ok()) {
      co_return allowed.status();
    }
    for (size_t j = 0; j < enforced.size(); ++j) {
      result.limits[enforced[j]].decision = each[j];
    }
    admitted = admitted && *allowed;
    if (!admitted && !always_denied && !denied_elsewhere) {
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
        const absl::StatusOr<Decision> with_pools = co_await store_call(kept, cost, pools);
        const absl::StatusOr<bool> pooled = admitted_by(with_pools);
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
    }
  }
  if (!shadow.empty()) {
    // Shadow limits decide as if enforced, but only with what the enforced ones admitted.
    const absl::StatusOr<Decision> combined = co_await store_call(shadow, admitted ? cost : 0, {});
    const absl::StatusOr<bool> allowed = admitted_by(combined);
    if (!allowed.ok()) {
      co_return allowed.status();
    }
    for (size_t j = 0; j < shadow.size(); ++j) {
      result.limits[shadow[j]].decision = each[j];
    }
  }

  for (const auto& [repeat, first] : repeats) {
    result.limits[repeat].decision = result.limits[first].decision;
    result.limits[repeat].borrowed = result.limits[first].borrowed;
  }

  std::vector<Decision> views;
  for (size_t i = 0; i < result.limits.size(); ++i) {
    LimitOutcome& outcome = result.limits[i];
    const RuleLimit* rule_limit = i < planned.size() ? planned[i].rule_limit : nullptr;
    if (rule_limit != nullptr && rule_limit->soft_extra > 0) {
      Decision& d = outcome.decision;
      outcome.over_soft = admitted && d.allowed && d.remaining < rule_limit->soft_extra;
      d.remaining = std::max<int64_t>(0, d.remaining - rule_limit->soft_extra);
    }
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
  }
  co_return std::move(result);
}

RateLimitService::CheckTask RateLimitService::DecideCheck(CheckRequest request, bool count) {
  if (absl::Status s = Validate(request); !s.ok()) {
    co_return s;
  }
  const std::shared_ptr<const RuleSet> rules = this->rules();
  const Domain* domain = rules->FindDomain(request.domain);
  if (domain == nullptr) {
    co_return CheckResult{};  // An unknown domain limits nothing, as envoyproxy/ratelimit.
  }
  const Timestamp now = clock_.Now();
  std::vector<PlannedLease> leases;
  absl::StatusOr<std::vector<Planned>> plan =
      Plan(*domain, request, request.leases ? &leases : nullptr);
  if (!plan.ok()) {
    co_return plan.status();
  }
  std::vector<Planned>& planned = *plan;
  if (!leases.empty()) {
    co_return co_await DecideLeased(planned, leases, request.cost, now, count);
  }
  if (planned.empty()) {
    co_return CheckResult{};
  }
  co_return co_await Decide(planned, request.cost, now, /*denied_elsewhere=*/false, count);
}

RateLimitService::CheckTask RateLimitService::DecideLeased(std::vector<Planned>& planned,
                                                           std::vector<PlannedLease>& leases,
                                                           int64_t cost, Timestamp now,
                                                           bool count) {
  std::vector<LeasedKey> keys;
  // One lease over every key, living as long as the shortest lease_ttl of their rules: each
  // rule's promise (a crashed holder's slot comes back within lease_ttl) holds.
  Micros ttl = kMaxLeaseTtl;
  for (const PlannedLease& lease : leases) {
    keys.push_back({.key = lease.key, .capacity = lease.limit->capacity});
    ttl = std::min(ttl, lease.limit->lease_ttl);
  }
  const LeaseOp op = cost > 0 ? LeaseOp::kTake : LeaseOp::kQuery;
  const std::string id = op == LeaseOp::kTake ? NewLeaseId() : std::string();
  std::vector<Decision> each(keys.size());
  const absl::StatusOr<Decision> taken = co_await StoreLeases(store_, op, keys, id, ttl, now, each);
  if (!taken.ok()) {
    CountStoreFailure(taken.status());
    co_return taken.status();
  }
  const bool leased = op == LeaseOp::kTake && taken->allowed;
  // The rate limits are charged only when the leases were taken; else they are asked (cost 0)
  // for their figures, and counted as denied elsewhere.
  absl::StatusOr<CheckResult> result = CheckResult{};
  if (!planned.empty()) {
    result = co_await Decide(planned, taken->allowed ? cost : 0, now, !taken->allowed,
                             /*count=*/false);
  }
  const bool admitted = taken->allowed && result.ok() && result->combined.allowed;
  if (leased && !admitted) {
    // Denied (or failed) after all: the leases go back, and are reported as they now stand.
    std::vector<Decision> released(keys.size());
    absl::StatusOr<Decision> back =
        co_await StoreLeases(store_, LeaseOp::kRelease, keys, id, ttl, now, released);
    if (back.ok()) {
      back = co_await StoreLeases(store_, LeaseOp::kQuery, keys, "", ttl, now, each);
    }
    if (!back.ok()) {
      // Held until it expires: lease_ttl at most.
      CountStoreFailure(back.status());
      spdlog::warn("a lease the rate limits denied could not be given back: {}",
                   internal::Message(back.status()));
    }
    if (lines_ != nullptr && back.ok()) {
      lines_->Notify(keys);
    }
  }
  if (!result.ok()) {
    co_return result.status();
  }
  std::vector<Decision> views;
  if (result->limited) {
    views.push_back(result->combined);
  }
  for (size_t i = 0; i < leases.size(); ++i) {
    const ConcurrencyLimit& limit = *leases[i].limit;
    LimitOutcome& outcome = result->limits.emplace_back();
    outcome.name = limit.name;
    outcome.named = true;
    outcome.nominal = limit.capacity;
    outcome.concurrency = limit.capacity;
    outcome.lease_ttl = ttl;
    outcome.descriptor = leases[i].descriptor;
    outcome.decision = each[i];
    outcome.counters = limit.counters;
    result->lease_keys.push_back(leases[i].key);
    views.push_back(outcome.decision);
  }
  result->limited = true;
  result->combined = Combine(views);
  result->combined.allowed = admitted;
  if (admitted && leased) {
    result->lease = LeaseToken(id, keys);
    result->lease_ttl = ttl;
  }
  if (count) {
    CountOutcomes(*result);
  }
  co_return std::move(result);
}

internal::Task<absl::StatusOr<bool>> RateLimitService::DecideRelease(std::string lease) {
  absl::StatusOr<ParsedLease> parsed = ParseLeaseToken(lease);
  if (!parsed.ok()) {
    co_return parsed.status();
  }
  std::vector<LeasedKey> keys;
  for (const std::string& key : parsed->keys) {
    keys.push_back({.key = key});
  }
  std::vector<Decision> each(keys.size());
  const absl::StatusOr<Decision> released = co_await StoreLeases(
      store_, LeaseOp::kRelease, keys, parsed->id, Micros{0}, clock_.Now(), each);
  if (!released.ok()) {
    CountStoreFailure(released.status());
    co_return released.status();
  }
  // Only the keys whose slot came back: a release of nothing (expired, forged) wakes nobody.
  std::vector<LeasedKey> freed;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (each[i].allowed) {
      freed.push_back(keys[i]);
    }
  }
  if (lines_ != nullptr && !freed.empty()) {
    lines_->Notify(freed);
  }
  co_return released->allowed;
}

RateLimitService::DescriptorsTask RateLimitService::DecideDescriptors(CheckRequest request) {
  if (absl::Status s = Validate(request); !s.ok()) {
    co_return s;
  }
  const std::shared_ptr<const RuleSet> rules = this->rules();
  if (rules->domains().empty()) {
    co_return absl::UnavailableError("no rules are loaded");
  }
  std::vector<DescriptorResult> results(request.descriptors.size());
  const Domain* domain = rules->FindDomain(request.domain);
  if (domain == nullptr) {
    co_return std::move(results);
  }
  const Timestamp now = clock_.Now();
  absl::StatusOr<std::vector<Planned>> plan = Plan(*domain, request);
  if (!plan.ok()) {
    co_return plan.status();
  }
  std::vector<Planned>& planned = *plan;
  // Each descriptor on its own, with its own cost.
  for (size_t d = 0; d < request.descriptors.size(); ++d) {
    std::vector<Planned> group;
    for (Planned& p : planned) {
      if (p.descriptor == d) {
        group.push_back(std::move(p));
      }
    }
    if (group.empty()) {
      continue;
    }
    const int64_t cost = request.descriptors[d].cost.value_or(request.cost);
    absl::StatusOr<CheckResult> result = co_await Decide(group, cost, now);
    if (!result.ok()) {
      co_return result.status();
    }
    DescriptorResult& out = results[d];
    out.matched = true;
    out.over_limit = !result->combined.allowed;
    out.unlimited = !result->limited;
    for (LimitOutcome& outcome : result->limits) {
      if (outcome.unlimited || outcome.pool || outcome.borrowed) {
        continue;
      }
      const bool denies = !outcome.decision.allowed && outcome.mode != Mode::kShadow;
      if (!out.closest || denies ||
          (out.closest->decision.allowed &&
           outcome.decision.remaining < out.closest->decision.remaining)) {
        out.closest = std::move(outcome);
      }
    }
    constexpr int64_t kUint32Max = std::numeric_limits<uint32_t>::max();
    if (out.unlimited) {
      out.limit_remaining = kUint32Max;
    }
    if (out.closest) {
      const LimitOutcome& closest = *out.closest;
      out.limit_remaining =
          out.over_limit ? 0
                         : static_cast<uint32_t>(std::min(closest.decision.remaining, kUint32Max));
      out.unit = closest.unit;
      if (closest.limit) {
        const Limit& limit = *closest.limit;
        if (out.unit == Unit::kUnknown) {
          out.unit = UnitOfPeriod(limit.period());
        }
        out.until_reset = limit.algorithm() == Algorithm::kFixedWindow
                              ? limit.period() - now.time_since_epoch() % limit.period()
                              : closest.decision.reset_after;
      }
    }
  }
  co_return std::move(results);
}

RateLimitService::CheckTask RateLimitService::DecideAdHoc(AdHocRequest request, bool count) {
  if (request.key.empty() || request.key.size() > kMaxAdHocKeyBytes) {
    co_return absl::InvalidArgumentError(
        fmt::format("key must be 1 to {} bytes, not {}", kMaxAdHocKeyBytes, request.key.size()));
  }
  for (char c : request.key) {
    if (static_cast<unsigned char>(c) < 0x20) {
      co_return absl::InvalidArgumentError("key must not contain control characters");
    }
  }
  if (absl::Status s = CheckCost(request.cost, "cost"); !s.ok()) {
    co_return s;
  }
  absl::StatusOr<Limit> limit = Limit::Create(request.spec);
  if (!limit.ok()) {
    co_return limit.status();
  }
  if (absl::Status s = AdmitCallerLimit(*limit); !s.ok()) {
    co_return s;
  }
  const LimitedKey limited{.limit = &*limit, .key = request.key};
  Decision each;
  absl::StatusOr<Decision> decision =
      co_await StoreDecision(store_, {&limited, 1}, request.cost, clock_.Now(), {&each, 1});
  if (!decision.ok()) {
    CountStoreFailure(decision.status());
    co_return decision.status();
  }
  CheckResult result;
  result.limited = true;
  result.combined = *decision;
  LimitOutcome& outcome = result.limits.emplace_back();
  outcome.name = "adhoc";
  outcome.limit = *limit;
  outcome.nominal = limit->limit();
  outcome.decision = *decision;
  outcome.counters = adhoc_counters_;
  if (count) {
    CountOutcomes(result);
  }
  co_return std::move(result);
}

void RateLimitService::CountStoreFailure(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument) {  // Not the request's own fault.
    metrics_.CountStoreError();
  }
}

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

namespace {

// The line an acquire waits in: waiters that would ask the store about the same keys (the
// descriptors' keys as Plan builds them, addresses grouped, in any order).
std::string LineKey(const RuleSet& rules, const AcquireRequest& request) {
  if (const auto* adhoc = std::get_if<AdHocRequest>(&request.check)) {
    return adhoc->key;  // Ad hoc keys have no control bytes; rule keys start with one.
  }
  const auto& check = std::get<CheckRequest>(request.check);
  const Domain* domain = rules.FindDomain(check.domain);
  std::vector<std::string> keys;
  for (const RequestDescriptor& descriptor : check.descriptors) {
    keys.push_back(RuleKey(check.domain, domain != nullptr
                                             ? CountedEntries(*domain, descriptor.entries)
                                             : descriptor.entries));
  }
  std::sort(keys.begin(), keys.end());
  std::string key;
  for (const std::string& part : keys) {
    key += part;
  }
  return key;
}

}  // namespace

RateLimitService::CheckTask RateLimitService::Attempt(const AcquireRequest& request, int64_t cost) {
  if (const auto* adhoc = std::get_if<AdHocRequest>(&request.check)) {
    AdHocRequest attempt = *adhoc;
    attempt.cost = cost;
    co_return co_await DecideAdHoc(std::move(attempt), /*count=*/false);
  }
  CheckRequest attempt = std::get<CheckRequest>(request.check);
  attempt.cost = cost;
  co_return co_await DecideCheck(std::move(attempt), /*count=*/false);
}

internal::Task<absl::StatusOr<AcquireResult>> RateLimitService::DecideAcquire(
    AcquireRequest request, std::shared_ptr<Waiter> waiter) {
  if (request.max_wait < Micros{0} || request.max_wait > kMaxAcquireWait) {
    co_return absl::InvalidArgumentError(
        fmt::format("max_wait must be 0 to {}", FormatDuration(kMaxAcquireWait)));
  }
  const int64_t cost = std::visit([](const auto& check) { return check.cost; }, request.check);
  const Timestamp start = clock_.Now();
  const Timestamp deadline = start + request.max_wait;
  // Out of the line however this ends, an exception included: a waiter left at the head
  // would hold its line for good.
  struct LeaveLine {
    WaitLines& lines;
    const std::shared_ptr<Waiter>& waiter;
    ~LeaveLine() { lines.Leave(waiter); }
  } leave{*lines_, waiter};
  co_await lines_->Join(waiter, deadline);
  absl::StatusOr<CheckResult> result;
  bool shaped = true;                   // Some limit is a leaky_bucket; known after the first try.
  std::vector<std::string> lease_keys;  // Its concurrency limits' keys; known after a try.
  while (true) {
    if (absl::Status why = lines_->Cancelled(*waiter); !why.ok()) {
      result = std::move(why);
      break;
    }
    if (!lines_->Head(*waiter)) {
      // max_wait ended with others still ahead of it. How long they will take is not known
      // here: it is told to come back after as long as it waited (at least 1 ms).
      result = co_await Attempt(request, 0);
      if (result.ok()) {
        result->combined.allowed = false;
        result->combined.retry_after = std::max(request.max_wait, Micros{1000});
        result->combined.delay = Micros{0};
      }
      break;
    }
    const Timestamp now = clock_.Now();
    if (shaped) {
      // A leaky_bucket's admission is a reservation that cannot be taken back: ask first
      // (cost 0 records nothing) how long its queue would delay this request, and wait that
      // out before asking to be admitted, so that a waiter who gives up holds nothing.
      absl::StatusOr<CheckResult> probe = co_await Attempt(request, 0);
      if (!probe.ok()) {
        result = std::move(probe);
        break;
      }
      shaped = std::any_of(probe->limits.begin(), probe->limits.end(), [](const auto& outcome) {
        return outcome.limit && outcome.limit->algorithm() == Algorithm::kLeakyBucket;
      });
      if (const Micros delay = probe->combined.delay; delay > Micros{0}) {
        if (now + delay > deadline) {
          result = std::move(probe);
          result->combined.allowed = false;
          result->combined.retry_after = delay - (deadline - now);
          result->combined.delay = Micros{0};
          break;
        }
        co_await lines_->Sleep(waiter, clock_.Now() + delay);
        continue;
      }
    }
    lines_->Watch(waiter, lease_keys);
    result = co_await Attempt(request, cost);
    if (!result.ok()) {
      break;
    }
    // Waits count from the answer, not from before the store calls: never a wake-up early.
    const Timestamp decided = clock_.Now();
    const Decision& decision = result->combined;
    if (decision.allowed) {
      // Another server's waiter may have been admitted between the probe and this: this one
      // then has a delay after all, and waits it out before the caller goes ahead.
      if (decision.delay > Micros{0}) {
        co_await lines_->Sleep(waiter, decided + decision.delay);
        result->combined.delay = Micros{0};  // Waited out: the caller may go ahead now.
      }
      if (absl::Status why = lines_->Cancelled(*waiter); !why.ok()) {
        // Gone (or the server stops) meanwhile: charged, and not to be told "go ahead" early;
        // a lease it took goes back rather than hold its slot for lease_ttl.
        CountOutcomes(*result);
        if (!result->lease.empty()) {
          (void)co_await DecideRelease(std::move(result->lease));
        }
        result = std::move(why);
      }
      break;
    }
    // A concurrency slot may come back before the lease that retry_after counts on expires:
    // a holder may give it back at any time. Only the rate limits' waits are known.
    Micros rate_wait{0};
    bool slot_wait = false;
    for (const LimitOutcome& outcome : result->limits) {
      if (outcome.decision.allowed || outcome.mode == Mode::kShadow || outcome.borrowed) {
        continue;
      }
      if (outcome.concurrency > 0) {
        slot_wait = true;
      } else if (outcome.decision.never_allowed() || rate_wait == kNeverAllowed) {
        rate_wait = kNeverAllowed;
      } else {
        rate_wait = std::max(rate_wait, outcome.decision.retry_after);
      }
    }
    if (!slot_wait) {
      rate_wait = decision.retry_after;  // As the request was answered (always-denied rules...).
    }
    if (rate_wait == kNeverAllowed || decided + rate_wait > deadline ||
        (slot_wait && decided >= deadline)) {
      break;
    }
    if (!slot_wait) {
      co_await lines_->Sleep(waiter, decided + rate_wait);
      continue;
    }
    // At least 1 ms: a store that answered "full" with no wait must not make this a spin.
    const Micros poll = std::clamp(decision.retry_after, Micros{1000}, kLeasePoll);
    const Timestamp wake = std::min(decided + std::max(rate_wait, poll), deadline);
    lease_keys = result->lease_keys;
    co_await lines_->SleepOnLeases(waiter, wake, lease_keys);
  }
  if (!result.ok()) {
    co_return result.status();
  }
  CountOutcomes(*result);  // Once, as it is answered: not each try.
  co_return AcquireResult{.check = *std::move(result), .waited = clock_.Now() - start};
}

RateLimitService::CancelWait RateLimitService::AcquireAsync(
    AcquireRequest request, Done<absl::StatusOr<AcquireResult>> done) {
  if (lines_ == nullptr) {
    std::move(done)(absl::FailedPreconditionError("acquire needs timers (none given)"));
    return [] {};
  }
  auto waiter = std::make_shared<Waiter>(LineKey(*rules(), request));
  Run(DecideAcquire(std::move(request), waiter), std::move(done));
  return [lines = lines_.get(), weak = std::weak_ptr<Waiter>(waiter)] {
    if (const std::shared_ptr<Waiter> waiting = weak.lock()) {
      lines->Cancel(waiting, absl::CancelledError("the client went away"));
    }
  };
}

void RateLimitService::StopWaiting() {
  if (lines_ != nullptr) {
    lines_->CancelAll(absl::UnavailableError("the server is stopping"));
  }
}

void RateLimitService::ReleaseAsync(std::string lease, Done<absl::StatusOr<bool>> done) {
  Run(DecideRelease(std::move(lease)), std::move(done));
}

absl::StatusOr<bool> RateLimitService::Release(std::string lease) {
  return internal::Wait(DecideRelease(std::move(lease)));
}

size_t RateLimitService::waiting() const { return lines_ == nullptr ? 0 : lines_->waiting(); }

void RateLimitService::CheckAsync(CheckRequest request, Done<absl::StatusOr<CheckResult>> done) {
  Run(DecideCheck(std::move(request)), std::move(done));
}

void RateLimitService::ShouldRateLimitAsync(
    CheckRequest request, Done<absl::StatusOr<std::vector<DescriptorResult>>> done) {
  Run(DecideDescriptors(std::move(request)), std::move(done));
}

void RateLimitService::CheckAdHocAsync(AdHocRequest request,
                                       Done<absl::StatusOr<CheckResult>> done) {
  Run(DecideAdHoc(std::move(request)), std::move(done));
}

absl::StatusOr<CheckResult> RateLimitService::Check(CheckRequest request) {
  return internal::Wait(DecideCheck(std::move(request)));
}

absl::StatusOr<std::vector<DescriptorResult>> RateLimitService::ShouldRateLimit(
    CheckRequest request) {
  return internal::Wait(DecideDescriptors(std::move(request)));
}

absl::StatusOr<CheckResult> RateLimitService::CheckAdHoc(AdHocRequest request) {
  return internal::Wait(DecideAdHoc(std::move(request)));
}

absl::StatusOr<AcquireResult> RateLimitService::Acquire(AcquireRequest request) {
  // Shared: `done` may still be inside set_value when this thread wakes and returns.
  auto answer = std::make_shared<std::promise<absl::StatusOr<AcquireResult>>>();
  std::future<absl::StatusOr<AcquireResult>> future = answer->get_future();
  AcquireAsync(std::move(request), [answer](absl::StatusOr<AcquireResult> result) {
    answer->set_value(std::move(result));
  });
  return future.get();
}

void RateLimitService::WaitIdle() const {
  while (in_flight_.load(std::memory_order_acquire) > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace sluice::server
