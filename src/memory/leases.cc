#include "src/memory/leases.h"

#include <algorithm>
#include <cassert>

#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"

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
  absl::erase_if(shard.leases, [&](auto& entry) {
    std::erase_if(entry.second, [&](const Lease& lease) { return lease.expiry <= now; });
    return entry.second.empty();
  });
  shard.sweep_at = std::max<size_t>(64, 2 * shard.leases.size());
}

Decision LeaseTable::LeaseAll(LeaseOp op, std::span<const LeasedKey> keys, std::string_view id,
                              Micros ttl, Timestamp now, std::span<Decision> each)
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
  // Each key's leases; an entry made for a key that ends up holding none is removed below.
  absl::InlinedVector<std::vector<Lease>*, 4> sets;
  for (size_t i = 0; i < keys.size(); ++i) {
    sets.push_back(&shards_[shards[i]].leases[std::string(keys[i].key)]);
  }
  bool all_allowed = true;
  for (size_t i = 0; i < keys.size(); ++i) {
    each[i] = DecideLease(*sets[i], op, keys[i].capacity, id, ttl, now, /*apply=*/false);
    all_allowed = all_allowed && each[i].allowed;
  }
  // A take is all or nothing; a release gives back whatever `id` holds.
  if (op == LeaseOp::kRelease || (op == LeaseOp::kTake && all_allowed)) {
    for (size_t i = 0; i < keys.size(); ++i) {
      if (op == LeaseOp::kTake || each[i].allowed) {
        each[i] = DecideLease(*sets[i], op, keys[i].capacity, id, ttl, now, /*apply=*/true);
      }
    }
  }
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
