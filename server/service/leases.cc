#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_split.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

#include "server/service/service_internal.h"
#include "server/service/store_answer.h"
#include "src/core/status.h"

namespace sluice::server {
namespace {

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

RateLimitService::CheckTask RateLimitService::DecideLeased(std::vector<Planned>& planned,
                                                           std::vector<PlannedLease>& leases,
                                                           int64_t cost, Timestamp now, bool count,
                                                           bool receipt) {
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
                             /*count=*/false, receipt);
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

void RateLimitService::ReleaseAsync(std::string lease, Done<absl::StatusOr<bool>> done) {
  Run(DecideRelease(std::move(lease)), std::move(done));
}

absl::StatusOr<bool> RateLimitService::Release(std::string lease) {
  return internal::Wait(DecideRelease(std::move(lease)));
}

}  // namespace sluice::server
