// The memory store's side of a change of limit (LimitedKey::before, docs/algorithms.md "A
// change of limit"): a key's state moves from the table of its limit's earlier figures to the
// table of its figures now, converted, the first time a call finds it missing there.
//
// The state is moved, not copied: were it copied, a reload that changed the limit back would
// find the stale copy first. The move holds both tables' shard locks for the key, so no call
// sees the key in neither table or in both; a copy some call left under the earlier figures
// after the move is dropped when found.

#include <algorithm>
#include <optional>

#include "fmt/format.h"

#include "sluice/convert.h"
#include "src/memory/compact_state.h"
#include "src/memory/store_parts.h"

namespace sluice {
namespace {

enum class Step { kDone, kLookAgain };

// Moves `r.key` into `to` from the first table of r.before that holds it, if `to` does not.
// REQUIRES: `to` is r.limit's table in `view`.
absl::StatusOr<Step> AdoptOne(const Registry::View& view, Table& to, const LimitedKey& r,
                              Timestamp now, size_t max_keys) {
  const HashedKey key{r.key, to.KeyHash(r.key)};
  for (const Limit& earlier : r.before) {
    Table* from = view.Find(earlier);
    if (from == nullptr || from == &to) {
      continue;  // No table: every key of those figures has reset (or none was ever made).
    }
    // Each table hashes the key its own way (with compact keys, some keep fingerprints and
    // some do not): the two shards may differ. Held takes them in its global order.
    const HashedKey old_key{r.key, from->KeyHash(r.key)};
    absl::InlinedVector<SpinLock*, 4> locks = {&to.ShardLock(ShardOf(key.hash)),
                                               &from->ShardLock(ShardOf(old_key.hash))};
    const Held held(locks);
    if (to.retired() || from->retired()) [[unlikely]] {
      return Step::kLookAgain;
    }
    if (to.StateHeld(key).has_value()) {
      // Decided under these figures already. A copy under the earlier ones was left by a call
      // that still used them (a request in flight across the reload, a receipt settled on the
      // figures it was issued under): the state in force wins, and the copy goes, so that a
      // change back to those figures cannot find it.
      from->EraseHeld(old_key);
      continue;
    }
    const std::optional<AnyState> state = from->StateHeld(old_key);
    if (!state) {
      continue;
    }
    const AnyState moved =
        ConvertState(earlier, *state, *r.limit, now, internal::MaxDebt(*r.limit));
    // Erased first, so that the key it frees can make the room for the move in a full store;
    // put back where it was if none is found even so.
    from->EraseHeld(old_key);
    if (moved == InitialState(r.limit->algorithm())) {
      return Step::kDone;  // It had reset: the key is new under these figures.
    }
    if (!internal::Storable(*r.limit, moved) ||
        to.MakeRoomHeld(key, now, /*claimed=*/0, view.tables) == Table::Room::kNone) [[unlikely]] {
      from->PutHeld(old_key, *state);
      return internal::Storable(*r.limit, moved)
                 ? StoreFull(max_keys, *r.limit, r.key)
                 : absl::InternalError(fmt::format(
                       "the state of key '{}' converted from {} to {} does not fit the memory "
                       "store's table; it stays under {}",
                       r.key, earlier.ToString(), r.limit->ToString(), earlier.ToString()));
    }
    to.PutHeld(key, moved);
    return Step::kDone;
  }
  return Step::kDone;
}

}  // namespace

absl::Status MemoryStore::Tables::AdoptEarlier(std::span<const LimitedKey> requests,
                                               Timestamp now) {
  for (const LimitedKey& r : requests) {
    if (r.before.empty()) [[likely]] {
      continue;
    }
    bool done = false;
    for (int lookup = 0; lookup < kMaxLookups && !done; ++lookup) {
      const Registry::View& view = registry_.Pin();
      // The cheap test first: while no table of the earlier figures is in force, nothing can
      // be adopted, and the call pays no lock for it.
      if (std::none_of(r.before.begin(), r.before.end(),
                       [&](const Limit& l) { return view.Find(l) != nullptr; })) {
        done = true;
        break;
      }
      absl::StatusOr<Table*> to = Find(view, *r.limit, now);
      if (!to.ok()) {
        return to.status();
      }
      if (*to == nullptr) {
        continue;  // Made: pin the View that holds it.
      }
      absl::StatusOr<Step> step = AdoptOne(view, **to, r, now, max_keys_);
      if (!step.ok()) {
        return step.status();
      }
      done = *step == Step::kDone;
    }
    if (!done) {
      return Churning(*r.limit);
    }
  }
  return absl::OkStatus();
}

void MemoryStore::Tables::ForgetEarlier(std::span<const LimitedKey> requests) {
  for (const LimitedKey& r : requests) {
    for (const Limit& earlier : r.before) {
      const Registry::View& view = registry_.Pin();
      Table* from = view.Find(earlier);
      if (from == nullptr) {
        continue;
      }
      const HashedKey key{r.key, from->KeyHash(r.key)};
      const internal::SpinLockHolder lock(from->ShardLock(ShardOf(key.hash)));
      from->EraseHeld(key);  // A retired table holds no key: erasing there changes nothing.
    }
  }
}

}  // namespace sluice
