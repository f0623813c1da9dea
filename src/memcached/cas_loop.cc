#include "src/memcached/cas_loop.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <utility>

#include "fmt/format.h"

#include "src/memcached/item.h"

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

absl::StatusOr<Decision> ChargeState(MemcachedConnection& connection, const ItemTarget& target,
                                     int64_t cost, Timestamp now, ReadItem first,
                                     const CasSettings& settings, Charge& charge) {
  charge = Charge{};
  ReadItem read = std::move(first);
  for (int attempt = 0; attempt <= settings.retries; ++attempt) {
    if (attempt > 0) {
      if (absl::Status s = BeforeRetry(target, settings, attempt); !s.ok()) {
        return s;
      }
      absl::StatusOr<ReadItem> again = ReadState(connection, target);
      if (!again.ok()) {
        return again.status();
      }
      read = *std::move(again);
    }
    AnyState state = read.state;
    const Decision decision = Decide(*target.limit, state, now, cost);
    if (!decision.allowed || cost == 0) {
      return decision;
    }
    absl::StatusOr<bool> written =
        WriteState(connection, target, read, state, decision.reset_after, settings);
    if (!written.ok()) {
      return written.status();
    }
    if (*written) {
      charge = ChargeOf(*target.limit, state, now, cost);
      return decision;
    }
  }
  return Exhausted(target, settings);
}

absl::Status GiveBackState(MemcachedConnection& connection, const ItemTarget& target,
                           const Charge& charge, Timestamp now, const CasSettings& settings) {
  for (int attempt = 0; attempt <= settings.retries; ++attempt) {
    if (attempt > 0) {
      if (absl::Status s = BeforeRetry(target, settings, attempt); !s.ok()) {
        return s;
      }
    }
    absl::StatusOr<ReadItem> read = ReadState(connection, target);
    if (!read.ok()) {
      return read.status();
    }
    if (!read->cas) {
      return absl::OkStatus();  // Expired or evicted: the charge went with the item.
    }
    AnyState state = read->state;
    GiveBack(*target.limit, state, now, charge);
    if (state == read->state) {
      return absl::OkStatus();
    }
    AnyState query = state;  // Its horizon after the give-back, for the item's exptime.
    const Decision after = Decide(*target.limit, query, now, 0);
    absl::StatusOr<bool> written =
        WriteState(connection, target, *read, state, after.reset_after, settings);
    if (!written.ok()) {
      return written.status();
    }
    if (*written) {
      return absl::OkStatus();
    }
  }
  return Exhausted(target, settings);
}

absl::StatusOr<Settled> SettleState(MemcachedConnection& connection, const ItemTarget& target,
                                    const Settlement& settlement, Timestamp now, ReadItem first,
                                    const CasSettings& settings) {
  ReadItem read = std::move(first);
  for (int attempt = 0; attempt <= settings.retries; ++attempt) {
    if (attempt > 0) {
      if (absl::Status s = BeforeRetry(target, settings, attempt); !s.ok()) {
        return s;
      }
      absl::StatusOr<ReadItem> again = ReadState(connection, target);
      if (!again.ok()) {
        return again.status();
      }
      read = *std::move(again);
    }
    AnyState state = read.state;
    const Settled settled = Settle(*target.limit, state, now, settlement);
    if (state == read.state) {
      return settled;  // Nothing to give back nor to charge: nothing to write.
    }
    absl::StatusOr<bool> written =
        WriteState(connection, target, read, state, settled.after.reset_after, settings);
    if (!written.ok()) {
      return written.status();
    }
    if (*written) {
      return settled;
    }
  }
  return Exhausted(target, settings);
}

}  // namespace sluice::internal
