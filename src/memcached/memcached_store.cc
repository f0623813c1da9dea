#include "sluice/memcached_store.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "fmt/format.h"

#include "src/memcached/keys.h"
#include "src/memcached/store_impl.h"

namespace sluice {

absl::Status internal::CheckTime(Timestamp now) {
  if (now < MemoryStore::kEarliest || now >= MemoryStore::kLatest) [[unlikely]] {
    return absl::InvalidArgumentError(
        fmt::format("time {}us is outside the memcached store's range, 1970 to 2200",
                    now.time_since_epoch().count()));
  }
  return absl::OkStatus();
}

absl::Status internal::CheckTargets(std::string_view prefix, std::span<const LimitedKey> requests,
                                    int64_t cost, Timestamp now,
                                    absl::InlinedVector<ItemTarget, 4>& targets) {
  if (absl::Status s = ValidateRequest(requests.size(), cost); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckTime(now); !s.ok()) {
    return s;
  }
  for (const LimitedKey& r : requests) {
    if (absl::Status s = MemcachedStore::Supports(*r.limit); !s.ok()) {
      return s;
    }
    ItemTarget target{.limit = r.limit, .item_key = internal::ItemKey(prefix, *r.limit, r.key)};
    for (const Limit& earlier : r.before) {
      if (earlier != *r.limit && MemcachedStore::Supports(earlier).ok()) {
        target.earlier.emplace_back(earlier, internal::ItemKey(prefix, earlier, r.key));
      }
    }
    for (const ItemTarget& seen : targets) {
      if (seen.item_key == target.item_key) {
        // Deciding one state twice in one all-or-nothing request cannot be undone half-way.
        return absl::InvalidArgumentError(
            fmt::format("limit {} on key '{}' appears twice", r.limit->ToString(), r.key));
      }
    }
    targets.push_back(std::move(target));
  }
  // An earlier item that is another limit's own item now (two limits of a request that swapped
  // figures) is in use: not one to move or delete.
  for (ItemTarget& target : targets) {
    std::erase_if(target.earlier, [&](const auto& earlier) {
      return std::any_of(targets.begin(), targets.end(),
                         [&](const ItemTarget& t) { return t.item_key == earlier.second; });
    });
  }
  return absl::OkStatus();
}

absl::StatusOr<Decision> MemcachedStore::Impl::Run(MemcachedConnection& connection,
                                                   std::span<const LimitedKey> requests,
                                                   int64_t cost, Timestamp now,
                                                   std::span<Decision> each,
                                                   std::span<Charge> charges, SteadyTime deadline) {
  assert(each.size() == requests.size());
  std::fill(charges.begin(), charges.end(), Charge{});  // Nothing charged, until it is.
  calls_.fetch_add(1, std::memory_order_relaxed);
  absl::InlinedVector<ItemTarget, 4> targets;
  // Check's errors are the call's own: they reach no server, so no policy applies.
  if (absl::Status s = internal::CheckTargets(options_.key_prefix, requests, cost, now, targets);
      !s.ok()) {
    return s;
  }
  if (SteadyClock::now() >= deadline) {  // It waited its whole timeout in the queue.
    return Fallback(absl::DeadlineExceededError(fmt::format(
                        "memcached: the call waited past its timeout ({} ms) for a thread of "
                        "the store: the servers answer too slowly for the calls asked",
                        options_.timeout.count())),
                    requests, cost, now, each);
  }
  internal::CasSettings settings = settings_;
  settings.deadline = deadline;
  absl::StatusOr<Decision> result =
      internal::DecideTargets(connection, targets, cost, now, each, charges, settings, give_backs_);
  if (!result.ok() && internal::IsMemcachedUnavailable(result.status())) {
    return Fallback(result.status(), requests, cost, now, each);
  }
  return result;
}

absl::StatusOr<Decision> MemcachedStore::Impl::Fallback(absl::Status error,
                                                        std::span<const LimitedKey> requests,
                                                        int64_t cost, Timestamp now,
                                                        std::span<Decision> each) {
  failures_.fetch_add(1, std::memory_order_relaxed);
  switch (options_.on_failure) {
    case FailurePolicy::kDeny:
      return error;
    case FailurePolicy::kAllow:
      fallbacks_.fetch_add(1, std::memory_order_relaxed);
      std::fill(each.begin(), each.end(), Decision{.allowed = true});
      return Combine(each);
    case FailurePolicy::kLocal:
      fallbacks_.fetch_add(1, std::memory_order_relaxed);
      return local_.DecideAll(requests, cost, now, each);
  }
  return error;
}

absl::StatusOr<std::unique_ptr<MemcachedStore>> MemcachedStore::Create(
    MemcachedStoreOptions options) {
  auto bad = [](std::string_view why) {
    return absl::InvalidArgumentError(fmt::format("memcached store: {}", why));
  };
  if (options.servers.empty()) {
    return bad("no server");
  }
  if (options.threads < 1 || options.threads > 256) {
    return bad(fmt::format("threads must be 1 to 256, not {}", options.threads));
  }
  if (options.cas_retries < 0 || options.cas_retries > 10'000) {
    return bad(fmt::format("cas_retries must be 0 to 10000, not {}", options.cas_retries));
  }
  if (options.timeout.count() < 1 || options.retry_after_failure.count() < 1 ||
      options.expiry_margin < std::chrono::seconds(1)) {
    // Memcached's clock ticks in whole seconds and may stand up to one behind: an item given a
    // relative exptime of N may go up to a second before N real seconds, a fresh quota early.
    return bad("timeout and retry_after_failure must be at least 1 ms, expiry_margin 1 s");
  }
  // Printable and short, so that every item key stays within Memcached's 250 bytes
  // (src/memcached/keys.h: a limit's name and a hashed key take at most 130 more).
  if (options.key_prefix.size() > 100 ||
      std::any_of(options.key_prefix.begin(), options.key_prefix.end(),
                  [](char c) { return c <= ' ' || c > '~'; })) {
    return bad("key_prefix must be at most 100 printable bytes without spaces");
  }
  auto health = std::make_unique<internal::ServerHealth>(options.log);
  absl::StatusOr<std::unique_ptr<MemcachedConnection>> prototype =
      MemcachedConnection::MakePrototype(options, *health);
  if (!prototype.ok()) {
    return prototype.status();
  }
  return std::unique_ptr<MemcachedStore>(new MemcachedStore(
      std::make_unique<Impl>(std::move(options), std::move(health), *std::move(prototype))));
}

MemcachedStore::MemcachedStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MemcachedStore::~MemcachedStore() = default;

absl::StatusOr<Decision> MemcachedStore::Decide(const Limit& limit, std::string_view key,
                                                int64_t cost, Timestamp now) {
  const LimitedKey request{.limit = &limit, .key = key};
  Decision each;
  return DecideAll({&request, 1}, cost, now, {&each, 1});
}

absl::StatusOr<Decision> MemcachedStore::DecideAll(std::span<const LimitedKey> requests,
                                                   int64_t cost, Timestamp now,
                                                   std::span<Decision> each) {
  std::unique_ptr<MemcachedConnection> connection = impl_->Borrow();
  absl::StatusOr<Decision> result = impl_->Run(*connection, requests, cost, now, each, {},
                                               Impl::SteadyClock::now() + impl_->options().timeout);
  impl_->Return(std::move(connection));
  return result;
}

void MemcachedStore::DecideAllAsync(std::span<const LimitedKey> requests, int64_t cost,
                                    Timestamp now, std::span<Decision> each, DecideDone done) {
  ChargeAllAsync(requests, cost, now, each, {}, std::move(done));
}

void MemcachedStore::ChargeAllAsync(std::span<const LimitedKey> requests, int64_t cost,
                                    Timestamp now, std::span<Decision> each,
                                    std::span<Charge> charges, DecideDone done) {
  assert(charges.empty() || charges.size() == requests.size());
  // `done` is shared with the refusal below: a task the queue refuses is never run.
  auto shared_done = std::make_shared<DecideDone>(std::move(done));
  const Impl::SteadyTime deadline = Impl::SteadyClock::now() + impl_->options().timeout;
  // The requests are the caller's until this returns: the task keeps copies.
  const bool queued = impl_->workers().Post(
      [impl = impl_.get(), owned = internal::OwnedRequests(requests), cost, now, each, charges,
       deadline, shared_done](MemcachedConnection& connection) mutable {
        std::move (*shared_done)(
            impl->Run(connection, owned.View(), cost, now, each, charges, deadline));
      });
  if (!queued) {
    std::fill(charges.begin(), charges.end(), Charge{});
    std::move (*shared_done)(impl_->Fallback(
        absl::UnavailableError(fmt::format(
            "memcached: {} calls wait for the store's threads already: the servers answer too "
            "slowly for the calls asked",
            internal::Workers::kMaxQueued)),
        requests, cost, now, each));
  }
}

absl::StatusOr<Decision> MemcachedStore::LeaseAll(LeaseOp op, std::span<const LeasedKey> keys,
                                                  std::string_view id, Micros ttl, Timestamp,
                                                  std::span<Decision>) {
  if (absl::Status s = ValidateLeases(op, keys, id, ttl); !s.ok()) {
    return s;
  }
  return absl::UnimplementedError(kNoLeases);
}

absl::Status MemcachedStore::CheckLimit(const Limit& limit) const { return Supports(limit); }

bool MemcachedStore::HoldsState(const Limit& limit, Timestamp now) {
  return impl_->local().HoldsState(limit, now);
}

absl::Status MemcachedStore::Supports(const Limit& limit) {
  if (absl::Status s = MemoryStore::Supports(limit); !s.ok()) {
    return s;
  }
  if (limit.algorithm() == Algorithm::kSlidingBuckets && limit.buckets() > kMaxBuckets) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: the memcached store keeps sliding_buckets of at most {} buckets (one item holds "
        "them all)",
        limit.ToString(), kMaxBuckets));
  }
  return absl::OkStatus();
}

MemcachedStoreStats MemcachedStore::Stats() const { return impl_->Stats(); }

std::string MemcachedStore::ItemKey(const Limit& limit, std::string_view key) const {
  return internal::ItemKey(impl_->options().key_prefix, limit, key);
}

}  // namespace sluice
