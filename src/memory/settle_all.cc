// MemoryStore's settling: ChargeAllAsync, SettleAllAsync and ResetAllAsync, each under the
// shard locks of all its keys at once (Held), so that a settle over several limits is all or
// nothing, as a decision over them is.

#include <algorithm>
#include <variant>

#include "fmt/format.h"

#include "sluice/give_back.h"
#include "sluice/memory_store.h"
#include "sluice/settle.h"
#include "src/memory/compact_state.h"
#include "src/memory/store_parts.h"

namespace sluice {
namespace {

// Runs `f(view, targets)` with the tables of `requests` found and every shard lock held,
// looking again while a table is made or retired meanwhile.
template <typename Parts, typename F>
auto WithHeld(Parts& tables, std::span<const LimitedKey> requests, Timestamp now, F f)
    -> decltype(f(std::declval<const Registry::View&>(), std::span<const Target>{})) {
  absl::InlinedVector<Target, 4> targets;
  absl::InlinedVector<SpinLock*, 4> locks;
  for (int lookup = 0; lookup < kMaxLookups; ++lookup) {
    const Registry::View& view = tables.registry().Pin();
    absl::StatusOr<bool> found = tables.FindAll(view, requests, now, targets, locks);
    if (!found.ok()) {
      return found.status();
    }
    if (!*found) {
      continue;  // A table was made: pin the View that holds it.
    }
    const Held held(locks);
    if (std::any_of(targets.begin(), targets.end(),
                    [](const Target& t) { return t.table->retired(); })) [[unlikely]] {
      continue;
    }
    return f(view, std::span<const Target>(targets));
  }
  return Churning(*requests[0].limit);
}

// A max_debt the store cannot hold exactly for `limit` (compact_state.h's MaxDebt).
absl::Status CheckDebt(const Limit& limit, const Settlement& settlement) {
  if (const int64_t most = internal::MaxDebt(limit); settlement.max_debt > most) {
    return absl::InvalidArgumentError(
        fmt::format("max_debt {} is above the {} the memory store holds for {}",
                    settlement.max_debt, most, limit.ToString()));
  }
  return absl::OkStatus();
}

}  // namespace

void MemoryStore::ChargeAllAsync(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                                 std::span<Decision> each, std::span<Charge> charges,
                                 DecideDone done) {
  assert(each.size() == requests.size() && charges.size() == requests.size());
  if (absl::Status s = ValidateRequest(requests.size(), cost); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  if (absl::Status s = CheckTime(now); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  if (absl::Status s = tables_->AdoptEarlier(requests, now); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  std::move(done)(WithHeld(
      *tables_, requests, now,
      [&](const Registry::View& view, std::span<const Target> targets) -> absl::StatusOr<Decision> {
        size_t full = 0;
        const std::optional<Decision> d =
            DecideHeldAll(targets, cost, now, view.tables, each, full);
        if (!d) {
          return StoreFull(tables_->max_keys(), *requests[full].limit, requests[full].key);
        }
        for (size_t i = 0; i < targets.size(); ++i) {
          charges[i] = Charge{};
          if (d->allowed && cost > 0) {
            // Admitted with a cost: the key is stored, its state the decision's.
            const std::optional<AnyState> state = targets[i].table->StateHeld(targets[i].key);
            assert(state.has_value());
            charges[i] = ChargeOf(*requests[i].limit, *state, now, cost);
          }
        }
        return *d;
      }));
}

void MemoryStore::SettleAllAsync(std::span<const LimitedKey> requests,
                                 std::span<const Settlement> settlements, std::string_view once,
                                 Timestamp once_until, Timestamp now, std::span<Settled> settled,
                                 StatusDone done) {
  if (absl::Status s = ValidateSettleAll(requests.size(), settlements, once, settled.size());
      !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  if (absl::Status s = CheckTime(now); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (absl::Status s = CheckDebt(*requests[i].limit, settlements[i]); !s.ok()) {
      std::move(done)(std::move(s));
      return;
    }
  }
  if (absl::Status s = tables_->AdoptEarlier(requests, now); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  // Claimed before the keys' locks, and taken back if the settle fails: a replay racing the
  // first settle finds the claim and is refused, whichever thread gets the locks first.
  if (!once.empty()) {
    if (absl::Status s = tables_->claims().Claim(once, once_until, now); !s.ok()) {
      std::move(done)(std::move(s));
      return;
    }
  }
  absl::Status status = WithHeld(
      *tables_, requests, now,
      [&](const Registry::View& view, std::span<const Target> targets) -> absl::Status {
        // Each limit's new state, worked out first: nothing is stored until every new key has
        // room, so that a full store changes nothing.
        absl::InlinedVector<std::optional<AnyState>, 4> changed(targets.size());
        absl::InlinedVector<bool, 4> is_new(targets.size(), false);
        for (size_t i = 0; i < targets.size(); ++i) {
          const Limit& limit = *requests[i].limit;
          std::optional<AnyState> stored = targets[i].table->StateHeld(targets[i].key);
          is_new[i] = !stored.has_value();
          AnyState state = stored ? *std::move(stored) : InitialState(limit.algorithm());
          const AnyState before = state;
          settled[i] = Settle(limit, state, now, settlements[i]);
          if (!(state == before)) {
            assert(internal::Storable(limit, state));
            changed[i] = std::move(state);
          }
        }
        absl::InlinedVector<size_t, 4> made;
        for (size_t i = 0; i < targets.size(); ++i) {
          if (!changed[i] || !is_new[i]) {
            continue;
          }
          const size_t index = ShardOf(targets[i].key.hash);
          const auto claimed = static_cast<int64_t>(std::count(made.begin(), made.end(), index));
          if (targets[i].table->MakeRoomHeld(targets[i].key, now, claimed, view.tables) ==
              Table::Room::kNone) {
            return StoreFull(tables_->max_keys(), *requests[i].limit, requests[i].key);
          }
          made.push_back(index);
        }
        for (size_t i = 0; i < targets.size(); ++i) {
          if (changed[i]) {
            targets[i].table->PutHeld(targets[i].key, *changed[i]);
          }
        }
        return absl::OkStatus();
      });
  if (!status.ok() && !once.empty()) {
    tables_->claims().Release(once);
  }
  std::move(done)(std::move(status));
}

void MemoryStore::ResetAllAsync(std::span<const LimitedKey> requests, Timestamp now,
                                StatusDone done) {
  if (absl::Status s = ValidateRequest(requests.size(), 0); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  if (absl::Status s = CheckTime(now); !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  // The earlier figures first: once they are forgotten, nothing can be adopted back.
  tables_->ForgetEarlier(requests);
  std::move(done)(WithHeld(*tables_, requests, now,
                           [&](const Registry::View&, std::span<const Target> targets) {
                             for (const Target& target : targets) {
                               target.table->EraseHeld(target.key);
                             }
                             return absl::OkStatus();
                           }));
}

size_t MemoryStore::OnceClaimCount() const { return tables_->claims().size(); }

}  // namespace sluice
