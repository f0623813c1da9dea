#pragma once

// The gets/cas loops a MemcachedStore decision is made of, one limit and one key each: read
// the item, run the algorithm (sluice/algorithms.h), the give-back (sluice/give_back.h) or the
// settle (sluice/settle.h) on its state here, and write the new state back only if the item is as
// it was read (cas; add for a key with no item). A write that loses to another writer reads and
// tries again, at most `retries` times and until the call's deadline, then fails with
// ResourceExhausted
// ("contention"), naming the limit and the key: no outage, so no failure policy decides it.
//
// Thread-compatible, as the MemcachedConnection they are given; the counters are atomic.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

#include "sluice/algorithms.h"
#include "sluice/give_back.h"
#include "sluice/limit.h"
#include "sluice/settle.h"
#include "src/memcached/connection.h"

namespace sluice::internal {

// A limit's item as read: its state (a new key's when there is no item) and cas unique.
struct ReadItem {
  AnyState state;
  std::optional<uint64_t> cas;  // nullopt: no item (write with add).
  // ReadAdopting: the index in ItemTarget::earlier of the item `state` was converted from.
  std::optional<size_t> adopted = std::nullopt;
};

struct CasCounters {
  std::atomic<uint64_t> conflicts{0};  // Writes that lost and were tried again.
  std::atomic<uint64_t> exhausted{0};  // Loops that gave up after `retries`.
};

struct CasSettings {
  int retries = 32;
  Micros expiry_margin{0};
  CasCounters* counters = nullptr;  // Required.
  // A retry that would start after this fails with DeadlineExceeded instead (each operation
  // is bounded by libmemcached's own timeout): the call's deadline.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

// One limit on one key, in the store's naming (src/memcached/keys.h).
struct ItemTarget {
  const Limit* limit = nullptr;
  std::string item_key;
  // The limit's earlier figures (LimitedKey::before, newest first) and their items' keys.
  std::vector<std::pair<Limit, std::string>> earlier = {};
};

absl::StatusOr<ReadItem> ReadState(MemcachedConnection& connection, const ItemTarget& target);

// ReadState, and for an item not there, the newest of the target's earlier items that is,
// converted to the limit's figures (ConvertState, with the largest debt the store keeps) and
// moved: written as the new item (add: of two servers adopting at once, one writes it and the
// other reads it), the earlier items deleted (ForgetEarlier), so that a change back finds the
// state where it moved, and the new item read back. A key keeps what it used through a
// change of limit.
absl::StatusOr<ReadItem> ReadAdopting(MemcachedConnection& connection, const ItemTarget& target,
                                      Timestamp now, const CasSettings& settings);

// Deletes every earlier item of `target` (best effort: one left behind only expires): after a
// state was moved from one, and on a reset, which would otherwise find it.
void ForgetEarlier(MemcachedConnection& connection, const ItemTarget& target);

// Decides `cost` at `now` on the target, starting from `first` (a read already made), and
// writes the state when allowed with cost > 0. Sets `charge` to what was charged (units 0 when
// nothing was). A denial writes nothing.
absl::StatusOr<Decision> ChargeState(MemcachedConnection& connection, const ItemTarget& target,
                                     int64_t cost, Timestamp now, ReadItem first,
                                     const CasSettings& settings, Charge& charge);

// Gives `charge` back on the target at `now` (nothing to do when the item has gone: its charge
// went with it).
absl::Status GiveBackState(MemcachedConnection& connection, const ItemTarget& target,
                           const Charge& charge, Timestamp now, const CasSettings& settings);

// Settles `settlement` on the target at `now` (sluice::Settle on the item's state), starting
// from `first` (a read already made), and writes the state when the settle changed it (a key
// with no item and nothing to give back writes nothing). REQUIRES: ValidateSettlement is OK
// and max_debt is at most MaxDebt(limit) (src/memory/compact_state.h), so that the state in
// debt is one DecodeItem reads back.
absl::StatusOr<Settled> SettleState(MemcachedConnection& connection, const ItemTarget& target,
                                    const Settlement& settlement, Timestamp now, ReadItem first,
                                    const CasSettings& settings);

}  // namespace sluice::internal
