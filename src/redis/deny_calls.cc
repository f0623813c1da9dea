// RedisStore::Impl's side of the denial cache (deny_cache.h): its time, the answer from
// memory that Submit tries first, and the give-backs that make it forget. Submit stamps each
// call with the cache's time and epoch, and Complete records what Redis denied.

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
  if (deny_cache_ != nullptr && result.ok() && !result->allowed && !call.lease_op) {
    deny_cache_->Record(call.limits, call.keys, call.cost, call.deny_stamp, call.each);
  }
}

// A request that the denial cache answers, counted as a call (one that needs no script call).
bool RedisStore::Impl::AnsweredDenied(std::span<const LimitedKey> requests, int64_t cost,
                                      Timestamp now, std::span<Decision> each, DecideDone& done) {
  if (deny_cache_ == nullptr) {
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

void RedisStore::Impl::ForgetDenials(const Limit& limit, std::string_view key) {
  if (deny_cache_ != nullptr) {
    deny_cache_->Forget(limit, key);
  }
}

}  // namespace sluice
