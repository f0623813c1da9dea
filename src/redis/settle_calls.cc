// RedisStore::Impl's settles and resets (Store::SettleAll and ResetAll; sluice/settle.h): one
// script call per Redis Cluster slot (one in all outside a cluster), the `once` claim going
// with the call of the first limit's slot, and the failure policy's part.
//
// Why the claim goes first, alone: a settle must change nothing when its `once` is claimed
// already, and a script call is atomic on one slot only. So the first slot's call claims and
// settles its limits in one step; the other slots are asked only once it has succeeded, all
// at once. A later slot that fails then leaves its limits as they were: units it should have
// given back stay charged (fewer admitted, never more), and an extra charge it should have
// made is made by the `local` policy or lost (RedisStoreStats::settle_units_lost).

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"

#include "src/redis/call.h"
#include "src/redis/errors.h"
#include "src/redis/keys.h"
#include "src/redis/redis_store_impl.h"

namespace sluice {

using internal::HashSlot;
using internal::IsStoreUnavailable;

// One slot's share of a settle or a reset.
struct RedisStore::Impl::SettlePart {
  int slot = -1;                      // -1 outside a cluster.
  std::vector<size_t> at;             // Where its limits stand in the caller's request.
  std::vector<Decision> each;         // What its call answered, per limit.
  std::vector<Settled> settled;       // What it did, per limit (settles).
  std::optional<absl::Status> error;  // Its call's failure.
};

// A settle (or a reset, without settlements), copied: the calls are made after the caller
// has returned. Its parts' calls complete on the I/O thread; once several are in flight,
// each writes its own part only and `open` counts them down.
struct RedisStore::Impl::Settle {
  std::vector<Limit> limits;
  std::vector<std::string> keys;
  std::vector<std::vector<Limit>> before;  // Each limit's earlier figures: a reset forgets them.
  std::vector<Settlement> settlements;     // Empty for a reset.
  std::string once;
  Timestamp once_until;
  Timestamp now;
  std::span<Settled> settled;  // The caller's, written once, by the answer.
  StatusDone done;
  std::vector<SettlePart> parts;  // The first limit's slot first, then ascending.
  std::atomic<size_t> open{0};
};

std::shared_ptr<RedisStore::Impl::Settle> RedisStore::Impl::NewSettle(
    std::span<const LimitedKey> requests, Timestamp now) {
  auto settle = std::make_shared<Settle>();
  absl::InlinedVector<int, 8> slots;
  for (const LimitedKey& r : requests) {
    settle->limits.push_back(*r.limit);
    settle->keys.emplace_back(r.key);
    settle->before.emplace_back(r.before.begin(), r.before.end());
    slots.push_back(options_.cluster ? HashSlot(RedisKey(*r.limit, r.key)) : -1);
    if (deny_cache_ != nullptr) {
      // Units may come back (and a reset frees them all): a denial known here may no longer
      // be Redis's. RecordDenial forgets them again when the call is answered.
      deny_cache_->Forget(*r.limit, r.key);
    }
  }
  settle->now = now;
  // One part per slot: the first limit's first (it carries the claim), then ascending.
  std::map<int, std::vector<size_t>> by_slot;
  for (size_t i = 0; i < slots.size(); ++i) {
    by_slot[slots[i]].push_back(i);
  }
  auto add = [&](int slot, const std::vector<size_t>& at) {
    settle->parts.push_back({.slot = slot,
                             .at = at,
                             .each = std::vector<Decision>(at.size()),
                             .settled = std::vector<Settled>(at.size()),
                             .error = std::nullopt});
  };
  add(slots[0], by_slot[slots[0]]);
  for (const auto& [slot, at] : by_slot) {
    if (slot != slots[0]) {
      add(slot, at);
    }
  }
  return settle;
}

void RedisStore::Impl::SubmitSettle(std::span<const LimitedKey> requests,
                                    std::span<const Settlement> settlements, std::string_view once,
                                    Timestamp once_until, Timestamp now, std::span<Settled> settled,
                                    StatusDone done) {
  std::shared_ptr<Settle> settle = NewSettle(requests, now);
  settle->settlements.assign(settlements.begin(), settlements.end());
  settle->once = once;
  settle->once_until = once_until;
  settle->settled = settled;
  settle->done = std::move(done);
  AskSettlePart(std::move(settle), 0);
}

void RedisStore::Impl::SubmitReset(std::span<const LimitedKey> requests, Timestamp now,
                                   StatusDone done) {
  if (options_.on_failure == FailurePolicy::kLocal) {
    // What an outage decided locally is forgotten too. A store that cannot reset (Unimplemented)
    // keeps it: its keys then hold what they held, which admits no more than before.
    local_.ResetAll(requests, now).IgnoreError();
  }
  std::shared_ptr<Settle> reset = NewSettle(requests, now);
  reset->done = std::move(done);
  const size_t parts = reset->parts.size();
  reset->open.store(parts, std::memory_order_relaxed);
  for (size_t i = 0; i < parts; ++i) {
    AskSettlePart(reset, i);
  }
}

// Queues part `i`'s call: a settle's (with the `once` claim on part 0), or a reset's.
void RedisStore::Impl::AskSettlePart(std::shared_ptr<Settle> settle, size_t i) {
  Settle& s = *settle;
  SettlePart& part = s.parts[i];
  const bool reset = s.settlements.empty();
  auto call = std::make_unique<Call>();
  call->mode = reset ? Call::Mode::kReset : Call::Mode::kSettle;
  call->settled = part.settled;
  call->slot = part.slot;
  FillCall(*call, 0, part.at.size(), s.now, part.each,
           [this, settle = std::move(settle), i](absl::StatusOr<Decision> r) mutable {
             OnSettlePart(std::move(settle), i, r.status());
           });
  if (!reset) {
    const bool once = i == 0 && !s.once.empty();
    const std::string once_key =
        once ? internal::OnceKey(options_.key_prefix, RedisKey(s.limits[0], s.keys[0]), s.once)
             : std::string();
    internal::AppendOnce(*call, once_key,
                         once ? std::optional<Timestamp>(s.once_until) : std::nullopt);
  }
  for (size_t a : part.at) {
    internal::AppendLimit(*call, options_.key_prefix, RedisKey(s.limits[a], s.keys[a]),
                          {.limit = &s.limits[a], .key = s.keys[a], .before = s.before[a]}, s.now);
    if (!reset) {
      internal::AppendSettlement(*call, s.settlements[a]);
    }
  }
  Enqueue(std::move(call));
}

// On the I/O thread (or the caller's, for a call answered before it was sent): part `i`'s
// call answered.
void RedisStore::Impl::OnSettlePart(std::shared_ptr<Settle> settle, size_t i, absl::Status status) {
  Settle& s = *settle;
  const bool reset = s.settlements.empty();
  if (!status.ok()) {
    s.parts[i].error = absl::Status(status.code(), status.message());
  }
  if (!reset && i == 0) {
    // The first part, with the claim: the others go only once it has succeeded.
    if (!status.ok()) {
      if (IsStoreUnavailable(status)) {  // Else refused (a claim held, a wrong key): no more.
        for (size_t p = 0; p < s.parts.size(); ++p) {
          SettleFailed(s, p, /*unavailable=*/true);
        }
      }
      AnswerSettle(s);
      return;
    }
    const size_t rest = s.parts.size() - 1;
    if (rest == 0) {
      AnswerSettle(s);
      return;
    }
    s.open.store(rest, std::memory_order_relaxed);
    for (size_t p = 1; p <= rest; ++p) {
      AskSettlePart(settle, p);
    }
    return;
  }
  if (!reset && !status.ok()) {
    SettleFailed(s, i, IsStoreUnavailable(status));
  }
  if (s.open.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    AnswerSettle(s);
  }
}

// A part that Redis did not settle: nothing was given back there (the units stay charged);
// its extra charges go to the `local` policy's store when Redis could not be reached
// (`unavailable`), or are lost.
void RedisStore::Impl::SettleFailed(Settle& s, size_t i, bool unavailable) {
  SettlePart& part = s.parts[i];
  for (size_t j = 0; j < part.at.size(); ++j) {
    const size_t a = part.at[j];
    const Settlement& wanted = s.settlements[a];
    const int64_t extra = wanted.units - wanted.charge.units;
    if (extra <= 0) {
      continue;
    }
    Settled local;
    if (unavailable && options_.on_failure == FailurePolicy::kLocal) {
      const LimitedKey request{&s.limits[a], s.keys[a]};
      const Settlement charge{.units = extra, .max_debt = wanted.max_debt};
      if (local_.SettleAll({&request, 1}, {&charge, 1}, "", s.once_until, s.now, {&local, 1})
              .ok()) {
        part.settled[j] = local;
      } else {
        local = {};
      }
    }
    settle_units_lost_.fetch_add(static_cast<uint64_t>(extra - local.charged),
                                 std::memory_order_relaxed);
  }
}

// Writes what every part did to the caller's `settled` and answers the first part's error in
// order (the claim's first), or OK.
void RedisStore::Impl::AnswerSettle(Settle& s) {
  absl::Status status;
  for (const SettlePart& part : s.parts) {
    for (size_t j = 0; j < part.at.size() && !s.settled.empty(); ++j) {
      s.settled[part.at[j]] = part.settled[j];
    }
    if (part.error && status.ok()) {
      status = *part.error;
    }
  }
  std::move(s.done)(std::move(status));
}

}  // namespace sluice
