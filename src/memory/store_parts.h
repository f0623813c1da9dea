#pragma once

// The memory store's parts (MemoryStore::Tables: the key budget, the leases, the registry of
// limit tables) and the steps its calls share: the checks of a time and a limit, the errors
// of a full store, and the shard locks a call over several limits holds (Held). Shared by
// memory_store.cc (decisions, snapshots) and settle_all.cc (charges, settles, resets).
// Thread-safety as MemoryStore's.

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "absl/container/inlined_vector.h"
#include "absl/strings/escaping.h"
#include "fmt/format.h"

#include "sluice/memory_store.h"
#include "src/core/mutex.h"
#include "src/memory/eviction.h"
#include "src/memory/fingerprint.h"
#include "src/memory/leases.h"
#include "src/memory/once_claims.h"
#include "src/memory/registry.h"
#include "src/memory/shards.h"
#include "src/memory/table.h"

namespace sluice {

// The internal names the store's files use, as memory_store.cc always has.
using internal::Budget;
using internal::Fingerprint;
using internal::HashedKey;
using internal::Mode;
using internal::Registry;
using internal::ShardOf;
using internal::SpinLock;
using internal::Table;

inline absl::Status CheckTime(Timestamp now) {
  if (now < MemoryStore::kEarliest || now >= MemoryStore::kLatest) [[unlikely]] {
    return absl::InvalidArgumentError(
        fmt::format("time {}us is outside the memory store's range, 1970 to 2200",
                    now.time_since_epoch().count()));
  }
  return absl::OkStatus();
}

// The memory store's own bound on what a limit may ask of it; see kMaxSlidingLogLimit.
inline absl::Status CheckMemoryLimit(const Limit& limit) {
  if (limit.algorithm() == Algorithm::kSlidingLog &&
      limit.limit() > MemoryStore::kMaxSlidingLogLimit) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: the memory store keeps sliding_log limits of at most {} (a log entry per admitted "
        "timestamp per key); use sliding_buckets for a sliding window over more",
        limit.ToString(), MemoryStore::kMaxSlidingLogLimit));
  }
  return absl::OkStatus();
}

// A new key refused: see "Bounded memory" in MemoryStore's comment.
inline absl::Status StoreFull(size_t max_keys, const Limit& limit, std::string_view key) {
  return absl::ResourceExhaustedError(fmt::format(
      "the memory store is full ({} keys, --max-keys) and none has reset to make room for key "
      "'{}' of {}",
      max_keys, absl::CHexEscape(absl::string_view(key.data(), std::min<size_t>(key.size(), 64))),
      limit.ToString()));
}

// The fingerprint of compact keys, if asked for (MemoryStoreOptions).
inline std::optional<Fingerprint> CompactKeys(const MemoryStoreOptions& options) {
  if (!options.compact_keys) {
    return std::nullopt;
  }
  if (const uint64_t secret = options.compact_keys_secret_for_testing; secret != 0) {
    return Fingerprint(secret, ~secret);
  }
  return Fingerprint::Random();
}

// The store's parts: the key budget, the leases, and the registry of limit tables.
class MemoryStore::Tables {
 public:
  explicit Tables(MemoryStoreOptions options)
      : max_keys_(options.max_keys),
        compact_keys_(CompactKeys(options)),
        budget_(options.max_keys),
        leases_(options.max_leases),
        registry_(kMaxLimits, budget_, compact_keys_ ? &*compact_keys_ : nullptr),
        claims_(options.max_once_claims != 0 ? options.max_once_claims : internal::kMaxOnceClaims) {
  }

  size_t max_keys() const { return max_keys_; }
  bool compact_keys() const { return compact_keys_.has_value(); }
  const Budget& budget() const { return budget_; }
  internal::LeaseTable& leases() { return leases_; }
  internal::OnceClaims& claims() { return claims_; }
  const internal::LeaseTable& leases() const { return leases_; }
  Registry& registry() { return registry_; }

  // The table of `limit` in `view`; or null once one has been made (pin again and look).
  absl::StatusOr<Table*> Find(const Registry::View& view, const Limit& limit, Timestamp now) {
    if (Table* table = view.Find(limit); table != nullptr) [[likely]] {
      return table;
    }
    if (absl::Status s = CheckMemoryLimit(limit); !s.ok()) {
      return s;  // Refused once, when its table would be made: no cost on the hot path.
    }
    if (absl::Status s = registry_.Insert(limit, now); !s.ok()) {
      return s;
    }
    return nullptr;
  }

  // DecideAll's tables, each with its key and shard lock, found in `view`. False when a table
  // had to be made (pin again); InvalidArgument when a limit and key appear twice.
  template <typename Targets, typename Locks>
  absl::StatusOr<bool> FindAll(const Registry::View& view, std::span<const LimitedKey> requests,
                               Timestamp now, Targets& targets, Locks& locks) {
    targets.clear();
    locks.clear();
    for (const LimitedKey& r : requests) {
      absl::StatusOr<Table*> table = Find(view, *r.limit, now);
      if (!table.ok()) {
        return table.status();
      }
      if (*table == nullptr) {
        return false;
      }
      const HashedKey key{r.key, (*table)->KeyHash(r.key)};
      for (size_t j = 0; j < targets.size(); ++j) {
        // Two keys with one fingerprint (compact keys) are one state too.
        if (targets[j].table == *table &&
            (requests[j].key == r.key ||
             ((*table)->fingerprinted() && targets[j].key.hash == key.hash))) {
          // Deciding one state twice in one all-or-nothing request cannot be undone half-way.
          return absl::InvalidArgumentError(
              requests[j].key == r.key
                  ? fmt::format("limit {} on key '{}' appears twice", r.limit->ToString(), r.key)
                  : fmt::format("limit {}: keys '{}' and '{}' share a fingerprint (compact "
                                "keys) and cannot be charged together",
                                r.limit->ToString(), requests[j].key, r.key));
        }
      }
      targets.push_back({*table, key});
      locks.push_back(&(*table)->ShardLock(ShardOf(key.hash)));
    }
    return true;
  }

