#include "src/memory/leases.h"

#include <algorithm>
#include <cassert>

#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "fmt/format.h"

namespace sluice::internal {

Decision DecideLease(std::vector<Lease>& held, LeaseOp op, int64_t capacity, std::string_view id,
                     Micros ttl, Timestamp now, bool apply) {
  std::erase_if(held, [&](const Lease& lease) { return lease.expiry <= now; });
  auto mine = std::find_if(held.begin(), held.end(),
                           [&](const Lease& lease) { return !id.empty() && lease.id == id; });
  Decision decision;
  if (op == LeaseOp::kRelease) {
    decision.allowed = mine != held.end();
    if (decision.allowed && apply) {
      held.erase(mine);
    }
  } else {
    decision.allowed = mine != held.end() || static_cast<int64_t>(held.size()) < capacity;
    if (decision.allowed && apply && op == LeaseOp::kTake) {
      if (mine != held.end()) {
        mine->expiry = now + ttl;
      } else {
        held.push_back({std::string(id), now + ttl});
      }
    }
    decision.remaining = std::max<int64_t>(0, capacity - static_cast<int64_t>(held.size()));
  }
  Timestamp first = Timestamp::max();
  Timestamp last = now;
  for (const Lease& lease : held) {
    first = std::min(first, lease.expiry);
    last = std::max(last, lease.expiry);
  }
  decision.reset_after = last - now;
  if (!decision.allowed && op != LeaseOp::kRelease) {
    decision.retry_after = first - now;  // Every lease left expires after now: at least 1 us.
  }
  return decision;
}

size_t LeaseTable::ShardOf(std::string_view key) { return absl::HashOf(key) % kShards; }

void LeaseTable::Sweep(Shard& shard, Timestamp now) {
  int64_t dropped = 0;
  absl::erase_if(shard.leases, [&](auto& entry) {
    dropped += static_cast<int64_t>(
        std::erase_if(entry.second, [&](const Lease& lease) { return lease.expiry <= now; }));
    return entry.second.empty();
  });
  leases_.fetch_sub(dropped, std::memory_order_relaxed);
  shard.sweep_at = std::max<size_t>(64, 2 * shard.leases.size());
}

bool LeaseTable::Reserve(int64_t n, Timestamp now, std::span<const size_t> locked)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // Holds `locked`; tries the others.
  if (max_leases_ == 0 || n == 0) {
    return true;
  }
  if (leases_.fetch_add(n, std::memory_order_relaxed) + n <= max_leases_) {
    return true;
  }
  leases_.fetch_sub(n, std::memory_order_relaxed);
  int64_t due = next_full_sweep_.load(std::memory_order_relaxed);
  const int64_t at = now.time_since_epoch().count();
  if (at >= due && next_full_sweep_.compare_exchange_strong(due, at + kFullSweepEvery.count(),
                                                            std::memory_order_relaxed)) {
    for (size_t s = 0; s < kShards; ++s) {
      const bool held = std::find(locked.begin(), locked.end(), s) != locked.end();
      if (held) {
        Sweep(shards_[s], now);
      } else if (shards_[s].mu.TryLock()) {  // Never waited for: the caller holds others.
        Sweep(shards_[s], now);
        shards_[s].mu.Unlock();
      }
    }
    if (leases_.fetch_add(n, std::memory_order_relaxed) + n <= max_leases_) {
      return true;
    }
    leases_.fetch_sub(n, std::memory_order_relaxed);
  }
  refused_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

absl::StatusOr<Decision> LeaseTable::LeaseAll(LeaseOp op, std::span<const LeasedKey> keys,
                                              std::string_view id, Micros ttl, Timestamp now,
                                              std::span<Decision> each)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // Locks a runtime set of shard mutexes, in index order.
  assert(each.size() == keys.size());
  absl::InlinedVector<size_t, 4> shards;
  for (const LeasedKey& k : keys) {
    shards.push_back(ShardOf(k.key));
  }
  absl::InlinedVector<size_t, 4> locked(shards.begin(), shards.end());
  std::sort(locked.begin(), locked.end());
  locked.erase(std::unique(locked.begin(), locked.end()), locked.end());
  for (size_t s : locked) {
    shards_[s].mu.Lock();
  }
  // Each key's leases (keys are distinct: ValidateLeases); an entry made for a key that ends
  // up holding none is removed below. `held`: the leases they hold, kept in leases_.
  absl::InlinedVector<std::vector<Lease>*, 4> sets;
  int64_t held = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    sets.push_back(&shards_[shards[i]].leases[std::string(keys[i].key)]);
    held += static_cast<int64_t>(sets.back()->size());
  }
  bool all_allowed = true;
  int64_t added = 0;  // New leases a take would hold (not renewals), and their holders left.
  for (size_t i = 0; i < keys.size(); ++i) {
    each[i] = DecideLease(*sets[i], op, keys[i].capacity, id, ttl, now, /*apply=*/false);
    all_allowed = all_allowed && each[i].allowed;
    added += std::none_of(sets[i]->begin(), sets[i]->end(),
                          [&](const Lease& lease) { return lease.id == id; })
                 ? 1
                 : 0;
  }
  const auto count = [&] {
    int64_t n = 0;
    for (const std::vector<Lease>* set : sets) {
      n += static_cast<int64_t>(set->size());
    }
    return n;
  };
  leases_.fetch_add(count() - held, std::memory_order_relaxed);  // Expired ones went.
  held = count();
  bool refused = false;
  // A take is all or nothing; a release gives back whatever `id` holds.
  if (op == LeaseOp::kTake && all_allowed) {
    refused = !Reserve(added, now, locked);
    held += refused ? 0 : added;  // Counted by Reserve.
    // Its sweep may erase our keys' empty entries (no live lease is in them: the dry run
    // dropped the expired ones, so counts hold): take them again.
    for (size_t i = 0; i < keys.size(); ++i) {
      sets[i] = &shards_[shards[i]].leases[std::string(keys[i].key)];
    }
  }
  if (!refused && (op == LeaseOp::kRelease || (op == LeaseOp::kTake && all_allowed))) {
    for (size_t i = 0; i < keys.size(); ++i) {
      if (op == LeaseOp::kTake || each[i].allowed) {
        each[i] = DecideLease(*sets[i], op, keys[i].capacity, id, ttl, now, /*apply=*/true);
      }
    }
  }
  leases_.fetch_add(count() - held, std::memory_order_relaxed);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (sets[i]->empty()) {
      shards_[shards[i]].leases.erase(std::string(keys[i].key));
    }
  }
  for (size_t s : locked) {
    if (shards_[s].leases.size() >= shards_[s].sweep_at) {
      Sweep(shards_[s], now);
    }
    shards_[s].mu.Unlock();
  }
  if (refused) {
    return absl::ResourceExhaustedError(
        fmt::format("the memory store holds {} leases (--max-leases), none expired; refusing a "
                    "new one",
                    max_leases_));
  }
  return Combine(each);
}

size_t LeaseTable::KeyCount() {
  size_t n = 0;
  for (Shard& shard : shards_) {
    MutexLock lock(shard.mu);
    n += shard.leases.size();
  }
  return n;
}

}  // namespace sluice::internal
