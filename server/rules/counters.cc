// CounterRegistry: the rules' counters by name, kept across reloads.

#include <atomic>
#include <cassert>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/rules/rules.h"
#include "src/core/mutex.h"

namespace sluice::server {
namespace {

using internal::Mutex;
using internal::MutexLock;

}  // namespace

struct CounterRegistry::State {
  mutable Mutex mutex;
  std::map<std::string, std::unique_ptr<RuleCounters>, std::less<>> counters ABSL_GUARDED_BY(mutex);
  size_t detailed ABSL_GUARDED_BY(mutex) = 0;  // Created by GetDetailed.
  std::atomic<float> near_limit_ratio{kDefaultNearLimitRatio};

  // New counters, pointing at the registry's ratio.
  std::unique_ptr<RuleCounters> Make() {
    auto counters = std::make_unique<RuleCounters>();
    counters->near_limit_ratio = &near_limit_ratio;
    return counters;
  }
};

CounterRegistry::CounterRegistry() : state_(std::make_unique<State>()) {}
CounterRegistry::~CounterRegistry() = default;

RuleCounters* CounterRegistry::Get(const std::string& name) {
  MutexLock lock(state_->mutex);
  std::unique_ptr<RuleCounters>& counters = state_->counters[name];
  if (!counters) {
    counters = state_->Make();
  }
  return counters.get();
}

RuleCounters* CounterRegistry::GetDetailed(const std::string& name) {
  MutexLock lock(state_->mutex);
  if (const auto it = state_->counters.find(name); it != state_->counters.end()) {
    return it->second.get();
  }
  if (state_->detailed >= kMaxDetailed) {
    return nullptr;
  }
  ++state_->detailed;
  return state_->counters.emplace(name, state_->Make()).first->second.get();
}

std::vector<std::pair<std::string, const RuleCounters*>> CounterRegistry::All() const {
  MutexLock lock(state_->mutex);
  std::vector<std::pair<std::string, const RuleCounters*>> all;
  all.reserve(state_->counters.size());
  for (const auto& [name, counters] : state_->counters) {
    all.emplace_back(name, counters.get());
  }
  return all;
}

void CounterRegistry::set_near_limit_ratio(float ratio) {
  assert(ratio >= 0 && ratio <= 1);
  state_->near_limit_ratio.store(ratio, std::memory_order_relaxed);
}

float CounterRegistry::near_limit_ratio() const {
  return state_->near_limit_ratio.load(std::memory_order_relaxed);
}

}  // namespace sluice::server
