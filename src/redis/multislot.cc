// RedisStore::Impl's requests over several cluster slots (multislot.h): split, charged part
// by part, unwound after a denial, answered once.
//
// The charging goes in one order for every request (ascending slot), each part only after the
// one before it has allowed. A request thus holds charges only on slots below the one it is
// asking, so two requests can never each hold a slot the other is asking for (in any order
// they could, and then be denied both, each by the other's charge, which is then given back).

#include "src/redis/multislot.h"

#include <algorithm>
#include <map>
#include <memory>
#include <utility>

#include "absl/container/inlined_vector.h"

#include "src/redis/keys.h"
#include "src/redis/redis_store_impl.h"

namespace sluice {
namespace internal {

std::vector<SplitPart> PartsBySlot(std::span<const int> slots) {
  std::map<int, SplitPart> by_slot;
  for (size_t i = 0; i < slots.size(); ++i) {
    SplitPart& part = by_slot[slots[i]];
    part.slot = slots[i];
    part.at.push_back(i);
  }
  std::vector<SplitPart> parts;
  parts.reserve(by_slot.size());
  for (auto& [slot, part] : by_slot) {
    part.each.resize(part.at.size());
    part.receipts.resize(part.at.size());
    parts.push_back(std::move(part));
  }
  return parts;
}

absl::StatusOr<Decision> Merge(Split& split) {
  if (split.error) {
    return *split.error;
  }
  for (const SplitPart& part : split.parts) {
    if (part.error) {
      return *part.error;
    }
  }
  for (const SplitPart& part : split.parts) {
    for (size_t j = 0; j < part.at.size(); ++j) {
      split.each[part.at[j]] = part.each[j];
    }
  }
  return Combine(split.each);
}

}  // namespace internal

using internal::HashSlot;
using internal::Split;
using internal::SplitPart;

void RedisStore::Impl::SubmitSplit(std::span<const LimitedKey> requests, int64_t cost,
                                   Timestamp now, std::span<Decision> each,
                                   std::span<Charge> receipts, DecideDone done) {
  auto split = std::make_shared<Split>();
  absl::InlinedVector<int, 8> slots;
  for (const LimitedKey& r : requests) {
    split->limits.push_back(*r.limit);
    split->keys.emplace_back(r.key);
    split->before.emplace_back(r.before.begin(), r.before.end());
    slots.push_back(HashSlot(RedisKey(*r.limit, r.key)));
  }
  split->cost = cost;
  split->now = now;
  split->each = each;
  split->receipts = receipts;
  split->done = std::move(done);
  split->parts = internal::PartsBySlot(slots);
  StartSplit(std::move(split));
}

void RedisStore::Impl::SubmitSplitLeases(LeaseOp op, std::span<const LeasedKey> keys,
                                         std::string_view id, Micros ttl, Timestamp now,
                                         std::span<Decision> each, DecideDone done) {
  auto split = std::make_shared<Split>();
  absl::InlinedVector<int, 8> slots;
  for (const LeasedKey& k : keys) {
    split->keys.emplace_back(k.key);
    split->capacities.push_back(k.capacity);
    slots.push_back(HashSlot(LeaseKey(k.key)));
  }
  split->lease_op = op;
  split->lease_id = id;
  split->lease_ttl = ttl;
  split->cost = static_cast<int64_t>(op);
  split->now = now;
  split->each = each;
  split->done = std::move(done);
  split->parts = internal::PartsBySlot(slots);
  StartSplit(std::move(split));
}

// On the caller's thread: the first part's charge, or every part at once for a request that
// charges nothing (nothing to give back, so no order to keep).
void RedisStore::Impl::StartSplit(SplitPtr split) {
  split_requests_.fetch_add(1, std::memory_order_relaxed);
  if (split->charges()) {
    AskPart(std::move(split), 0, PartAsk::kCharge);
    return;
  }
  // `open` is set before the first call is handed over: from then on, the I/O thread may
  // complete calls while this thread hands over the rest.
  const size_t parts = split->parts.size();
  split->open.store(parts, std::memory_order_relaxed);
  for (size_t i = 0; i < parts; ++i) {
    AskPart(split, i, PartAsk::kAsIs);
  }
}

// Asks one part: its charge, the request as it is, a give-back of its charge, or a dry run.
void RedisStore::Impl::AskPart(SplitPtr split, size_t i, PartAsk ask) {
  Split& s = *split;
  SplitPart& part = s.parts[i];
  DecideDone done = [this, split = std::move(split), i, ask](absl::StatusOr<Decision> r) mutable {
    if (ask == PartAsk::kCharge) {
      OnCharged(std::move(split), std::move(r));
    } else {
      OnSettled(std::move(split), i, ask, std::move(r));
    }
  };
  if (s.leases()) {
    absl::InlinedVector<LeasedKey, 4> keys;
    for (size_t a : part.at) {
      keys.push_back({s.keys[a], s.capacities[a]});
    }
    LeaseOp op = *s.lease_op;
    if (ask == PartAsk::kGiveBack) {
      op = LeaseOp::kRelease;  // A take given back: the id released where it was taken.
    } else if (ask == PartAsk::kDryRun) {
      op = LeaseOp::kQuery;  // Answers as a take that is not applied does.
    }
    SubmitLeases(op, keys, s.lease_id, s.lease_ttl, s.now, part.each, std::move(done));
    return;
  }
  absl::InlinedVector<LimitedKey, 4> requests;
  for (size_t a : part.at) {
    requests.push_back({.limit = &s.limits[a], .key = s.keys[a], .before = s.before[a]});
  }
  LimitsCall how;
  switch (ask) {
    case PartAsk::kCharge:
      how = {.mode = Call::Mode::kCharge, .receipts = part.receipts};
      break;
    case PartAsk::kGiveBack:
      how = {.mode = Call::Mode::kGiveBack, .charges = part.receipts};
      break;
    case PartAsk::kDryRun:
      how = {.mode = Call::Mode::kDryRun};
      break;
    case PartAsk::kAsIs:
      break;
  }
  SubmitLimits(how, requests, s.cost, s.now, part.each, std::move(done));
}

// On the I/O thread: the charge of part `next` answered. Allowed: on to the next part, or
// answer. Denied or failed: unwind.
void RedisStore::Impl::OnCharged(SplitPtr split, absl::StatusOr<Decision> result) {
  Split& s = *split;
  if (!result.ok()) {
    s.error = absl::Status(result.status().code(), result.status().message());
  } else if (result->allowed) {
    s.parts[s.next].charged = true;
    if (++s.next < s.parts.size()) {
      AskPart(std::move(split), s.next, PartAsk::kCharge);
    } else {
      AnswerSplit(s);
    }
    return;
  }
  Unwind(std::move(split));
}

// After part `next` denied or failed: gives back the parts before it that were charged, and
// (when it denied) asks the parts after it for a dry run, so that each reports what
// MemoryStore's DecideAll reports for a denied request; then answers, when all have.
void RedisStore::Impl::Unwind(SplitPtr split) {
  Split& s = *split;
  std::vector<std::pair<size_t, PartAsk>> asks;
  for (size_t i = 0; i < s.next; ++i) {
    const SplitPart& part = s.parts[i];
    const bool in_redis = s.leases() || std::any_of(part.receipts.begin(), part.receipts.end(),
                                                    [](const Charge& c) { return c.units > 0; });
    if (part.charged && in_redis) {
      asks.emplace_back(i, PartAsk::kGiveBack);
    }
  }
  for (size_t i = s.next + 1; !s.error && i < s.parts.size(); ++i) {
    asks.emplace_back(i, PartAsk::kDryRun);
  }
  if (asks.empty()) {
    AnswerSplit(s);
    return;
  }
  s.open.store(asks.size(), std::memory_order_relaxed);
  give_backs_.fetch_add(std::count_if(asks.begin(), asks.end(),
                                      [](const auto& a) { return a.second == PartAsk::kGiveBack; }),
                        std::memory_order_relaxed);
  for (auto [i, ask] : asks) {
    AskPart(split, i, ask);
  }
}

// On the I/O thread: a call made once the charging had stopped answered.
void RedisStore::Impl::OnSettled(SplitPtr split, size_t i, PartAsk ask,
                                 absl::StatusOr<Decision> result) {
  Split& s = *split;
  SplitPart& part = s.parts[i];
  if (ask == PartAsk::kGiveBack && s.leases() && result.ok()) {
    // A release answers as a release; the request reports what a query answers now.
    AskPart(std::move(split), i, PartAsk::kDryRun);
    return;
  }
  if (!result.ok()) {
    switch (ask) {
      case PartAsk::kGiveBack:
        // The units stay charged: fewer admitted until they expire, never more. The part
        // reports the figures its charge left.
        give_backs_failed_.fetch_add(1, std::memory_order_relaxed);
        break;
      case PartAsk::kDryRun:
        // Its figures are unknown; the request is denied already. As the `allow` policy:
        // nothing is known.
        std::fill(part.each.begin(), part.each.end(), Decision{.allowed = true});
        break;
      case PartAsk::kAsIs:
      case PartAsk::kCharge:
        part.error = absl::Status(result.status().code(), result.status().message());
        break;
    }
  }
  if (s.open.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    AnswerSplit(s);
  }
}

void RedisStore::Impl::AnswerSplit(Split& split) {
  absl::StatusOr<Decision> answer = internal::Merge(split);
  if (answer.ok() && answer->allowed && !split.receipts.empty()) {
    // Every part kept its charge: each limit's is what its part's call charged (units 0 where
    // the failure policy decided, or the request charged nothing).
    for (const SplitPart& part : split.parts) {
      for (size_t j = 0; j < part.at.size(); ++j) {
        split.receipts[part.at[j]] = part.receipts[j];
      }
    }
  }
  std::move(split.done)(std::move(answer));
}

}  // namespace sluice
