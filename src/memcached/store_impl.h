#pragma once

// MemcachedStore's parts (MemcachedStore::Impl), shared by memcached_store.cc (decisions) and
// settle.cc (settles and resets), and the checks every call makes before it asks Memcached.
//
// Thread-safe, as the store.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"

#include "sluice/memcached_store.h"
#include "sluice/settle.h"
#include "src/memcached/cas_loop.h"
#include "src/memcached/connection.h"
#include "src/memcached/decide_all.h"
#include "src/memcached/server_health.h"
#include "src/memcached/watcher.h"
#include "src/memcached/workers.h"

namespace sluice {

namespace internal {

// OK, or InvalidArgument when `now` is outside the store's range (1970 to 2200).
absl::Status CheckTime(Timestamp now);

// The checks every call makes before it asks Memcached (ValidateRequest with `cost`, the
// time, each limit supported, no limit and key twice); `targets` gets the requests named as
// items. Its errors are the call's own: they reach no server, so no policy applies.
absl::Status CheckTargets(std::string_view prefix, std::span<const LimitedKey> requests,
                          int64_t cost, Timestamp now, absl::InlinedVector<ItemTarget, 4>& targets);

// A request's limits, keys and earlier figures copied, for a task that runs after its caller
// has returned.
class OwnedRequests {
 public:
  explicit OwnedRequests(std::span<const LimitedKey> requests) {
    limits_.reserve(requests.size());
    keys_.reserve(requests.size());
    before_.reserve(requests.size());
    for (const LimitedKey& r : requests) {
      limits_.push_back(*r.limit);
      keys_.emplace_back(r.key);
      before_.emplace_back(r.before.begin(), r.before.end());
    }
  }
  // Views of the copies, valid while this (or what it is moved to) lives: moving the vectors
  // moves their buffers, which the views point into.
  absl::InlinedVector<LimitedKey, 4> View() const {
    absl::InlinedVector<LimitedKey, 4> view;
    for (size_t i = 0; i < limits_.size(); ++i) {
      view.push_back({.limit = &limits_[i], .key = keys_[i], .before = before_[i]});
    }
    return view;
  }

 private:
  std::vector<Limit> limits_;
  std::vector<std::string> keys_;
  std::vector<std::vector<Limit>> before_;
};

}  // namespace internal

using internal::ItemTarget;
using internal::MemcachedConnection;

// The store's parts: the options, the connection sets (the workers' own, and a pool for the
// callers of the synchronous calls), the `local` policy's store and the counters.
class MemcachedStore::Impl {
 public:
  using SteadyClock = std::chrono::steady_clock;
  using SteadyTime = SteadyClock::time_point;

  Impl(MemcachedStoreOptions options, std::unique_ptr<internal::ServerHealth> health,
       std::unique_ptr<MemcachedConnection> prototype)
      : options_(std::move(options)),
        health_(std::move(health)),
        prototype_(std::move(prototype)),
        local_(options_.local),
        settings_{.retries = options_.cas_retries,
                  .expiry_margin = options_.expiry_margin,
                  .counters = &cas_counters_},
        workers_(options_.threads, *prototype_) {}

  const MemcachedStoreOptions& options() const { return options_; }
  internal::Workers& workers() { return workers_; }

  // Decides on `connection` (the caller's thread) by `deadline` (the call's timeout from when
  // it was asked, queued or not), the failure policy deciding what Memcached could not.
  // With `charges` not empty, also what each limit charged (Store::ChargeAllAsync).
  absl::StatusOr<Decision> Run(MemcachedConnection& connection,
                               std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                               std::span<Decision> each, std::span<Charge> charges,
                               SteadyTime deadline);
  // What the failure policy answers for `error`: the servers could not decide.
  absl::StatusOr<Decision> Fallback(absl::Status error, std::span<const LimitedKey> requests,
                                    int64_t cost, Timestamp now, std::span<Decision> each);

  // Settles on `connection` by `deadline`, as Store::SettleAllAsync says; the arguments
  // validated already (ValidateSettleAll and the debts, CheckDebts). src/memcached/settle.cc.
  absl::Status Settle(MemcachedConnection& connection, std::span<const LimitedKey> requests,
                      std::span<const Settlement> settlements, std::string_view once,
                      Timestamp once_until, Timestamp now, std::span<Settled> settled,
                      SteadyTime deadline);
  // What a settle that Memcached did not make on `request` leaves, `error` being why: nothing
  // given back (the units stay charged); the extra charge made on the `local` policy's store
  // when Memcached could not be reached and that policy is on, else lost (counted).
  Settled SettleFailed(const LimitedKey& request, const Settlement& settlement, Timestamp now,
                       const absl::Status& error);
  // Deletes every request's item on `connection` (and forgets the `local` policy's state).
  absl::Status Reset(MemcachedConnection& connection, std::span<const LimitedKey> requests,
                     Timestamp now);

  // A connection set for a synchronous call, from the pool (a new clone when none is free).
  std::unique_ptr<MemcachedConnection> Borrow() {
    {
      std::lock_guard lock(pool_mu_);
      if (!pool_.empty()) {
        std::unique_ptr<MemcachedConnection> c = std::move(pool_.back());
        pool_.pop_back();
        return c;
      }
    }
    std::unique_ptr<MemcachedConnection> c = prototype_->Clone();
    if (c == nullptr) {
      std::abort();  // libmemcached could not allocate: out of memory is fatal (STYLE.md 2.4).
    }
    return c;
  }
  void Return(std::unique_ptr<MemcachedConnection> c) {
    std::lock_guard lock(pool_mu_);
    pool_.push_back(std::move(c));
  }

  MemoryStore& local() { return local_; }

  MemcachedStoreStats Stats() const {
    const internal::HealthLog::Counts lost = health_->counts();
    return {.servers = static_cast<int>(options_.servers.size()),
            .servers_lost = lost.lost,
            .servers_refusing = lost.refusing,
            .calls = calls_.load(std::memory_order_relaxed),
            .failures = failures_.load(std::memory_order_relaxed),
            .fallbacks = fallbacks_.load(std::memory_order_relaxed),
            .cas_conflicts = cas_counters_.conflicts.load(std::memory_order_relaxed),
            .cas_exhausted = cas_counters_.exhausted.load(std::memory_order_relaxed),
            .give_backs = give_backs_.given.load(std::memory_order_relaxed),
            .give_backs_failed = give_backs_.failed.load(std::memory_order_relaxed),
            .settle_units_lost = settle_units_lost_.load(std::memory_order_relaxed),
            .local = local_.Stats()};
  }

 private:
  const MemcachedStoreOptions options_;
  const std::unique_ptr<internal::ServerHealth> health_;  // Before the connections that use it.
  const std::unique_ptr<MemcachedConnection> prototype_;
  internal::Watcher watcher_{options_, *health_};  // Probes the servers lost.
  MemoryStore local_;
  internal::CasCounters cas_counters_;
  internal::GiveBackCounters give_backs_;
  const internal::CasSettings settings_;
  // Counters: relaxed, for monitoring; no decision reads them.
  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint64_t> fallbacks_{0};
  std::atomic<uint64_t> settle_units_lost_{0};
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<MemcachedConnection>> pool_;  // Guarded by pool_mu_.
  // Last: its threads use the members above, so it is destroyed (joined) first.
  internal::Workers workers_;
};

}  // namespace sluice
