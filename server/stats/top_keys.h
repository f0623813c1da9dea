#pragma once

// Top offenders: per rule limit, the keys with the most hits and the most denials over the last
// few minutes, in bounded memory whatever the callers send (GET /v1/top, `sluice top`, and with
// --top-metrics the top few as Prometheus series).
//
// Each rule limit keeps, per minute, two Space-Saving summaries (Metwally, Agrawal and El
// Abbadi, "Efficient computation of frequent and top-k elements in data streams", 2005) of
// kCapacity keys each: one weighted by hits (a request's cost), one by denials. A key already
// held adds its weight; a new key takes the place of the one with the least count, starting
// from that count (its `error`, what it may have had before). A query adds up the last
// kEpochs minutes. With N the weight the rule saw in them and k = kCapacity:
//   - every key with more than N/k of it is listed (absent from every minute, a key had at
//     most that minute's least count there, and those add up to at most N/k);
//   - each count is within N/k of the truth (over by its errors where it was held, under by
//     the least counts where it was not).
// (The window is the current epoch and the kEpochs - 1 before it: four to five minutes.)
// A flood of distinct keys only turns the least counted over: memory per rule limit stays at
// most 2 * kEpochs * kCapacity keys (a rule's key at most 256 bytes, server/service/service.h's
// kMaxStoredKeyBytes, about 100 KB at worst, a few KB for short keys; an ad hoc key at most
// kMaxAdHocKeyBytes, 1 KB), and at most kMaxRules rule limits are followed (those first seen;
// later ones are not, and are counted once).
//
// Thread-safe: one mutex per rule limit, held for one update.

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"

#include "server/rules/rules.h"
#include "sluice/clock.h"
#include "src/core/mutex.h"

namespace sluice::server {

// One Space-Saving summary: at most `capacity` keys with their counts. Its places are kept
// from one use to the next (a key's text is assigned over the last one's), and a key is found by
// its hash among at most `capacity` of them, so that an update allocates nothing once warm: a
// flood of new keys costs a hash and two short scans each.
class SpaceSaving {
 public:
  struct Counted {
    std::string key;
    uint64_t hash = 0;
    uint64_t count = 0;
    uint64_t error = 0;  // How much of `count` may be another key's (see above).
  };

  explicit SpaceSaving(size_t capacity) : capacity_(capacity) { slots_.reserve(capacity); }

  void Add(std::string_view key, uint64_t weight);
  void Clear();
  // The least count held when full (what a key absent may have had), else 0.
  uint64_t floor() const;
  uint64_t total() const { return total_; }
  // The keys held, in no order.
  std::span<const Counted> keys() const { return {slots_.data(), used_}; }
  const Counted* Find(std::string_view key) const;

 private:
  size_t capacity_;
  std::vector<Counted> slots_;  // The first used_ hold keys; the rest wait, text kept.
  size_t used_ = 0;
  uint64_t total_ = 0;
};

// What a query answers for one rule limit.
struct RuleTop {
  struct Key {
    std::string key;  // As the store counts it (KeyNames shows it).
    uint64_t count = 0;
    uint64_t error = 0;  // The count may be over by this much (under by at most `bound`).
  };
  std::string rule;
  uint64_t total = 0;     // The weight the rule saw in the window (N).
  uint64_t bound = 0;     // N / kCapacity: see above.
  std::vector<Key> keys;  // Most first.
};

enum class TopBy : uint8_t { kHits, kDenied };

// One rule limit's summaries.
class TopKeys {
 public:
  static constexpr size_t kCapacity = 32;
  static constexpr int kEpochs = 5;
  static constexpr Micros kEpoch = std::chrono::minutes(1);

  explicit TopKeys(std::string rule);

  void Record(std::string_view key, bool denied, uint64_t hits, Timestamp now);
  // The `n` keys with the most `by` in the last kEpochs epochs at `now`.
  RuleTop Top(TopBy by, size_t n, Timestamp now) const;
  const std::string& rule() const { return rule_; }
  // Keys held in every summary now: at most 2 * kEpochs * kCapacity.
  size_t held() const;

 private:
  struct Epoch {
    int64_t number = -1;
    SpaceSaving hits{kCapacity};
    SpaceSaving denied{kCapacity};
  };
  // The epoch `now` falls in, cleared when it last held an older one.
  Epoch& Current(Timestamp now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const std::string rule_;
  mutable internal::Mutex mutex_;
  std::array<Epoch, kEpochs> epochs_ ABSL_GUARDED_BY(mutex_);
};

// Every rule limit's TopKeys, kept across reloads (each hangs off its RuleCounters, kept by
// name), created at its first decision.
class TopOffenders {
 public:
  static constexpr size_t kMaxRules = 1'024;

  // Off until enabled: Record does nothing (one relaxed load).
  void Enable(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }

  // Counts a decision on `key` under the rule limit of `counters` (named `rule`): its hits,
  // and a denial when this limit denied it.
  void Record(RuleCounters& counters, std::string_view rule, std::string_view key, bool denied,
              uint64_t hits, Timestamp now) {
    if (enabled()) [[unlikely]] {
      if (TopKeys* top = For(counters, rule); top != nullptr) {
        top->Record(key, denied, hits, now);
      }
    }
  }

  // The top `n` keys by `by` of the rule limit named `rule`, or of every one followed when
  // `rule` is empty, in name order.
  std::vector<RuleTop> Top(std::string_view rule, TopBy by, size_t n, Timestamp now) const;
  // Rule limits not followed for want of room (kMaxRules), each counted once.
  uint64_t untracked() const { return untracked_.load(std::memory_order_relaxed); }

 private:
  TopKeys* For(RuleCounters& counters, std::string_view rule);

  std::atomic<bool> enabled_{false};
  // What a rule limit refused for want of room points to: never counted, never listed, and
  // refused once rather than under the mutex at each of its decisions.
  TopKeys untracked_rule_{""};
  mutable internal::Mutex mutex_;
  std::deque<std::unique_ptr<TopKeys>> rules_ ABSL_GUARDED_BY(mutex_);
  std::atomic<uint64_t> untracked_{0};
};

}  // namespace sluice::server