  // Before a call on `requests` (LimitedKey::before, adopt.cc): each key that holds no state
  // under its limit but holds some under one of its earlier figures is moved to its limit,
  // converted; nothing for requests without earlier figures. Errors: the store full, as for a
  // new key; a table churning; a converted state the table cannot hold.
  absl::Status AdoptEarlier(std::span<const LimitedKey> requests, Timestamp now);
  // Before a reset of `requests`: each key is forgotten under its limit's earlier figures too,
  // so that no later call adopts what the reset forgot.
  void ForgetEarlier(std::span<const LimitedKey> requests);

  size_t KeyCount() {
    size_t n = 0;
    ForEach([&](Table& table) { n += table.KeyCount(); });
    return n;
  }

  template <typename F>
  void ForEach(F f) {
    const std::shared_ptr<const Registry::View> view = registry_.Current();
    for (Table* table : view->tables) {
      f(*table);
    }
  }

 private:
  const size_t max_keys_;
  const std::optional<Fingerprint> compact_keys_;  // Set: compact keys (MemoryStoreOptions).
  Budget budget_;
  internal::LeaseTable leases_;
  Registry registry_;
  internal::OnceClaims claims_;  // The ids of settles (SettleAllAsync's `once`).
};

// A store call looks its tables up again when one it found was retired meanwhile, or it made
// one; each time another thread must have retired or made a table. Past this many tries (a
// table made and retired over and over at once), the call gives up.
constexpr int kMaxLookups = 64;

inline absl::Status Churning(const Limit& limit) {
  return absl::UnavailableError(
      fmt::format("the memory store's table for {} was retired {} times in a row; try again",
                  limit.ToString(), kMaxLookups));
}

// Whether any of `requests` names earlier figures (LimitedKey::before): then the call first
// adopts its keys' states from them (Tables::AdoptEarlier). Inline: it runs on every call.
inline bool AnyEarlier(std::span<const LimitedKey> requests) {
  return std::any_of(requests.begin(), requests.end(),
                     [](const LimitedKey& r) { return !r.before.empty(); });
}

// A request's key, with its limit's table.
struct Target {
  Table* table;
  HashedKey key;
};

// The shard locks of one DecideAll, held until the end of the call, however it ends.
class Held {
 public:
  // One global order (by address) for taking several shard locks, so two requests that share
  // shards can never wait on each other.
  explicit Held(absl::InlinedVector<SpinLock*, 4>& locks) ABSL_NO_THREAD_SAFETY_ANALYSIS
      : locks_(locks) {
    std::sort(locks_.begin(), locks_.end());
    locks_.erase(std::unique(locks_.begin(), locks_.end()), locks_.end());
    for (SpinLock* lock : locks_) {
      lock->Lock();
    }
  }
  ~Held() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (SpinLock* lock : locks_) {
      lock->Unlock();
    }
  }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;

 private:
  absl::InlinedVector<SpinLock*, 4>& locks_;
};

// DecideAll's decisions, made while Held holds every target's shard: a dry run of each, then
// room made for the new keys, then the change on all of them if all are allowed and have room,
// or on none. Empty when a new key found no room: the index of its target in `full`.
inline std::optional<Decision> DecideHeldAll(std::span<const Target> targets, int64_t cost,
                                             Timestamp now, internal::Others others,
                                             std::span<Decision> each, size_t& full) {
  bool all_allowed = true;
  for (size_t i = 0; i < targets.size(); ++i) {
    each[i] = targets[i].table->DecideHeld(targets[i].key, cost, now, Mode::kDryRun);
    all_allowed = all_allowed && each[i].allowed;
  }
  // The shard index of each new key given room so far: they count against the bound together.
  absl::InlinedVector<size_t, 4> made;
  for (size_t i = 0; all_allowed && cost > 0 && i < targets.size(); ++i) {
    // Dropping a reset key changes no decision, even one of this request's own keys.
    const size_t index = ShardOf(targets[i].key.hash);
    const auto claimed = static_cast<int64_t>(std::count(made.begin(), made.end(), index));
    switch (targets[i].table->MakeRoomHeld(targets[i].key, now, claimed, others)) {
      case Table::Room::kStored:
        break;
      case Table::Room::kMade:
        made.push_back(index);
        break;
      case Table::Room::kNone:
        full = i;
        return std::nullopt;
    }
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    if (all_allowed) {
      each[i] = targets[i].table->DecideHeld(targets[i].key, cost, now, Mode::kApply);
    } else if (each[i].allowed) {
      // Nothing is recorded, so this limit's honest figures are those of a cost-0 query.
      each[i] = targets[i].table->DecideHeld(targets[i].key, 0, now, Mode::kDryRun);
    }
  }
  return Combine(each);
}

}  // namespace sluice
