#include "src/redis/deny_cache.h"

#include <algorithm>
#include <cassert>

#include "absl/hash/hash.h"
#include "fmt/format.h"

namespace sluice::internal {
namespace {

// Up to 16 shards, each of 64 entries at least: a small cache is one shard, whose evictions
// see all of it.
constexpr int64_t kMaxShards = 16;
constexpr int64_t kMinPerShard = 64;

int64_t ShardsFor(int64_t entries) {
  return std::clamp<int64_t>(entries / kMinPerShard, 1, kMaxShards);
}

// A shard index from a hash: its high bits, as the map inside uses the low ones.
size_t ShardIndex(size_t hash, size_t shards) { return (hash >> 32) % shards; }

}  // namespace

absl::Status DenyCache::CheckOptions(int64_t entries, std::chrono::milliseconds max_ttl) {
  if (entries < 0 || entries > kMaxEntries) {
    return absl::InvalidArgumentError(fmt::format(
        "deny_cache_entries must be between 0 (off) and {}, not {}", kMaxEntries, entries));
  }
  if (max_ttl <= std::chrono::milliseconds(0)) {
    return absl::InvalidArgumentError(
        fmt::format("deny_cache_max_ttl must be positive, not {} ms", max_ttl.count()));
  }
  return absl::OkStatus();
}

std::unique_ptr<DenyCache> DenyCache::Create(int64_t entries, std::chrono::milliseconds max_ttl) {
  return entries > 0 ? std::make_unique<DenyCache>(entries, max_ttl) : nullptr;
}

DenyCache::DenyCache(int64_t entries, Micros max_ttl)
    : per_shard_(static_cast<size_t>(entries / ShardsFor(entries))),
      max_ttl_(max_ttl),
      shards_(static_cast<size_t>(ShardsFor(entries))) {
  assert(entries >= 1 && max_ttl >= Micros{1});
}

size_t DenyCache::Hash::operator()(const Key& k) const { return (*this)(KeyRef{&k.limit, k.key}); }
size_t DenyCache::Hash::operator()(const KeyRef& k) const { return absl::HashOf(*k.limit, k.key); }

DenyCache::Shard& DenyCache::ShardOf(size_t hash) {
  return shards_[ShardIndex(hash, shards_.size())];
}

DenyStamp DenyCache::Stamp(Timestamp now) const {
  return {.at = now, .epoch = epoch_.load(std::memory_order_acquire)};
}

std::optional<Decision> DenyCache::Answer(std::span<const LimitedKey> requests, int64_t cost,
                                          Timestamp now, std::span<Decision> each) {
  assert(each.size() == requests.size());
  bool denied = false;
  for (size_t i = 0; i < requests.size(); ++i) {
    const KeyRef ref{requests[i].limit, requests[i].key};
    const size_t hash = Hash{}(ref);
    Shard& shard = ShardOf(hash);
    Entry entry;
    {
      MutexLock lock(shard.mu);
      auto it = shard.map.find(ref, hash);
      if (it == shard.map.end() || now >= it->second.until) {
        return std::nullopt;
      }
      entry = it->second;
    }
    if (!entry.figures.allowed && cost < entry.cost) {
      return std::nullopt;  // Denied for more than this request asks: unknown for this cost.
    }
    // A time before the call was made counts as none elapsed (Redis's figures, then, are
    // larger still: the bounds hold).
    const Micros elapsed = std::max(Micros{0}, now - entry.at);
    Decision& d = each[i];
    d = entry.figures;
    d.reset_after = std::max(Micros{0}, d.reset_after - elapsed);
    d.delay = std::max(Micros{0}, d.delay - elapsed);  // A leaky_bucket's queue, beside a denial.
    if (cost > requests[i].limit->burst()) {
      // Past the limit's capacity: never allowed, whatever the state, as Redis would say.
      d.allowed = false;
      d.retry_after = kNeverAllowed;
    } else if (!d.allowed) {
      d.retry_after = std::max(Micros{1}, d.retry_after - elapsed);
    }
    denied = denied || !d.allowed;
  }
  if (!denied) {
    return std::nullopt;  // Nothing here denies: only Redis can say whether it is allowed.
  }
  answered_.fetch_add(1, std::memory_order_relaxed);
  return Combine(each);
}

void DenyCache::Record(std::span<const Limit> limits, std::span<const std::string> keys,
                       int64_t cost, DenyStamp stamp, std::span<const Decision> each) {
  assert(limits.size() == keys.size() && keys.size() == each.size());
  // How long the denial lasts: the longest retry_after among the limits Redis denied, which
  // is also how long the figures of the other limits are kept beside it.
  Micros longest{0};
  for (const Decision& d : each) {
    if (!d.allowed && d.retry_after > Micros{0}) {
      longest = std::max(longest, d.retry_after);
    }
  }
  if (longest == Micros{0}) {
    return;  // Allowed, or denied only where it is never allowed: nothing to repeat.
  }
  for (size_t i = 0; i < each.size(); ++i) {
    const Decision& d = each[i];
    if (!d.allowed && d.never_allowed()) {
      continue;  // Not a denial that ends: its figures are of no use beside another's.
    }
    const Micros life = std::min(d.allowed ? longest : d.retry_after, max_ttl_);
    const Entry entry{.at = stamp.at, .until = stamp.at + life, .cost = cost, .figures = d};
    const KeyRef ref{&limits[i], keys[i]};
    Put(ShardOf(Hash{}(ref)), ref, entry, stamp.epoch);
  }
}

void DenyCache::Put(Shard& shard, const KeyRef& key, const Entry& entry, uint64_t epoch) {
  MutexLock lock(shard.mu);
  // Under the shard's lock, which Forget holds while it moves the epoch on: a give-back of
  // this key is either seen here or erases what is written here.
  if (epoch_.load(std::memory_order_acquire) != epoch) {
    return;
  }
  auto it = shard.map.find(key);
  if (it != shard.map.end()) {
    const Entry& known = it->second;
    if (entry.figures.allowed && !known.figures.allowed && entry.at < known.until) {
      return;  // A denial still fresh outranks the figures of a limit that did not deny.
    }
    it->second = entry;
    return;
  }
  if (shard.map.size() >= per_shard_) {
    MakeRoom(shard, entry.at);
  }
  shard.map.emplace(Key{*key.limit, std::string(key.key)}, entry);
}

// Drops every entry that has expired at `now`; if none has, the one that expires first.
void DenyCache::MakeRoom(Shard& shard, Timestamp now) {
  auto first = shard.map.end();
  for (auto it = shard.map.begin(); it != shard.map.end();) {
    if (it->second.until <= now) {
      shard.map.erase(it++);
      continue;
    }
    if (first == shard.map.end() || it->second.until < first->second.until) {
      first = it;
    }
    ++it;
  }
  if (shard.map.size() >= per_shard_ && first != shard.map.end()) {
    shard.map.erase(first);
  }
}

void DenyCache::Forget(const Limit& limit, std::string_view key) {
  const KeyRef ref{&limit, key};
  const size_t hash = Hash{}(ref);
  Shard& shard = ShardOf(hash);
  MutexLock lock(shard.mu);
  epoch_.fetch_add(1, std::memory_order_acq_rel);
  if (auto it = shard.map.find(ref, hash); it != shard.map.end()) {
    shard.map.erase(it);
  }
}

size_t DenyCache::size() const {
  size_t n = 0;
  for (const Shard& shard : shards_) {
    MutexLock lock(shard.mu);
    n += shard.map.size();
  }
  return n;
}

}  // namespace sluice::internal
