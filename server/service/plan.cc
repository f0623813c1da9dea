#include <algorithm>
#include <atomic>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "fmt/format.h"
#include "openssl/sha.h"
#include "spdlog/spdlog.h"

#include "server/service/ip.h"
#include "server/service/service_internal.h"

namespace sluice::server {
namespace {

void AppendEscaped(std::string& key, std::string_view part) {
  for (char c : part) {
    if (c >= kEscape && c <= kValueSeparator) {
      key.push_back(kEscape);
    }
    key.push_back(c);
  }
}

// `text` within kMaxStoredKeyBytes: as it is when it fits, else its first bytes, `mark`, and the
// SHA-256 of the whole in hex, whose collisions no one can make.
std::string Bounded(std::string text, std::string_view mark) {
  if (text.size() <= kMaxStoredKeyBytes) {
    return text;
  }
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest);
  size_t kept = kMaxStoredKeyBytes - 2 * SHA256_DIGEST_LENGTH - mark.size();
  while (kept > 0 && text[kept - 1] == kEscape) {  // Never cut an escape from what it escapes.
    --kept;
  }
  text.resize(kept);
  text.append(mark);
  for (unsigned char byte : digest) {
    fmt::format_to(std::back_inserter(text), "{:02x}", byte);
  }
  return text;
}

// Marks a bounded RuleKey: kEscape before a byte it never escapes, so no key as it is holds it.
constexpr std::string_view kDigestMark = "\x1b#";

}  // namespace

std::string PoolKey(std::string_view domain, std::string_view pool) {
  std::string key(1, kDomainMark);
  AppendEscaped(key, domain);
  key.push_back(kPoolSeparator);
  AppendEscaped(key, pool);
  return key;
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
  return Bounded(std::move(key), kDigestMark);
}

