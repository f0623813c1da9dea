#include "server/service/service.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

#include "server/service/blocks.h"
#include "server/service/service_internal.h"
#include "server/service/store_answer.h"
#include "sluice/duration.h"
#include "src/core/calendar.h"
#include "src/core/integers.h"
#include "src/core/status.h"

namespace sluice::server {
namespace {

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

}  // namespace

namespace {
std::atomic<uint64_t> next_service_id{1};
}  // namespace

RateLimitService::RateLimitService(Store& store, Clock& clock, Metrics& metrics, Timers* timers,
                                   EnvoySettings envoy)
    : store_(store),
      clock_(clock),
      metrics_(metrics),
      envoy_(envoy),
      id_(next_service_id.fetch_add(1)),
      rules_(std::make_shared<const RuleSet>()),
      adhoc_counters_(metrics.rules().Get("adhoc")),
      caller_limits_(
          [&store](const Limit& limit, Timestamp now) { return store.HoldsState(limit, now); }),
      lines_(timers != nullptr ? std::make_unique<WaitLines>(*timers) : nullptr),
      signer_(ReceiptSigner::Random()) {}

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

namespace {

// A request to a domain no rule knows is admitted, as envoyproxy/ratelimit admits it, but not
// in silence: counted (one series, no label: the domain is the caller's choice, and a series
// per value would let any caller grow /metrics without bound) and said at debug level, the
// domain cut short and its control bytes replaced, for it is the caller's text.
// The indexes of every descriptor of `request`: a check explains them all.
std::vector<size_t> AllDescriptors(const CheckRequest& request) {
  std::vector<size_t> all(request.descriptors.size());
  for (size_t d = 0; d < all.size(); ++d) {
    all[d] = d;
  }
  return all;
}

void CountUnknownDomain(Metrics& metrics, std::string_view domain) {
  metrics.CountUnknownDomain();
  if (spdlog::should_log(spdlog::level::debug)) {
    constexpr size_t kShown = 64;
    std::string shown(domain.substr(0, kShown));
    for (char& c : shown) {
      c = static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c;
    }
    spdlog::debug("domain '{}'{} has no rules: the request is admitted", shown,
                  domain.size() > kShown ? "..." : "");
  }
}

// Whether every limit planned for a descriptor is in shadow mode.
template <typename Group>
bool AllShadow(const Group& group) {
  return std::all_of(group.begin(), group.end(),
                     [](const auto& p) { return p.mode == Mode::kShadow; });
}

}  // namespace

absl::Status RateLimitService::Validate(const CheckRequest& request) const {
  if (request.domain.empty()) {
    return absl::InvalidArgumentError("domain must not be empty");
  }
  if (request.descriptors.empty()) {
    return absl::InvalidArgumentError("descriptors must not be empty");
  }
  if (request.envoy) {
    // Whatever Envoy sends is answered: an odd descriptor (no entries, an empty key, a huge
    // value) matches no rule, or is counted under a bounded key (RuleKey). Only what its
    // protobuf could not carry (POST /json's numbers are wider) is refused.
    for (size_t d = 0; d < request.descriptors.size(); ++d) {
      const RequestDescriptor& descriptor = request.descriptors[d];
      if (descriptor.limit && descriptor.limit->requests_per_unit > Limit::kMaxCount) {
        return absl::InvalidArgumentError(fmt::format(
            "descriptors[{}].limit.requests_per_unit must be 0 to {}", d, Limit::kMaxCount));
      }
    }
    return absl::OkStatus();
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

RateLimitService::CheckTask RateLimitService::DecideCheck(CheckRequest request, bool count) {
  if (absl::Status s = Validate(request); !s.ok()) {
    co_return s;
  }
  const std::shared_ptr<const RuleSet> rules = this->rules();
  const Domain* domain = rules->FindDomain(request.domain);
  if (domain == nullptr) {
    if (count) {
      CountUnknownDomain(metrics_, request.domain);
    }
    // An unknown domain limits nothing, as envoyproxy/ratelimit.
    CheckResult result{.unmatched = true};
    if (request.explain) {
      result.explanation = ExplainUnmatched(nullptr, request, AllDescriptors(request));
    }
    co_return result;
  }
  const Timestamp now = clock_.Now();
  std::vector<PlannedLease> leases;
  bool matched = false;
  absl::StatusOr<std::vector<Planned>> plan =
      Plan(*domain, request, request.leases ? &leases : nullptr, nullptr, &matched);
  if (!plan.ok()) {
    co_return plan.status();
  }
  std::vector<Planned>& planned = *plan;
  if (request.explain) {
    co_return co_await DecideExplained(*domain, request, AllDescriptors(request), planned, leases,
                                       request.cost, now, count, matched);
  }
  if (!leases.empty()) {
    co_return co_await DecideLeased(planned, leases, request.cost, now, count, request.receipt);
  }
  if (planned.empty()) {
    co_return CheckResult{.unmatched = !matched};
  }
  co_return co_await Decide(planned, request.cost, now, /*denied_elsewhere=*/false, count,
                            request.receipt);
}

namespace {

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

RateLimitService::DescriptorsTask RateLimitService::DecideDescriptors(CheckRequest request) {
  if (absl::Status s = Validate(request); !s.ok()) {
    co_return s;
  }
  const std::shared_ptr<const RuleSet> rules = this->rules();
  if (rules->domains().empty()) {
    co_return absl::UnavailableError("no rules are loaded");
  }
  std::vector<DescriptorResult> results(request.descriptors.size());
  for (DescriptorResult& result : results) {
    result.quota_mode = envoy_.quota_mode;  // Theirs counts unmatched descriptors in it too.
  }
  const Domain* domain = rules->FindDomain(request.domain);
  if (domain == nullptr) {
    CountUnknownDomain(metrics_, request.domain);
    for (size_t d = 0; d < results.size() && request.explain; ++d) {
      results[d].explanation = ExplainUnmatched(nullptr, request, {d});
    }
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
      if (request.explain) {
        results[d].explanation = ExplainUnmatched(domain, request, {d});
      }
      continue;
    }
    const int64_t cost = request.descriptors[d].cost.value_or(request.cost);
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

absl::StatusOr<Limit> AdHocLimit(const AdHocRequest& request) {
  if (request.key.empty() || request.key.size() > kMaxAdHocKeyBytes) {
    return absl::InvalidArgumentError(
        fmt::format("key must be 1 to {} bytes, not {}", kMaxAdHocKeyBytes, request.key.size()));
  }
  for (char c : request.key) {
    if (static_cast<unsigned char>(c) < 0x20) {
      return absl::InvalidArgumentError("key must not contain control characters");
    }
  }
  if (absl::Status s = CheckCost(request.cost, "cost"); !s.ok()) {
    return s;
  }
  // An ad hoc key is shared by every caller who names it: one caller's debt must not deny the
  // others for longer than one limit's worth would.
  const int64_t most = std::max(request.spec.limit, request.spec.burst.value_or(0));
  if (request.max_debt && (*request.max_debt < 0 || *request.max_debt > most)) {
    return absl::InvalidArgumentError(
        fmt::format("max_debt must be 0 to the limit ({}), not {}", most, *request.max_debt));
  }
  if (request.block != Micros{0} && (request.block < kMinBlock || request.block > kMaxBlock)) {
    return absl::InvalidArgumentError(fmt::format(
        "block must be {} to {}", FormatDuration(kMinBlock), FormatDuration(kMaxBlock)));
  }
  return Limit::Create(request.spec);
}

RateLimitService::CheckTask RateLimitService::DecideAdHoc(AdHocRequest request, bool count) {
  if (request.explain) {
    co_return co_await ExplainAdHoc(std::move(request), count);
  }
  absl::StatusOr<Limit> limit = AdHocLimit(request);
  if (!limit.ok()) {
    co_return limit.status();
  }
  const Timestamp now = clock_.Now();
  if (absl::Status s = AdmitCallerLimit(*limit, now); !s.ok()) {
    co_return s;
  }
  const LimitedKey limited{.limit = &*limit, .key = request.key};
  // A block (blocks.h) first: while one runs the request is only asked about.
  const std::optional<Limit> block =
      request.block > Micros{0} ? std::optional<Limit>(BlockLimit(request.block)) : std::nullopt;
  const std::string block_key = block ? BlockKey(request.key) : std::string();
  absl::StatusOr<HeldBack> held = co_await AskHeldBack(
      store_, block ? &*block : nullptr, request.key, request.feedback.has_value(), now);
  if (!held.ok()) {
    CountStoreFailure(held.status());
    co_return held.status();
  }
  const int64_t cost = held->left() > Micros{0} ? 0 : request.cost;
  Decision each;
  Charge charge;
  // Two statements, not a conditional over two co_awaits: GCC 12 destroys the awaiter of
  // such a conditional before the store answers it (a crash on a store's late answer).
  absl::StatusOr<Decision> decision = absl::UnknownError("not decided");
  if (request.receipt) {
    decision = co_await StoreCharge(store_, {&limited, 1}, cost, now, {&each, 1}, {&charge, 1});
  } else {
    decision = co_await StoreDecision(store_, {&limited, 1}, cost, now, {&each, 1});
  }
  if (!decision.ok()) {
    CountStoreFailure(decision.status());
    co_return decision.status();
  }
  if (held->left() > Micros{0}) {
    DenyForBlock(*decision, held->left());
  } else if (block && !decision->allowed && !decision->never_allowed() && request.cost > 0) {
    if (absl::Status s = co_await StartBlock(store_, {.limit = &*block, .key = block_key}, now);
        !s.ok()) {
      CountStoreFailure(s);  // Denied all the same; the next request meets the limit alone.
    } else {
      WaitOutBlock(*decision, block->period());
    }
  }
  CheckResult result;
  result.limited = true;
  result.combined = *decision;
  result.cost = request.cost;
  LimitOutcome& outcome = result.limits.emplace_back();
  outcome.name = "adhoc";
  outcome.limit = *limit;
  outcome.nominal = limit->limit();
  outcome.decision = *decision;
  outcome.blocked = held->block > Micros{0};
  outcome.paused = held->pause > Micros{0};
  outcome.counters = adhoc_counters_;
  if (count) {
    CountOutcomes(result);
    metrics_.top().Record(*adhoc_counters_, outcome.name, request.key, !decision->allowed,
                          static_cast<uint64_t>(request.cost), now);
  }
  if (request.receipt && decision->allowed && request.cost > 0) {
    std::vector<ReceiptLimit> charged;
    charged.push_back({.name = outcome.name,
                       .limit = *limit,
                       .key = request.key,
                       .charge = charge,
                       .max_debt = request.max_debt.value_or(limit->limit())});
    IssueReceipt(std::move(charged), now, result);
  }
  co_return std::move(result);
}

void RateLimitService::CountStoreFailure(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kInvalidArgument) {  // Not the request's own fault.
    return;
  }
  metrics_.CountStoreError();
  // Counted in sluice_store_errors_total, and said in the log, at most every 10 s: how many
  // failed since the last line, and why the last did.
  uint64_t unlogged = 0;
  bool first = false;
  if (store_errors_logged_.Allow(clock_.Now().time_since_epoch().count(), &unlogged, &first)) {
    spdlog::error("the store failed {} decision(s){}; the last: {}", unlogged,
                  first ? "" : " since the last such line", internal::Message(status));
  }
}

void RateLimitService::CheckAsync(CheckRequest request, Done<absl::StatusOr<CheckResult>> done) {
  Run(DecideCheck(std::move(request)), std::move(done));
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

void RateLimitService::ShouldRateLimitAsync(
    CheckRequest request, Done<absl::StatusOr<std::vector<DescriptorResult>>> done) {
  request.envoy = true;
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
  request.envoy = true;
  return internal::Wait(DecideDescriptors(std::move(request)));
}

absl::StatusOr<CheckResult> RateLimitService::CheckAdHoc(AdHocRequest request) {
  return internal::Wait(DecideAdHoc(std::move(request)));
}

void RateLimitService::WaitIdle() const {
  while (in_flight_.load(std::memory_order_acquire) > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace sluice::server
