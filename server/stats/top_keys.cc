#include "server/stats/top_keys.h"

#include <algorithm>
#include <utility>

namespace sluice::server {

void SpaceSaving::Add(std::string_view key, uint64_t weight) {
  total_ += weight;
  // (Debian's Abseil has a string_view of its own.)
  if (auto it = keys_.find(absl::string_view(key.data(), key.size())); it != keys_.end()) {
    it->second.count += weight;
    return;
  }
  if (keys_.size() < capacity_) {
    keys_.emplace(std::string(key), Counted{.count = weight});
    return;
  }
  // Full: the least counted key gives its place, and its count, to the new one. (A linear
  // scan: kCapacity is small, and a flood of new keys pays it once per key.)
  auto least = keys_.begin();
  for (auto it = keys_.begin(); it != keys_.end(); ++it) {
    if (it->second.count < least->second.count) {
      least = it;
    }
  }
  const uint64_t floor = least->second.count;
  keys_.erase(least);
  keys_.emplace(std::string(key), Counted{.count = floor + weight, .error = floor});
}

void SpaceSaving::Clear() {
  keys_.clear();
  total_ = 0;
}

uint64_t SpaceSaving::floor() const {
  if (keys_.size() < capacity_) {
    return 0;
  }
  uint64_t least = UINT64_MAX;
  for (const auto& [key, counted] : keys_) {
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
    for (const auto& [key, counted] : summary.keys()) {
      RuleTop::Key& k = merged[key];
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
    return top;
  }
  internal::MutexLock lock(mutex_);
  if (TopKeys* top = counters.top.load(std::memory_order_acquire); top != nullptr) {
    return top;  // Made by another thread meanwhile.
  }
  if (rules_.size() >= kMaxRules) {
    untracked_.fetch_add(1, std::memory_order_relaxed);
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
