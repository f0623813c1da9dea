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

#include "src/memcached/cas_loop.h"
#include "src/memcached/connection.h"
#include "src/memcached/decide_all.h"
#include "src/memcached/keys.h"
#include "src/memcached/watcher.h"
#include "src/memcached/workers.h"

namespace sluice {

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
  absl::StatusOr<Decision> Run(MemcachedConnection& connection,
                               std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                               std::span<Decision> each, SteadyTime deadline);
  // What the failure policy answers for `error`: the servers could not decide.
  absl::StatusOr<Decision> Fallback(absl::Status error, std::span<const LimitedKey> requests,
                                    int64_t cost, Timestamp now, std::span<Decision> each);

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
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<MemcachedConnection>> pool_;  // Guarded by pool_mu_.
  // Last: its threads use the members above, so it is destroyed (joined) first.
  internal::Workers workers_;
};

namespace {

absl::Status CheckTime(Timestamp now) {
  if (now < MemoryStore::kEarliest || now >= MemoryStore::kLatest) [[unlikely]] {
    return absl::InvalidArgumentError(
        fmt::format("time {}us is outside the memcached store's range, 1970 to 2200",
                    now.time_since_epoch().count()));
  }
  return absl::OkStatus();
}

// The checks every call makes before it asks Memcached; the targets named as items.
absl::Status Check(std::string_view prefix, std::span<const LimitedKey> requests, int64_t cost,
                   Timestamp now, absl::InlinedVector<ItemTarget, 4>& targets) {
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
    for (const ItemTarget& seen : targets) {
      if (seen.item_key == target.item_key) {
        // Deciding one state twice in one all-or-nothing request cannot be undone half-way.
        return absl::InvalidArgumentError(
            fmt::format("limit {} on key '{}' appears twice", r.limit->ToString(), r.key));
      }
    }
    targets.push_back(std::move(target));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Decision> MemcachedStore::Impl::Run(MemcachedConnection& connection,
                                                   std::span<const LimitedKey> requests,
                                                   int64_t cost, Timestamp now,
                                                   std::span<Decision> each, SteadyTime deadline) {
  assert(each.size() == requests.size());
  calls_.fetch_add(1, std::memory_order_relaxed);
  absl::InlinedVector<ItemTarget, 4> targets;
  // Check's errors are the call's own: they reach no server, so no policy applies.
  if (absl::Status s = Check(options_.key_prefix, requests, cost, now, targets); !s.ok()) {
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
      internal::DecideTargets(connection, targets, cost, now, each, settings, give_backs_);
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
  absl::StatusOr<Decision> result = impl_->Run(*connection, requests, cost, now, each,
                                               Impl::SteadyClock::now() + impl_->options().timeout);
  impl_->Return(std::move(connection));
  return result;
}

void MemcachedStore::DecideAllAsync(std::span<const LimitedKey> requests, int64_t cost,
                                    Timestamp now, std::span<Decision> each, DecideDone done) {
  // The requests are the caller's until this returns: the task keeps copies.
  std::vector<Limit> limits;
  std::vector<std::string> keys;
  limits.reserve(requests.size());
  keys.reserve(requests.size());
  for (const LimitedKey& r : requests) {
    limits.push_back(*r.limit);
    keys.emplace_back(r.key);
  }
  // `done` is shared with the refusal below: a task the queue refuses is never run.
  auto shared_done = std::make_shared<DecideDone>(std::move(done));
  const Impl::SteadyTime deadline = Impl::SteadyClock::now() + impl_->options().timeout;
  const bool queued = impl_->workers().Post([impl = impl_.get(), limits = std::move(limits),
                                             keys = std::move(keys), cost, now, each, deadline,
                                             shared_done](MemcachedConnection& connection) mutable {
    absl::InlinedVector<LimitedKey, 4> owned;
    for (size_t i = 0; i < limits.size(); ++i) {
      owned.push_back({.limit = &limits[i], .key = keys[i]});
    }
    std::move (*shared_done)(impl->Run(connection, owned, cost, now, each, deadline));
  });
  if (!queued) {
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