absl::Status RateLimitService::AdmitCallerLimit(const Limit& limit, Timestamp now) {
  if (caller_limits_.Admit(limit, now)) [[likely]] {
    return absl::OkStatus();
  }
  metrics_.CountCallerLimitRefused();
  return absl::ResourceExhaustedError(fmt::format(
      "callers have {} distinct limits in use (each in use until its keys have reset); {} is "
      "refused: use a limit already in use, or a rule",
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
  name = Bounded(std::move(name), "...#");
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

std::vector<Entry> CountedEntries(const Domain& domain, std::vector<Entry> entries) {
  for (Entry& entry : entries) {
    if (std::find(domain.ip_keys.begin(), domain.ip_keys.end(), entry.key) !=
        domain.ip_keys.end()) {
      entry.value = GroupAddress(entry.value, domain.ipv6_prefix);
    }
  }
  return entries;
}

// Envoy's override: a fixed window of its own, never in shadow mode, never replaced. Counting,
// it shares the count of the rule of its descriptor and unit. Its key and descriptor are the
// caller's to fill.
absl::StatusOr<RateLimitService::Planned> RateLimitService::PlanOverride(
    const Domain& domain, const LimitOverride& override, bool counting) {
  auto owned = std::make_unique<RuleLimit>();
  owned->name = fmt::format("{}.override", domain.name);
  owned->nominal = override.requests_per_unit;
  owned->unit = override.unit;
  owned->counter = EnvoyCounter(UnitPeriod(owned->unit));
  if (owned->nominal > 0) {
    absl::StatusOr<Limit> limit = Limit::Create({.algorithm = Algorithm::kFixedWindow,
                                                 .limit = owned->nominal,
                                                 .period = UnitPeriod(owned->unit)});
    if (!limit.ok()) {
      return limit.status();
    }
    if (absl::Status s = counting ? absl::OkStatus() : AdmitCallerLimit(*limit, clock_.Now());
        !s.ok()) {
      return s;
    }
    owned->limit = *limit;
  }
  owned->counters = metrics_.rules().Get(owned->name);
  Planned p;
  p.counters = owned->counters;
  p.rule_limit = owned.get();
  p.owned = std::move(owned);
  p.domain = &domain;
  p.counting = counting;
  p.quota_mode = envoy_.quota_mode;
  return p;
}

namespace {

// share_threshold: every value a wildcard matches is counted as the wildcard itself, as
// envoyproxy/ratelimit keys it, whichever level holds the rule. `entries` so counted, or none
// when no level of the rule's `path` shares.
std::vector<Entry> SharedEntries(const std::vector<Entry>& entries,
                                 const std::vector<const DescriptorNode*>& path) {
  std::vector<Entry> shared;
  for (size_t e = 0; e < path.size(); ++e) {
    if (path[e]->share_threshold) {
      if (shared.empty()) {
        shared = entries;
      }
      shared[e].value = path[e]->pattern;
    }
  }
  return shared;
}

}  // namespace

absl::StatusOr<std::vector<RateLimitService::Planned>> RateLimitService::Plan(
    const Domain& domain, const CheckRequest& request, std::vector<PlannedLease>* leases,
    absl::Status* refused, bool* matched) {
  std::vector<Planned> planned;
  bool any = false;
  for (size_t d = 0; d < request.descriptors.size(); ++d) {
    const RequestDescriptor& descriptor = request.descriptors[d];
    // Rules match the values as sent (a rule may name one exact address); the count is kept
    // per grouped address.
    const std::vector<Entry> entries = CountedEntries(domain, descriptor.entries);
    std::string key = RuleKey(domain.name, entries);
    // The Envoy API's count of every hit (EnvoySettings::count_over_limit): on the limit's
    // counter, in hard and shadow mode; soft and elastic keep sluice's own meaning.
    const bool counting = request.envoy && envoy_.count_over_limit;
    // An override with a unit Envoy's proto does not know falls back to the rules: the
    // descriptor is still limited, and the request answered.
    if (descriptor.limit && descriptor.limit->unit != Unit::kUnknown) {
      any = true;
      absl::StatusOr<Planned> p = PlanOverride(domain, *descriptor.limit, counting);
      if (refused != nullptr && absl::IsResourceExhausted(p.status())) {
        *refused = p.status();
        continue;
      }
      if (!p.ok()) {
        return p.status();
      }
      p->key = std::move(key);
      p->descriptor = d;
      planned.push_back(*std::move(p));
      continue;
    }
    std::vector<const DescriptorNode*> path;  // Asked for only where it can matter.
    const Rule* rule =
        RuleSet::Match(domain, descriptor.entries, domain.share_threshold ? &path : nullptr);
    if (rule == nullptr) {
      continue;
    }
    any = true;
    const std::vector<Entry> shared_entries = SharedEntries(entries, path);
    if (!shared_entries.empty()) {
      key = RuleKey(domain.name, shared_entries);
    }
    const std::vector<Entry>& counted = shared_entries.empty() ? entries : shared_entries;
    if (leases != nullptr && rule->concurrency &&
        std::none_of(leases->begin(), leases->end(),
                     [&](const PlannedLease& l) { return l.key == key; })) {
      leases->push_back({.limit = &*rule->concurrency, .key = key, .descriptor = d});
    }
    for (const RuleLimit& rule_limit : rule->limits) {
      Planned& p = planned.emplace_back();
      p.counters = rule->detailed_metric ? DetailedCounters(domain, *rule, rule_limit, counted)
                                         : rule_limit.counters;
      p.rule_limit = &rule_limit;
      p.rule = rule;
      p.mode = rule->mode;
      p.pool = rule->pool;
      p.domain = &domain;
      p.key = key;
      p.descriptor = d;
      p.counting = counting && rule_limit.counter && !rule_limit.unlimited &&
                   (rule->mode == Mode::kHard || rule->mode == Mode::kShadow);
      p.quota_mode = request.envoy && (rule->quota_mode || envoy_.quota_mode);
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
  if (matched != nullptr) {
    *matched = any;
  }
  return planned;
}

}  // namespace sluice::server
