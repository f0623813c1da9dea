// Finding the rule of a request: its domain by name, then its descriptor down the domain's tree.

#include <string_view>
#include <vector>

#include "server/rules/rules.h"

namespace sluice::server {

const Domain* RuleSet::FindDomain(std::string_view name) const {
  for (const auto& domain : domains_) {
    if (domain->name == name) {
      return domain.get();
    }
  }
  return nullptr;
}

const Rule* RuleSet::Match(const Domain& domain, const std::vector<Entry>& entries) {
  const DescriptorLevel* level = &domain.descriptors;
  const DescriptorNode* node = nullptr;
  for (const Entry& entry : entries) {
    const auto by_key = level->by_key.find(entry.key);
    if (by_key == level->by_key.end()) {
      return nullptr;
    }
    const DescriptorLevel::ByKey& candidates = by_key->second;
    node = nullptr;
    if (const auto exact = candidates.exact.find(entry.value); exact != candidates.exact.end()) {
      node = exact->second;
    }
    for (const DescriptorNode* wildcard : candidates.wildcards) {
      if (node == nullptr && entry.value.starts_with(*wildcard->value)) {
        node = wildcard;
      }
    }
    if (node == nullptr) {
      node = candidates.any;
    }
    if (node == nullptr) {
      return nullptr;
    }
    level = &node->children;
  }
  return node != nullptr && node->rule ? &*node->rule : nullptr;
}

}  // namespace sluice::server
