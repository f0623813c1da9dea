#include "server/service/blocks.h"

#include <algorithm>
#include <utility>

#include "server/service/deciding.h"
#include "server/service/feedback.h"
#include "server/service/store_answer.h"

namespace sluice::server {

std::string BlockKey(std::string_view key) {
  std::string block(key);
  block +=
      "\x1b"
      "block";
  return block;
}

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
  std::vector<LimitedKey> blocks;
  std::vector<std::pair<size_t, bool>> owner;  // Per key: its index in `blocking`, and a pause.
  block_keys.clear();
  block_keys.reserve(2 * blocking.size());  // No reallocation: `blocks` points into it.
  for (size_t j = 0; j < blocking.size(); ++j) {
    const Planned& p = planned[blocking[j]];
    if (p.rule_limit->block) {
      block_keys.push_back(BlockKey(p.key));
      blocks.push_back({.limit = &*p.rule_limit->block, .key = block_keys.back()});
      owner.emplace_back(j, false);
    }
    if (p.rule_limit->feedback) {
      block_keys.push_back(PauseKey(p.key));
      blocks.push_back({.limit = &PauseLimit(), .key = block_keys.back()});
      owner.emplace_back(j, true);
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
  for (size_t k = 0; k < owner.size(); ++k) {
    (owner[k].second ? pause_left : block_left)[owner[k].first] = (*left)[k];
  }
  blocked = std::any_of(left->begin(), left->end(), [](Micros m) { return m > Micros{0}; });
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
