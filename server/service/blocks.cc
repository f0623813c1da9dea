#include "server/service/blocks.h"

#include <algorithm>
#include <utility>

#include "server/service/deciding.h"
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
  block_keys.clear();
  block_keys.reserve(blocking.size());  // No reallocation: `blocks` points into it.
  for (size_t i : blocking) {
    block_keys.push_back(BlockKey(planned[i].key));
    blocks.push_back({.limit = &*planned[i].rule_limit->block, .key = block_keys.back()});
  }
  absl::StatusOr<std::vector<Micros>> left =
      co_await BlocksLeft(service.store_, std::move(blocks), now);
  if (!left.ok()) {
    service.CountStoreFailure(left.status());
    co_return left.status();
  }
  block_left = *std::move(left);
  blocked =
      std::any_of(block_left.begin(), block_left.end(), [](Micros m) { return m > Micros{0}; });
  if (blocked) {
    admitted = false;
  }
  co_return absl::OkStatus();
}

void RateLimitService::Deciding::ApplyBlocks() {
  for (size_t j = 0; j < block_left.size(); ++j) {
    if (block_left[j] <= Micros{0}) {
      continue;
    }
    LimitOutcome& outcome = result.limits[blocking[j]];
    DenyForBlock(outcome.decision, block_left[j]);
    outcome.blocked = true;
  }
}

internal::Task<absl::Status> RateLimitService::Deciding::StartBlocks(int64_t cost) {
  if (admitted || blocked || cost == 0) {
    co_return absl::OkStatus();
  }
  for (size_t j = 0; j < blocking.size(); ++j) {
    LimitOutcome& outcome = result.limits[blocking[j]];
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
