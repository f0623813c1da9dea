// RedisStore::Impl's side of the denial cache (deny_cache.h): its time, the answer from
// memory that SubmitLimits tries first, and the give-backs that make it forget. SubmitLimits
// stamps each call with the cache's time and epoch, and Complete records what Redis denied.

#include <chrono>
#include <optional>
#include <span>
#include <string_view>

#include "src/redis/redis_store_impl.h"

namespace sluice {

// The denial cache's time: the caller's under use_caller_time (Redis decides at it), else a
// steady clock's, which no setting of the system time moves.
Timestamp RedisStore::Impl::DenyCacheNow(Timestamp now) const {
  if (options_.use_caller_time) {
    return now;
  }
  return Timestamp(std::chrono::duration_cast<Micros>(SteadyClock::now().time_since_epoch()));
}

internal::DenyStamp RedisStore::Impl::DenyStamp(Timestamp now) const {
  return deny_cache_ != nullptr ? deny_cache_->Stamp(DenyCacheNow(now)) : internal::DenyStamp{};
}

void RedisStore::Impl::RecordDenial(const Call& call, const absl::StatusOr<Decision>& result) {
  // A share's take (share_calls.cc) asks for more than its request's cost, at a time it keeps
  // itself: what it is denied is the shares' business, not a denial of a request.
  if (deny_cache_ == nullptr || call.lease_op || call.share != nullptr) {
    return;
  }
  if (call.mode == Call::Mode::kGiveBack || call.mode == Call::Mode::kSettle ||
      call.mode == Call::Mode::kReset) {
    // Answered or not (a timeout may follow Redis's applying it), it may have freed units.
    for (size_t i = 0; i < call.limits.size(); ++i) {
      deny_cache_->Forget(call.limits[i], call.keys[i]);
    }
    return;
  }
  if (result.ok() && !result->allowed) {
    deny_cache_->Record(call.limits, call.keys, call.cost, call.deny_stamp, call.each);
  }
}

// A request that the denial cache answers, counted as a call (one that needs no script call).
// A charge denied here charges nothing: its receipts stay as SubmitLimits cleared them.
bool RedisStore::Impl::AnsweredDenied(Call::Mode mode, std::span<const LimitedKey> requests,
                                      int64_t cost, Timestamp now, std::span<Decision> each,
                                      DecideDone& done) {
  if (deny_cache_ == nullptr) {
    return false;
  }
  if (mode == Call::Mode::kGiveBack) {
    for (const LimitedKey& r : requests) {
      deny_cache_->Forget(*r.limit, r.key);
    }
    return false;
  }
  std::optional<Decision> denied = deny_cache_->Answer(requests, cost, DenyCacheNow(now), each);
  if (!denied) {
    return false;
  }
  calls_.fetch_add(1, std::memory_order_relaxed);
  std::move(done)(*denied);
  return true;
}

}  // namespace sluice
