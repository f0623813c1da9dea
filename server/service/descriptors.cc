#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "server/service/service.h"
#include "server/service/service_internal.h"
#include "src/core/calendar.h"
#include "src/core/integers.h"

// The Envoy API's decisions (RateLimitService::ShouldRateLimit): each descriptor of a request
// on its own, as envoyproxy/ratelimit decides them, and answered with Envoy's figures.

namespace sluice::server {
namespace {

// Whether every limit planned for a descriptor is in shadow mode.
template <typename Group>
bool AllShadow(const Group& group) {
  return std::all_of(group.begin(), group.end(),
                     [](const auto& p) { return p.mode == Mode::kShadow; });
}

// Envoy's view of `out.closest` (DescriptorResult says what each figure is).
void Describe(Timestamp now, DescriptorResult& out) {
  constexpr int64_t kUint32Max = std::numeric_limits<uint32_t>::max();
  if (out.unlimited) {
    out.limit_remaining = kUint32Max;
  }
  if (!out.closest) {
    return;
  }
  const LimitOutcome& closest = *out.closest;
  out.limit_remaining =
      out.over_limit ? 0 : static_cast<uint32_t>(std::min(closest.decision.remaining, kUint32Max));
  out.unit = closest.unit;
  // A limit of requests_per_unit 0 has no Limit, but its unit's window still ends.
  const Micros period = closest.limit                ? closest.limit->period()
                        : out.unit != Unit::kUnknown ? UnitPeriod(out.unit)
                                                     : Micros{0};
  if (period > Micros{0}) {
    if (out.unit == Unit::kUnknown) {
      out.unit = UnitOfPeriod(period);
    }
    // A fixed window's end, in whole seconds as envoyproxy/ratelimit counts it (their clock
    // reads seconds: the rounding up never tells a client to come back too early).
    const bool fixed = !closest.limit || closest.limit->algorithm() == Algorithm::kFixedWindow;
    const bool calendar = closest.limit && closest.limit->calendar();
    out.until_reset =
        calendar ? std::chrono::ceil<std::chrono::seconds>(
                       Micros{internal::CalendarWindowOf(*closest.limit, internal::Us(now)).end} -
                       now.time_since_epoch())
        : fixed ? std::chrono::ceil<std::chrono::seconds>(period - now.time_since_epoch() % period)
                : closest.decision.reset_after;
  }
}

// A descriptor's answer from the decision of its limits, `group`.
template <typename Group>
void Answer(const Group& group, CheckResult result, Timestamp now, DescriptorResult& out) {
  out.matched = true;
  out.over_limit = !result.combined.allowed;
  out.unlimited = !result.limited;
  out.quota_mode = !out.unlimited && std::any_of(group.begin(), group.end(),
                                                 [](const auto& p) { return p.quota_mode; });
  if (group.front().rule != nullptr) {
    out.metadata_json = group.front().rule->metadata_json;
  }
  for (LimitOutcome& outcome : result.limits) {
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
  Describe(now, out);
}

}  // namespace

std::vector<std::vector<RateLimitService::Planned>> RateLimitService::ByDescriptor(
    const CheckRequest& request, std::vector<Planned> planned) {
  std::vector<std::vector<Planned>> groups(request.descriptors.size());
  for (Planned& p : planned) {
    groups[p.descriptor].push_back(std::move(p));
  }
  return groups;
}

std::vector<DescriptorResult> RateLimitService::NoResults(const CheckRequest& request,
                                                          const Domain* domain) {
  std::vector<DescriptorResult> results(request.descriptors.size());
  for (size_t d = 0; d < results.size(); ++d) {
    results[d].quota_mode = envoy_.quota_mode;  // Theirs counts unmatched descriptors in it too.
    if (request.explain && domain == nullptr) {
      results[d].explanation = ExplainUnmatched(nullptr, request, {d});
    }
  }
  return results;
}

RateLimitService::DescriptorsTask RateLimitService::DecideDescriptors(CheckRequest request) {
  // Refused before any decision: their service_error.
  absl::Status refused = Validate(request);
  const std::shared_ptr<const RuleSet> rules = this->rules();
  if (refused.ok() && rules->domains().empty()) {
    refused = absl::UnavailableError("no rules are loaded");
  }
  if (!refused.ok()) {
    metrics_.CountServiceError();
    co_return refused;
  }
  const Domain* domain = rules->FindDomain(request.domain);
  std::vector<DescriptorResult> results = NoResults(request, domain);
  if (domain == nullptr) {
    CountUnknownDomain(metrics_, request.domain);
    metrics_.CountDomainNotFound(request.domain, request.descriptors.size());
    co_return std::move(results);
  }
  const Timestamp now = clock_.Now();
  // A descriptor whose new key found no room in a full store, or whose override found no room
  // among the caller limits, fails alone: failing the request would let Envoy's default
  // (failure_mode_deny: false) admit another descriptor over its limit.
  absl::Status no_room;
  absl::StatusOr<std::vector<Planned>> plan = Plan(*domain, request, nullptr, &no_room);
  if (!plan.ok()) {
    co_return plan.status();
  }
  // Each descriptor on its own, with its own cost.
  std::vector<std::vector<Planned>> groups = ByDescriptor(request, *std::move(plan));
  std::vector<int64_t> costs(request.descriptors.size());
  for (size_t d = 0; d < costs.size(); ++d) {
    costs[d] = request.descriptors[d].cost.value_or(request.cost);
  }
  if (envoy_.stop_others_over_limit && !request.explain) {
    absl::Status s = co_await StopOthersOverLimit(groups, costs, now);
    if (!s.ok()) {
      co_return s;
    }
  }
  for (size_t d = 0; d < request.descriptors.size(); ++d) {
    std::vector<Planned>& group = groups[d];
    if (group.empty()) {
      if (request.explain) {
        results[d].explanation = ExplainUnmatched(domain, request, {d});
      }
      continue;
    }
    const int64_t cost = costs[d];
    // Two statements, not a conditional over two co_awaits (GCC 12: see DecideAdHoc). (An
    // empty result to start with: an error with a message would allocate per descriptor.)
    absl::StatusOr<CheckResult> result = CheckResult{};
    if (request.explain) {
      std::vector<PlannedLease> none;
      std::vector<size_t> at(1, d);  // (Named: GCC 12 cannot co_await over a braced list.)
      result = co_await DecideExplained(*domain, request, std::move(at), group, none, cost, now);
      results[d].explanation = result.ok() ? result->explanation : nullptr;
    } else {
      result = co_await Decide(group, cost, now);
    }
    if (absl::IsResourceExhausted(result.status())) {
      // A shadow descriptor never changes the answer, not even by an error that
      // failure_mode_deny turns into a denial: it is answered as under its limit.
      results[d].matched = AllShadow(group);
      no_room = results[d].matched ? no_room : result.status();
      continue;
    }
    if (!result.ok()) {
      co_return result.status();
    }
    Answer(group, *std::move(result), now, results[d]);
  }
  if (!no_room.ok() && std::none_of(results.begin(), results.end(),
                                    [](const DescriptorResult& r) { return r.over_limit; })) {
    co_return no_room;
  }
  co_return std::move(results);
}

RateLimitService::StatusTask RateLimitService::StopOthersOverLimit(
    std::vector<std::vector<Planned>>& groups, std::vector<int64_t>& costs, Timestamp now) {
  // As their Redis cache does it: first a look at every descriptor's count (a decision at cost
  // 0 charges nothing), then, if any would pass its limit with its hits, only those are charged.
  std::vector<bool> over(groups.size(), false);
  bool any = false;
  for (size_t d = 0; d < groups.size(); ++d) {
    if (groups[d].empty()) {
      continue;
    }
    absl::StatusOr<CheckResult> look = co_await Decide(groups[d], 0, now, false, /*count=*/false);
    if (absl::IsResourceExhausted(look.status())) {
      continue;  // No room for its key: decided (and refused) as it comes.
    }
    if (!look.ok()) {
      co_return look.status();
    }
    for (const LimitOutcome& outcome : look->limits) {
      if (!outcome.unlimited && outcome.concurrency == 0 &&
          (!outcome.decision.allowed || costs[d] > outcome.decision.remaining)) {
        over[d] = true;
      }
    }
    any = any || over[d];
  }
  for (size_t d = 0; d < groups.size() && any; ++d) {
    costs[d] = over[d] ? costs[d] : 0;
  }
  co_return absl::OkStatus();
}

bool RateLimitService::OverallOverLimit(const std::vector<DescriptorResult>& results) const {
  bool over = false;
  size_t quota = 0;
  size_t quota_over = 0;
  for (const DescriptorResult& result : results) {
    if (result.unlimited) {
      continue;
    }
    if (result.quota_mode) {
      ++quota;
      quota_over += result.over_limit ? 1 : 0;
    } else {
      over = over || result.over_limit;
    }
  }
  const bool over_limit = over || (quota > 0 && quota == quota_over);
  if (over_limit && envoy_.shadow_mode) {
    metrics_.CountGlobalShadowMode();
  }
  return over_limit && !envoy_.shadow_mode;
}
}  // namespace sluice::server
