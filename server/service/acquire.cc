#include <algorithm>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "fmt/format.h"

#include "server/service/service_internal.h"
#include "sluice/duration.h"

namespace sluice::server {
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

// Makes `result` the answer to an acquire that could go ahead only past its max_wait: denied,
// to come back after `retry_after`.
void TooFarOff(CheckResult& result, Micros retry_after) {
  result.combined.allowed = false;
  result.combined.retry_after = retry_after;
  result.combined.delay = Micros{0};
}

// Takes `waiter` out of its line when it goes out of scope.
struct LeaveLine {
  WaitLines& lines;
  const std::shared_ptr<Waiter>& waiter;
  ~LeaveLine() { lines.Leave(waiter); }
};

// After an acquire's try was denied, `decided` when the store answered: waits until it may try
// again and returns true, or returns false at once when that would pass `deadline` (or never
// comes). Before a wait for a concurrency slot, `lease_keys` becomes the keys of the
// concurrency limits that applied, for the next try to watch.
internal::Task<bool> WaitToRetry(WaitLines& lines, const std::shared_ptr<Waiter>& waiter,
                                 const CheckResult& result, Timestamp decided, Timestamp deadline,
                                 std::vector<std::string>& lease_keys) {
  const Decision& decision = result.combined;
  // A concurrency slot may come back before the lease that retry_after counts on expires:
  // a holder may give it back at any time. Only the rate limits' waits are known.
  Micros rate_wait{0};
  bool slot_wait = false;
  for (const LimitOutcome& outcome : result.limits) {
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
    co_return false;
  }
  if (!slot_wait) {
    co_await lines.Sleep(waiter, decided + rate_wait);
    co_return true;
  }
  // At least 1 ms: a store that answered "full" with no wait must not make this a spin.
  const Micros poll = std::clamp(decision.retry_after, Micros{1000}, kLeasePoll);
  const Timestamp wake = std::min(decided + std::max(rate_wait, poll), deadline);
  lease_keys = result.lease_keys;
  co_await lines.SleepOnLeases(waiter, wake, lease_keys);
  co_return true;
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
  const LeaveLine leave{*lines_, waiter};
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
        TooFarOff(*result, std::max(request.max_wait, Micros{1000}));
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
          TooFarOff(*result, delay - (deadline - now));
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
    if (result->combined.allowed) {
      result = co_await GoAhead(waiter, *std::move(result), decided);
      break;
    }
    if (!co_await WaitToRetry(*lines_, waiter, *result, decided, deadline, lease_keys)) {
      break;
    }
  }
  if (!result.ok()) {
    co_return result.status();
  }
  CountOutcomes(*result);  // Once, as it is answered: not each try.
  co_return AcquireResult{.check = *std::move(result), .waited = clock_.Now() - start};
}

internal::Task<absl::StatusOr<CheckResult>> RateLimitService::GoAhead(
    const std::shared_ptr<Waiter>& waiter, CheckResult result, Timestamp decided) {
  // Another server's waiter may have been admitted between the probe and this: this one
  // then has a delay after all, and waits it out before the caller goes ahead.
  if (result.combined.delay > Micros{0}) {
    co_await lines_->Sleep(waiter, decided + result.combined.delay);
    result.combined.delay = Micros{0};  // Waited out: the caller may go ahead now.
  }
  if (absl::Status why = lines_->Cancelled(*waiter); !why.ok()) {
    // Gone (or the server stops) meanwhile: charged, and not to be told "go ahead" early;
    // a lease it took goes back rather than hold its slot for lease_ttl.
    CountOutcomes(result);
    if (!result.lease.empty()) {
      (void)co_await DecideRelease(std::move(result.lease));
    }
    co_return why;
  }
  co_return std::move(result);
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

size_t RateLimitService::waiting() const { return lines_ == nullptr ? 0 : lines_->waiting(); }

absl::StatusOr<AcquireResult> RateLimitService::Acquire(AcquireRequest request) {
  // Shared: `done` may still be inside set_value when this thread wakes and returns.
  auto answer = std::make_shared<std::promise<absl::StatusOr<AcquireResult>>>();
  std::future<absl::StatusOr<AcquireResult>> future = answer->get_future();
  AcquireAsync(std::move(request), [answer](absl::StatusOr<AcquireResult> result) {
    answer->set_value(std::move(result));
  });
  return future.get();
}

}  // namespace sluice::server
