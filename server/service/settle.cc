// After the decision: receipts issued for what a check charged, settled later at the
// request's real cost (SettleAsync), and keys reset (ResetAsync). service.h documents each.

#include <algorithm>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "fmt/format.h"

#include "server/service/blocks.h"
#include "server/service/service_internal.h"
#include "server/service/store_answer.h"

namespace sluice::server {
namespace {

// How much longer than its receipt a store keeps a settled receipt's id. A server whose
// clock runs behind the others' could still believe a receipt valid after the store forgot
// its id; this margin covers clocks apart by up to a minute.
constexpr Micros kClaimMargin = std::chrono::minutes(1);

}  // namespace

void RateLimitService::IssueReceipt(std::vector<ReceiptLimit> limits, Timestamp now,
                                    CheckResult& result) const {
  // A receipt Verify would refuse is not handed out (docs/server.md says so): the check stands.
  if (limits.size() > kMaxReceiptLimits) {
    return;
  }
  Receipt receipt{.id = NewReceiptId(),
                  .issued = now,
                  .expires = ReceiptExpiry(now, limits),
                  .cost = result.cost,
                  .limits = std::move(limits)};
  std::string token = signer_.Sign(receipt);
  if (token.size() > kMaxReceiptBytes) {
    return;
  }
  result.receipt = std::move(token);
  result.receipt_ttl = receipt.expires - now;
}

internal::Task<absl::StatusOr<SettleResult>> RateLimitService::DecideSettle(SettleRequest request) {
  if (request.cost < 0 || request.cost > Limit::kMaxCount) {
    co_return absl::InvalidArgumentError(
        fmt::format("cost must be 0 to {}, not {}", Limit::kMaxCount, request.cost));
  }
  const Timestamp now = clock_.Now();
  absl::StatusOr<Receipt> receipt = signer_.Verify(request.receipt, now);
  if (!receipt.ok()) {
    metrics_.CountSettle(false);
    co_return receipt.status();
  }
  std::vector<LimitedKey> keys;
  std::vector<Settlement> settlements;
  for (const ReceiptLimit& limit : receipt->limits) {
    keys.push_back({.limit = &limit.limit, .key = limit.key});
    // A settle that charges nothing more needs no debt: a store that cannot hold this debt
    // (ChargePast's bounds) must still give back.
    const bool extra = request.cost > limit.charge.units;
    settlements.push_back(
        {.charge = limit.charge, .units = request.cost, .max_debt = extra ? limit.max_debt : 0});
  }
  std::vector<Settled> settled(keys.size());
  const absl::Status status = co_await StoreSettle(store_, keys, settlements, receipt->id,
                                                   receipt->expires + kClaimMargin, now, settled);
  if (absl::IsAlreadyExists(status)) {
    metrics_.CountSettle(false);
    co_return absl::InvalidArgumentError("receipt was settled already");
  }
  if (!status.ok()) {
    CountStoreFailure(status);
    co_return status;
  }
  metrics_.CountSettle(true);
  SettleResult result{.cost = request.cost};
  for (size_t i = 0; i < settled.size(); ++i) {
    const Settled& s = settled[i];
    result.given_back = i == 0 ? s.given_back : std::min(result.given_back, s.given_back);
    result.charged = i == 0 ? s.charged : std::min(result.charged, s.charged);
    result.limits.push_back({.name = receipt->limits[i].name, .settled = s});
  }
  co_return std::move(result);
}

namespace {

// An ad hoc reset's keys: the limit, and the block and pause on its key.
internal::Task<absl::Status> ResetAdHoc(Store& store, const AdHocRequest& adhoc, Timestamp now) {
  const absl::StatusOr<Limit> limit = AdHocLimit(adhoc);
  if (!limit.ok()) {
    co_return limit.status();
  }
  std::vector<LimitedKey> keys = {{.limit = &*limit, .key = adhoc.key}};
  const std::optional<Limit> block =
      adhoc.block > Micros{0} ? std::optional<Limit>(BlockLimit(adhoc.block)) : std::nullopt;
  const std::string block_key = BlockKey(adhoc.key);
  const std::string pause_key = PauseKey(adhoc.key);
  if (block) {
    keys.push_back({.limit = &*block, .key = block_key});
  }
  if (adhoc.feedback) {
    keys.push_back({.limit = &PauseLimit(), .key = pause_key});
  }
  co_return co_await StoreReset(store, keys, now);
}

}  // namespace

internal::Task<absl::StatusOr<ResetResult>> RateLimitService::DecideReset(
    std::variant<AdHocRequest, CheckRequest> request) {
  const Timestamp now = clock_.Now();
  if (const AdHocRequest* adhoc = std::get_if<AdHocRequest>(&request)) {
    if (absl::Status s = AdHocLimit(*adhoc).status(); !s.ok()) {
      co_return s;
    }
    if (absl::Status s = co_await ResetAdHoc(store_, *adhoc, now); !s.ok()) {
      CountStoreFailure(s);
      co_return s;
    }
    metrics_.CountReset();
    co_return ResetResult{.limits = {"adhoc"}};
  }
  CheckRequest& check = std::get<CheckRequest>(request);
  if (absl::Status s = Validate(check); !s.ok()) {
    co_return s;
  }
  const std::shared_ptr<const RuleSet> rules = this->rules();
  const Domain* domain = rules->FindDomain(check.domain);
  if (domain == nullptr) {
    co_return ResetResult{.unmatched = true};
  }
  bool matched = false;
  absl::StatusOr<std::vector<Planned>> plan = Plan(*domain, check, nullptr, nullptr, &matched);
  if (!plan.ok()) {
    co_return plan.status();
  }
  // Every stored form of each limit: the limit, the Envoy API's counter of its window, and
  // the block and the partner's pause on its key.
  std::vector<LimitedKey> keys;
  std::vector<std::string> block_keys;
  block_keys.reserve(2 * plan->size());  // No reallocation: `keys` points into it.
  ResetResult result{.unmatched = !matched};
  // `before`: a reset forgets the key under the limit's earlier figures too (RuleLimit::before).
  auto add = [&keys](const Limit& limit, const std::string& key,
                     std::span<const Limit> before = {}) {
    const bool seen = std::any_of(keys.begin(), keys.end(), [&](const LimitedKey& k) {
      return *k.limit == limit && k.key == key;
    });
    if (!seen) {
      keys.push_back({.limit = &limit, .key = key, .before = before});
    }
  };
  for (const Planned& p : *plan) {
    const RuleLimit& rule_limit = *p.rule_limit;
    if (rule_limit.limit) {
      add(*rule_limit.limit, p.key, rule_limit.before);
    }
    if (rule_limit.counter) {
      add(*rule_limit.counter, p.key);
    }
    if (rule_limit.block) {
      add(*rule_limit.block, block_keys.emplace_back(BlockKey(p.key)));
    }
    if (rule_limit.feedback) {
      add(PauseLimit(), block_keys.emplace_back(PauseKey(p.key)));
    }
    if ((rule_limit.limit || rule_limit.counter) &&
        std::find(result.limits.begin(), result.limits.end(), rule_limit.name) ==
            result.limits.end()) {
      result.limits.push_back(rule_limit.name);
    }
  }
  if (!keys.empty()) {
    if (absl::Status s = co_await StoreReset(store_, keys, now); !s.ok()) {
      CountStoreFailure(s);
      co_return s;
    }
  }
  metrics_.CountReset();
  co_return std::move(result);
}

void RateLimitService::SettleAsync(SettleRequest request, Done<absl::StatusOr<SettleResult>> done) {
  Run(DecideSettle(std::move(request)), std::move(done));
}

void RateLimitService::ResetAsync(std::variant<AdHocRequest, CheckRequest> request,
                                  Done<absl::StatusOr<ResetResult>> done) {
  Run(DecideReset(std::move(request)), std::move(done));
}

absl::StatusOr<SettleResult> RateLimitService::Settle(SettleRequest request) {
  return internal::Wait(DecideSettle(std::move(request)));
}

absl::StatusOr<ResetResult> RateLimitService::Reset(
    std::variant<AdHocRequest, CheckRequest> request) {
  return internal::Wait(DecideReset(std::move(request)));
}

}  // namespace sluice::server
