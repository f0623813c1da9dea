#include "src/memcached/cas_loop.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <utility>

#include "fmt/format.h"

#include "sluice/convert.h"
#include "sluice/settle.h"
#include "src/memcached/item.h"
#include "src/memory/compact_state.h"

namespace sluice::internal {
namespace {

// Writes `state` where `read` was read: true when written, false when another writer came
// first (the caller reads again).
absl::StatusOr<bool> WriteState(MemcachedConnection& connection, const ItemTarget& target,
                                const ReadItem& read, const AnyState& state, Micros reset_after,
                                const CasSettings& settings) {
  const std::string value = EncodeItem(state);
  const int64_t exptime = ExptimeOf(reset_after, settings.expiry_margin);
  if (read.cas) {
    return connection.Cas(target.item_key, value, exptime, *read.cas);
  }
  return connection.Add(target.item_key, value, exptime);
}

// Before the retry after the `attempt`th lost write: a random wait of up to 10 us x 2^attempt
// (at most 640 us), so that writers that collided spread out instead of colliding again in
// step. Without it, 16 calls in flight on one hot key lost 32 rounds in a row about once per
// thousand calls (bench/memcached/run.sh); the jitter's randomness decides no figure.
void BackOff(int attempt) {
  thread_local std::minstd_rand random(
      static_cast<unsigned>(std::hash<std::thread::id>()(std::this_thread::get_id())));
  const int ceiling_us = 10 << std::min(attempt, 6);
  std::this_thread::sleep_for(
      std::chrono::microseconds(std::uniform_int_distribution<int>(0, ceiling_us)(random)));
}

// The retry `attempt` may start: OK, or DeadlineExceeded once the call's deadline has passed.
absl::Status BeforeRetry(const ItemTarget& target, const CasSettings& settings, int attempt) {
  settings.counters->conflicts.fetch_add(1, std::memory_order_relaxed);
  BackOff(attempt - 1);
  if (std::chrono::steady_clock::now() >= settings.deadline) {
    settings.counters->exhausted.fetch_add(1, std::memory_order_relaxed);
    return absl::ResourceExhaustedError(fmt::format(
        "memcached: contention: the call's timeout passed while {} on item '{}' was being "
        "retried after {} cas conflicts",
        target.limit->ToString(), target.item_key, attempt));
  }
  return absl::OkStatus();
}

absl::Status Exhausted(const ItemTarget& target, const CasSettings& settings) {
  settings.counters->exhausted.fetch_add(1, std::memory_order_relaxed);
  return absl::ResourceExhaustedError(fmt::format(
      "memcached: contention: cas retries exhausted: {} on item '{}' was changed by other "
      "writers {} times in a row",
      target.limit->ToString(), target.item_key, settings.retries + 1));
}

}  // namespace

absl::StatusOr<ReadItem> ReadState(MemcachedConnection& connection, const ItemTarget& target) {
  absl::StatusOr<std::optional<MemcachedItem>> item = connection.Gets(target.item_key);
  if (!item.ok()) {
    return item.status();
  }
  if (!item->has_value()) {
    return ReadItem{.state = InitialState(target.limit->algorithm()), .cas = std::nullopt};
  }
  absl::StatusOr<AnyState> state = DecodeItem(*target.limit, (*item)->value, target.item_key);
  if (!state.ok()) {
    return state.status();
  }
  return ReadItem{.state = *std::move(state), .cas = (*item)->cas};
}

absl::StatusOr<ReadItem> ReadAdopting(MemcachedConnection& connection, const ItemTarget& target,
                                      Timestamp now, const CasSettings& settings) {
  absl::StatusOr<ReadItem> read = ReadState(connection, target);
  if (!read.ok() || read->cas || target.earlier.empty()) {
    return read;
  }
  for (size_t i = 0; i < target.earlier.size(); ++i) {
    const auto& [limit, key] = target.earlier[i];
    absl::StatusOr<ReadItem> old = ReadState(connection, {.limit = &limit, .item_key = key});
    if (!old.ok()) {
      return old.status();
    }
    if (!old->cas) {
      continue;
    }
    // Moved now, whatever this call decides: the usage converted at its first decision under
    // the new figures, as the memory store does, not again at each later one.
    const AnyState moved =
        ConvertState(limit, old->state, *target.limit, now, MaxDebt(*target.limit));
    if (moved != read->state) {
      AnyState query = moved;
      const Micros reset_after = Decide(*target.limit, query, now, 0).reset_after;
      // Lost to another server adopting it at once: its item is the one to read.
      absl::StatusOr<bool> added =
          WriteState(connection, target, *read, moved, reset_after, settings);
      if (!added.ok()) {
        return added.status();
      }
    }
    ForgetEarlier(connection, target);
    read = ReadState(connection, target);
    if (read.ok()) {
      read->adopted = i;
    }
    return read;
  }
  return read;
}

void ForgetEarlier(MemcachedConnection& connection, const ItemTarget& target) {
  for (const auto& [limit, key] : target.earlier) {
    connection.Delete(key).IgnoreError();
  }
}

namespace {

// What one round of a read-modify-write makes of the state it read: its answer, the state to
// write and the horizon that sets the item's exptime. A state equal to the one read writes
// nothing: the answer stands as it is.
template <typename Answer>
struct Change {
  AnyState state;
  Answer answer{};
  Micros reset_after{0};
};

// The loop every change of an item runs: read it (or take `first`, the read the caller made),
// compute the Change, write it with cas (add for an item not there), and on a lost write wait
// (BeforeRetry) and go round again from a fresh read, up to settings.retries times.
template <typename Answer, typename Compute>
absl::StatusOr<Answer> ReadModifyWrite(MemcachedConnection& connection, const ItemTarget& target,
                                       std::optional<ReadItem> first, const CasSettings& settings,
                                       Compute compute) {
  for (int attempt = 0; attempt <= settings.retries; ++attempt) {
    if (attempt > 0) {
      if (absl::Status s = BeforeRetry(target, settings, attempt); !s.ok()) {
        return s;
      }
    }
    if (attempt > 0 || !first) {
      absl::StatusOr<ReadItem> read = ReadState(connection, target);
      if (!read.ok()) {
        return read.status();
      }
      first = *std::move(read);
    }
    Change<Answer> change = compute(*first);
    if (change.state == first->state) {
      return std::move(change.answer);
    }
    absl::StatusOr<bool> written =
        WriteState(connection, target, *first, change.state, change.reset_after, settings);
    if (!written.ok()) {
      return written.status();
    }
    if (*written) {
      return std::move(change.answer);
    }
  }
  return Exhausted(target, settings);
}

}  // namespace

absl::StatusOr<Decision> ChargeState(MemcachedConnection& connection, const ItemTarget& target,
                                     int64_t cost, Timestamp now, ReadItem first,
                                     const CasSettings& settings, Charge& charge) {
  charge = Charge{};
  absl::StatusOr<std::pair<Decision, Charge>> charged =
      ReadModifyWrite<std::pair<Decision, Charge>>(
          connection, target, std::move(first), settings, [&](const ReadItem& read) {
            Change<std::pair<Decision, Charge>> change{.state = read.state};
            AnyState state = read.state;
            const Decision decision = Decide(*target.limit, state, now, cost);
            change.answer.first = decision;
            if (decision.allowed && cost > 0) {  // Else nothing to write, as in every store.
              change.state = state;
              change.answer.second = ChargeOf(*target.limit, state, now, cost);
              change.reset_after = decision.reset_after;
            }
            return change;
          });
  if (!charged.ok()) {
    return charged.status();
  }
  charge = charged->second;
  return charged->first;
}

absl::Status GiveBackState(MemcachedConnection& connection, const ItemTarget& target,
                           const Charge& charge, Timestamp now, const CasSettings& settings) {
  // No first read: the charge being given back was written after any read the caller holds.
  return ReadModifyWrite<bool>(connection, target, std::nullopt, settings,
                               [&](const ReadItem& read) {
                                 Change<bool> change{.state = read.state};
                                 if (!read.cas) {
                                   return change;  // Expired or evicted: the charge went with it.
                                 }
                                 GiveBack(*target.limit, change.state, now, charge);
                                 // Its horizon after the give-back, for the item's exptime.
                                 AnyState query = change.state;
                                 change.reset_after =
                                     Decide(*target.limit, query, now, 0).reset_after;
                                 return change;
                               })
      .status();
}

absl::StatusOr<Settled> SettleState(MemcachedConnection& connection, const ItemTarget& target,
                                    const Settlement& settlement, Timestamp now, ReadItem first,
                                    const CasSettings& settings) {
  return ReadModifyWrite<Settled>(
      connection, target, std::move(first), settings, [&](const ReadItem& read) {
        Change<Settled> change{.state = read.state};
        change.answer = Settle(*target.limit, change.state, now, settlement);
        change.reset_after = change.answer.after.reset_after;
        return change;
      });
}

}  // namespace sluice::internal
