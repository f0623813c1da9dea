#include "sluice/store.h"

#include <future>
#include <utility>

#include "fmt/format.h"

#include "sluice/duration.h"

namespace sluice {

bool Store::HoldsState(const Limit&, Timestamp) { return true; }

void Store::ChargeAllAsync(std::span<const LimitedKey>, int64_t, Timestamp, std::span<Decision>,
                           std::span<Charge>, DecideDone done) {
  std::move(done)(absl::UnimplementedError("this store cannot settle charges"));
}

void Store::SettleAllAsync(std::span<const LimitedKey>, std::span<const Settlement>,
                           std::string_view, Timestamp, Timestamp, std::span<Settled>,
                           StatusDone done) {
  std::move(done)(absl::UnimplementedError("this store cannot settle charges"));
}

void Store::ResetAllAsync(std::span<const LimitedKey>, Timestamp, StatusDone done) {
  std::move(done)(absl::UnimplementedError("this store cannot reset keys"));
}

// The waiting forms: `done` may run on the store's thread, so the answer crosses by a promise.
absl::StatusOr<Decision> Store::ChargeAll(std::span<const LimitedKey> requests, int64_t cost,
                                          Timestamp now, std::span<Decision> each,
                                          std::span<Charge> charges) {
  std::promise<absl::StatusOr<Decision>> answer;
  auto future = answer.get_future();
  ChargeAllAsync(requests, cost, now, each, charges, [&answer](absl::StatusOr<Decision> result) {
    answer.set_value(std::move(result));
  });
  return future.get();
}

absl::Status Store::SettleAll(std::span<const LimitedKey> requests,
                              std::span<const Settlement> settlements, std::string_view once,
                              Timestamp once_until, Timestamp now, std::span<Settled> settled) {
  std::promise<absl::Status> answer;
  auto future = answer.get_future();
  SettleAllAsync(requests, settlements, once, once_until, now, settled,
                 [&answer](absl::Status status) { answer.set_value(std::move(status)); });
  return future.get();
}

absl::Status Store::ResetAll(std::span<const LimitedKey> requests, Timestamp now) {
  std::promise<absl::Status> answer;
  auto future = answer.get_future();
  ResetAllAsync(requests, now,
                [&answer](absl::Status status) { answer.set_value(std::move(status)); });
  return future.get();
}

absl::Status ValidateSettleAll(size_t requests, std::span<const Settlement> settlements,
                               std::string_view once, size_t settled) {
  if (requests == 0) {
    return absl::InvalidArgumentError("a settle needs at least one limit");
  }
  if (settlements.size() != requests || settled != requests) {
    return absl::InvalidArgumentError(
        fmt::format("a settle needs one settlement per limit: {} limits, {} settlements", requests,
                    settlements.size()));
  }
  for (const Settlement& settlement : settlements) {
    if (absl::Status status = ValidateSettlement(settlement); !status.ok()) {
      return status;
    }
  }
  if (once.size() > kMaxOnceBytes) {
    return absl::InvalidArgumentError(fmt::format(
        "a settle's once must be at most {} bytes, not {}", kMaxOnceBytes, once.size()));
  }
  for (char c : once) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError("a settle's once must be printable ASCII without spaces");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateSharePolicy(const Limit& limit, const SharePolicy& policy) {
  if (limit.algorithm() == Algorithm::kSlidingLog ||
      limit.algorithm() == Algorithm::kSlidingBuckets) {
    return absl::InvalidArgumentError(fmt::format(
        "share: {} cannot be leased (a share's unused units cannot be given back to it); "
        "leasing takes fixed_window, sliding_window, token_bucket, gcra or leaky_bucket",
        AlgorithmName(limit.algorithm())));
  }
  if (policy.max < 1 || policy.max > kMaxShare) {
    return absl::InvalidArgumentError(
        fmt::format("share: max must be 1 to {}, not {}", kMaxShare, policy.max));
  }
  if (policy.ttl < kMinShareTtl || policy.ttl > kMaxShareTtl) {
    return absl::InvalidArgumentError(
        fmt::format("share: ttl must be {} to {}, not {}", FormatDuration(kMinShareTtl),
                    FormatDuration(kMaxShareTtl), FormatDuration(policy.ttl)));
  }
  return absl::OkStatus();
}

absl::Status ValidateLeases(LeaseOp op, std::span<const LeasedKey> keys, std::string_view id,
                            Micros ttl) {
  if (keys.empty()) {
    return absl::InvalidArgumentError("a lease needs at least one key");
  }
  if (id.size() > kMaxLeaseIdBytes || (id.empty() && op != LeaseOp::kQuery)) {
    return absl::InvalidArgumentError(
        fmt::format("a lease id must be 1 to {} bytes, not {}", kMaxLeaseIdBytes, id.size()));
  }
  for (char c : id) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError("a lease id must be printable ASCII without spaces");
    }
  }
  if (op == LeaseOp::kTake && (ttl <= Micros{0} || ttl > kMaxLeaseTtl)) {
    return absl::InvalidArgumentError(fmt::format(
        "a lease's time to live must be 1 us to {} us, not {}", kMaxLeaseTtl.count(), ttl.count()));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (op != LeaseOp::kRelease && (keys[i].capacity < 1 || keys[i].capacity > kMaxConcurrency)) {
      return absl::InvalidArgumentError(
          fmt::format("concurrency must be 1 to {}, not {}", kMaxConcurrency, keys[i].capacity));
    }
    for (size_t j = 0; j < i; ++j) {
      if (keys[j].key == keys[i].key) {
        return absl::InvalidArgumentError(
            fmt::format("the lease key '{}' appears twice", keys[i].key));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status internal::InvalidRequest(size_t limit_count, int64_t cost) {
  if (cost < 0) {
    return absl::InvalidArgumentError(fmt::format("cost must be >= 0, not {}", cost));
  }
  if (limit_count == 0) {
    return absl::InvalidArgumentError("a request needs at least one limit");
  }
  return absl::OkStatus();
}

}  // namespace sluice
