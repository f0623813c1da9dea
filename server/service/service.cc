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

// The indexes of every descriptor of `request`: a check explains them all.
std::vector<size_t> AllDescriptors(const CheckRequest& request) {
  std::vector<size_t> all(request.descriptors.size());
  for (size_t d = 0; d < all.size(); ++d) {
    all[d] = d;
  }
  return all;
}

}  // namespace

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
