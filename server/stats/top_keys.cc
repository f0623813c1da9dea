#include "server/stats/top_keys.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/hash/hash.h"

namespace sluice::server {

namespace {

uint64_t HashOf(std::string_view key) {
  return absl::HashOf(absl::string_view(key.data(), key.size()));
}

}  // namespace

const SpaceSaving::Counted* SpaceSaving::Find(std::string_view key) const {
  const uint64_t hash = HashOf(key);
  for (size_t i = 0; i < used_; ++i) {
    if (slots_[i].hash == hash && slots_[i].key == key) {
      return &slots_[i];
    }
  }
  return nullptr;
}

void SpaceSaving::Add(std::string_view key, uint64_t weight) {
  total_ += weight;
  const uint64_t hash = HashOf(key);
  for (size_t i = 0; i < used_; ++i) {
    if (slots_[i].hash == hash && slots_[i].key == key) {
      slots_[i].count += weight;
      return;
    }
  }
  Counted* slot = nullptr;
  uint64_t floor = 0;
  if (used_ < capacity_) {
    if (used_ == slots_.size()) {
      slots_.emplace_back();
    }
    slot = &slots_[used_++];
  } else {
    // Full: the least counted key gives its place, and its count, to the new one.
    slot = &slots_[0];
    for (size_t i = 1; i < used_; ++i) {
      if (slots_[i].count < slot->count) {
        slot = &slots_[i];
      }
    }
    floor = slot->count;
  }
  slot->key.assign(key.data(), key.size());  // Over the last text: no allocation once warm.
  slot->hash = hash;
  slot->count = floor + weight;
  slot->error = floor;
}

void SpaceSaving::Clear() {
  used_ = 0;
  total_ = 0;
}

uint64_t SpaceSaving::floor() const {
  if (used_ < capacity_) {
    return 0;
  }
  uint64_t least = UINT64_MAX;
  for (const Counted& counted : keys()) {
    least = std::min(least, counted.count);
  }
  return least;
}

TopKeys::TopKeys(std::string rule) : rule_(std::move(rule)) {}

namespace {

int64_t EpochOf(Timestamp now) { return now.time_since_epoch().count() / TopKeys::kEpoch.count(); }

}  // namespace

TopKeys::Epoch& TopKeys::Current(Timestamp now) {
  const int64_t number = EpochOf(now);
  Epoch& epoch = epochs_[static_cast<size_t>(number % kEpochs)];
  if (epoch.number != number) {
    epoch.number = number;
    epoch.hits.Clear();
    epoch.denied.Clear();
  }
  return epoch;
}

void TopKeys::Record(std::string_view key, bool denied, uint64_t hits, Timestamp now) {
  internal::MutexLock lock(mutex_);
  Epoch& epoch = Current(now);
  if (hits > 0) {
    epoch.hits.Add(key, hits);
  }
  if (denied) {
    epoch.denied.Add(key, 1);
  }
}

RuleTop TopKeys::Top(TopBy by, size_t n, Timestamp now) const {
  RuleTop top{.rule = rule_};
  const int64_t current = EpochOf(now);
  absl::flat_hash_map<std::string_view, RuleTop::Key> merged;
  internal::MutexLock lock(mutex_);
  // Each key's count adds up over the epochs; an epoch that does not hold it may have held
  // up to its floor of it, which is why the bound is N/k and not the errors alone.
  for (const Epoch& epoch : epochs_) {
    if (epoch.number <= current - kEpochs || epoch.number > current) {
      continue;
    }
    const SpaceSaving& summary = by == TopBy::kHits ? epoch.hits : epoch.denied;
    top.total += summary.total();
    for (const SpaceSaving::Counted& counted : summary.keys()) {
      RuleTop::Key& k = merged[counted.key];
      k.count += counted.count;
      k.error += counted.error;
    }
  }
  top.bound = top.total / TopKeys::kCapacity;
  top.keys.reserve(merged.size());
  for (auto& [key, k] : merged) {
    k.key = std::string(key);
    top.keys.push_back(std::move(k));
  }
  std::sort(top.keys.begin(), top.keys.end(), [](const RuleTop::Key& a, const RuleTop::Key& b) {
    return a.count != b.count ? a.count > b.count : a.key < b.key;
  });
  if (top.keys.size() > n) {
    top.keys.resize(n);
  }
  return top;
}

size_t TopKeys::held() const {
  internal::MutexLock lock(mutex_);
  size_t held = 0;
  for (const Epoch& epoch : epochs_) {
    held += epoch.hits.keys().size() + epoch.denied.keys().size();
  }
  return held;
}

TopKeys* TopOffenders::For(RuleCounters& counters, std::string_view rule) {
  if (TopKeys* top = counters.top.load(std::memory_order_acquire); top != nullptr) [[likely]] {
    return top == &untracked_rule_ ? nullptr : top;
  }
  internal::MutexLock lock(mutex_);
  if (TopKeys* top = counters.top.load(std::memory_order_acquire); top != nullptr) {
    return top == &untracked_rule_ ? nullptr : top;  // Settled by another thread meanwhile.
  }
  if (rules_.size() >= kMaxRules) {
    untracked_.fetch_add(1, std::memory_order_relaxed);
    counters.top.store(&untracked_rule_, std::memory_order_release);
    return nullptr;
  }
  TopKeys* top = rules_.emplace_back(std::make_unique<TopKeys>(std::string(rule))).get();
  counters.top.store(top, std::memory_order_release);
  return top;
}

std::vector<RuleTop> TopOffenders::Top(std::string_view rule, TopBy by, size_t n,
                                       Timestamp now) const {
  std::vector<const TopKeys*> chosen;
  {
    internal::MutexLock lock(mutex_);
    for (const auto& top : rules_) {
      if (rule.empty() || top->rule() == rule) {
        chosen.push_back(top.get());
      }
    }
  }
  std::vector<RuleTop> tops;
  tops.reserve(chosen.size());
  for (const TopKeys* top : chosen) {  // TopKeys live as long as this: no lock needed here.
    tops.push_back(top->Top(by, n, now));
  }
  std::sort(tops.begin(), tops.end(),
            [](const RuleTop& a, const RuleTop& b) { return a.rule < b.rule; });
  return tops;
}

}  // namespace sluice::server
