#include "server/service/blocks.h"

#include <algorithm>
#include <utility>

#include "server/service/deciding.h"
#include "server/service/feedback.h"
#include "server/service/store_answer.h"

namespace sluice::server {

std::string SideKey(std::string_view key, std::string_view what, std::string_view limit) {
  std::string out(key);
  out += '\x1b';
  out += what;
  out += limit;
  return out;
}

std::string BlockKey(std::string_view key) { return SideKey(key, "block"); }

internal::Task<absl::StatusOr<std::vector<Micros>>> BlocksLeft(Store& store,
                                                               std::vector<LimitedKey> blocks,
                                                               Timestamp now) {
  std::vector<Decision> each(blocks.size());
  const absl::StatusOr<Decision> asked = co_await StoreDecision(store, blocks, 0, now, each);
  if (!asked.ok()) {
    co_return asked.status();
  }
  std::vector<Micros> left(blocks.size(), Micros{0});
  for (size_t i = 0; i < each.size(); ++i) {
    // Remaining 0: the block's one unit is taken, until reset_after from now. The `allow`
    // failure policy's answer (every figure 0, no reset_after) is no block: fail-open stays
    // open.
    if (each[i].remaining == 0 && each[i].reset_after > Micros{0}) {
      left[i] = each[i].reset_after;
    }
  }
  co_return left;
}

internal::Task<absl::StatusOr<HeldBack>> AskHeldBack(Store& store, const Limit* block,
                                                     std::string_view key, bool pause,
                                                     Timestamp now) {
  HeldBack held;
  if (block == nullptr && !pause) {
    co_return held;
  }
  const std::string block_key = BlockKey(key);
  const std::string pause_key = PauseKey(key);
  std::vector<LimitedKey> keys;
  if (block != nullptr) {
    keys.push_back({.limit = block, .key = block_key});
  }
  if (pause) {
    keys.push_back({.limit = &PauseLimit(), .key = pause_key});
  }
  absl::StatusOr<std::vector<Micros>> left = co_await BlocksLeft(store, std::move(keys), now);
  if (!left.ok()) {
    co_return left.status();
  }
  held.block = block != nullptr ? left->front() : Micros{0};
  held.pause = pause ? left->back() : Micros{0};
  co_return held;
}

void DenyForBlock(Decision& decision, Micros left) {
  decision.allowed = false;
  decision.remaining = 0;
  WaitOutBlock(decision, left);
}

void WaitOutBlock(Decision& decision, Micros duration) {
  decision.reset_after = std::max(decision.reset_after, duration);
  if (!decision.never_allowed()) {
    decision.retry_after = std::max(decision.retry_after, duration);
  }
}

internal::Task<absl::Status> StartBlock(Store& store, LimitedKey block, Timestamp now) {
  Decision decision;
  const absl::StatusOr<Decision> taken =
      co_await StoreDecision(store, {&block, 1}, 1, now, {&decision, 1});
  // Denied: a block runs there already, and goes on as it is.
  co_return taken.status();
}

internal::Task<absl::Status> RateLimitService::Deciding::CheckBlocks() {
  enum Kind : uint8_t { kBlock, kPause, kSlow };
  std::vector<LimitedKey> blocks;
  std::vector<std::pair<size_t, Kind>> owner;  // Per key: its index in `blocking`, and what.
  block_keys.clear();
  block_keys.reserve(3 * blocking.size());  // No reallocation: `blocks` points into it.
  std::vector<size_t> slot;  // Per entry of `owner`: its key in `blocks` (a pause key is shared
                             // by the limits of one key).
  auto add = [&](size_t j, Kind kind, const Limit& limit, std::string key) {
    const auto same = std::find_if(blocks.begin(), blocks.end(), [&](const LimitedKey& k) {
      return *k.limit == limit && k.key == key;
    });
    slot.push_back(static_cast<size_t>(same - blocks.begin()));
    owner.emplace_back(j, kind);
    if (same == blocks.end()) {
      block_keys.push_back(std::move(key));
      blocks.push_back({.limit = &limit, .key = block_keys.back()});
    }
  };
  for (size_t j = 0; j < blocking.size(); ++j) {
    const Planned& p = planned[blocking[j]];
    if (p.rule_limit->block) {
      add(j, kBlock, *p.rule_limit->block, BlockKey(p.key));
    }
    if (p.rule_limit->feedback) {
      add(j, kPause, PauseLimit(), PauseKey(p.key));
    }
    if (p.rule_limit->pacing) {
      add(j, kSlow, PauseLimit(), SlowKey(p.key, p.rule_limit->name));
    }
  }
  absl::StatusOr<std::vector<Micros>> left =
      co_await BlocksLeft(service.store_, std::move(blocks), now);
  if (!left.ok()) {
    service.CountStoreFailure(left.status());
    co_return left.status();
  }
  block_left.assign(blocking.size(), Micros{0});
  pause_left.assign(blocking.size(), Micros{0});
  slow_left.assign(blocking.size(), Micros{0});
  for (size_t k = 0; k < owner.size(); ++k) {
    const auto [j, kind] = owner[k];
    const Micros l = (*left)[slot[k]];
    (kind == kBlock ? block_left : kind == kPause ? pause_left : slow_left)[j] = l;
    blocked = blocked || (kind != kSlow && l > Micros{0});
  }
  if (blocked) {
    admitted = false;
  }
  co_return absl::OkStatus();
}

void RateLimitService::Deciding::ApplyBlocks() {
  for (size_t j = 0; j < block_left.size(); ++j) {
    const Micros left = std::max(block_left[j], pause_left[j]);
    if (left <= Micros{0}) {
      continue;
    }
    LimitOutcome& outcome = result.limits[blocking[j]];
    DenyForBlock(outcome.decision, left);
    outcome.blocked = block_left[j] > Micros{0};
    outcome.paused = pause_left[j] > Micros{0};
  }
  for (const Paced& p : paced) {
    if (!p.decision.allowed) {
      LimitOutcome& outcome = result.limits[blocking[p.j]];
      outcome.decision.allowed = false;
      outcome.decision.remaining = 0;
      outcome.decision.retry_after = std::max(outcome.decision.retry_after, p.decision.retry_after);
      outcome.decision.reset_after = std::max(outcome.decision.reset_after, p.decision.reset_after);
      outcome.paced = true;
    }
  }
}

internal::Task<absl::Status> RateLimitService::Deciding::Pace(int64_t cost) {
  for (size_t j = 0; j < blocking.size() && cost > 0 && !blocked; ++j) {
    if (slow_left[j] <= Micros{0}) {
      continue;
    }
    const Planned& p = planned[blocking[j]];
    const RuleLimit& rule_limit = *p.rule_limit;
    Paced& pace = paced.emplace_back();
    pace.j = j;
    pace.key = PaceKey(p.key, rule_limit.name);
    const int64_t rate =
        AdaptiveRate(*rule_limit.feedback->adaptive, rule_limit.nominal, slow_left[j]);
    const LimitedKey key{.limit = &*rule_limit.pacing, .key = pace.key};
    const absl::StatusOr<Decision> decided = co_await StoreCharge(
        service.store_, {&key, 1}, PacingCost(cost, rule_limit.limit->period(), rate), now,
        {&pace.decision, 1}, {&pace.charge, 1});
    if (!decided.ok()) {
      service.CountStoreFailure(decided.status());
      co_return decided.status();
    }
    if (!decided->allowed) {
      blocked = true;  // Denied by its pace: the limits are only asked how they stand.
      admitted = false;
    }
  }
  co_return absl::OkStatus();
}

internal::Task<absl::Status> RateLimitService::Deciding::Unpace() {
  if (admitted) {
    co_return absl::OkStatus();
  }
  std::vector<LimitedKey> keys;
  std::vector<Settlement> refunds;
  for (const Paced& p : paced) {
    if (p.decision.allowed && p.charge.units > 0) {
      keys.push_back({.limit = &*planned[blocking[p.j]].rule_limit->pacing, .key = p.key});
      refunds.push_back({.charge = p.charge, .units = 0});
    }
  }
  if (keys.empty()) {
    co_return absl::OkStatus();
  }
  std::vector<Settled> settled(keys.size());
  // A refund that fails leaves the pace charged: the key is held back a little more, never less.
  if (absl::Status s =
          co_await StoreSettle(service.store_, keys, refunds, {}, Timestamp{}, now, settled);
      !s.ok()) {
    service.CountStoreFailure(s);
  }
  co_return absl::OkStatus();
}

internal::Task<absl::Status> RateLimitService::Deciding::StartBlocks(int64_t cost) {
  if (admitted || blocked || cost == 0) {
    co_return absl::OkStatus();
  }
  for (size_t j = 0; j < blocking.size(); ++j) {
    LimitOutcome& outcome = result.limits[blocking[j]];
    if (!planned[blocking[j]].rule_limit->block) {
      continue;  // A partner's pause only: nothing to start.
    }
    // A request that can never be admitted (its cost above the limit) charged nothing and
    // says so; it is no breach to punish.
    if (outcome.decision.allowed || outcome.borrowed || outcome.decision.never_allowed()) {
      continue;
    }
    const Limit& block = *planned[blocking[j]].rule_limit->block;
    const std::string key = BlockKey(planned[blocking[j]].key);
    // The request is denied whether or not its block could be kept: a store failure here is
    // counted and logged, and the next request is decided by its limit alone.
    const absl::Status started =
        co_await StartBlock(service.store_, {.limit = &block, .key = key}, now);
    if (!started.ok()) {
      service.CountStoreFailure(started);
      continue;
    }
    WaitOutBlock(outcome.decision, block.period());
  }
  co_return absl::OkStatus();
}

}  // namespace sluice::server
