// Finding the rule of a request: its domain by name, then its descriptor down the domain's tree.

#include <string>
#include <string_view>
#include <vector>

#include "fmt/format.h"
#include "fmt/ranges.h"

#include "server/rules/rules.h"

namespace sluice::server {

bool WildcardMatches(const std::vector<std::string>& segments, std::string_view value) {
  if (segments.size() < 2) {
    return segments.size() == 1 && value == segments.front();
  }
  const std::string& first = segments.front();
  const std::string& last = segments.back();
  // The first and last segments are anchored; they must not overlap in a short value.
  if (value.size() < first.size() + last.size() || !value.starts_with(first) ||
      !value.ends_with(last)) {
    return false;
  }
  std::string_view middle = value.substr(first.size(), value.size() - first.size() - last.size());
  // The segments between are found leftmost-first: taking the earliest place of each leaves
  // the most room for the rest, so no other choice could match where this one fails.
  for (size_t i = 1; i + 1 < segments.size(); ++i) {
    const size_t at = middle.find(segments[i]);
    if (at == std::string_view::npos) {
      return false;
    }
    middle.remove_prefix(at + segments[i].size());
  }
  return true;
}

const Domain* RuleSet::FindDomain(std::string_view name) const {
  for (const auto& domain : domains_) {
    if (domain->name == name) {
      return domain.get();
    }
  }
  return nullptr;
}

namespace {

// The node of `level` that `entry` matches: its exact value, else the first wildcard that
// matches, else its key alone; nullptr if none.
const DescriptorNode* MatchEntry(const DescriptorLevel& level, const Entry& entry) {
  const auto by_key = level.by_key.find(entry.key);
  if (by_key == level.by_key.end()) {
    return nullptr;
  }
  const DescriptorLevel::ByKey& candidates = by_key->second;
  if (const auto exact = candidates.exact.find(entry.value); exact != candidates.exact.end()) {
    return exact->second;
  }
  for (const DescriptorNode* wildcard : candidates.wildcards) {
    if (WildcardMatches(wildcard->segments, entry.value)) {
      return wildcard;
    }
  }
  return candidates.any;
}

}  // namespace

const Rule* RuleSet::Match(const Domain& domain, const std::vector<Entry>& entries,
                           std::vector<const DescriptorNode*>* path) {
  if (path != nullptr) {
    path->clear();
  }
  const DescriptorLevel* level = &domain.descriptors;
  const DescriptorNode* node = nullptr;
  for (const Entry& entry : entries) {
    node = MatchEntry(*level, entry);
    if (node == nullptr) {
      break;
    }
    if (path != nullptr) {
      path->push_back(node);
    }
    level = &node->children;
  }
  if (node == nullptr || !node->rule) {
    if (path != nullptr) {
      path->clear();
    }
    return nullptr;
  }
  return &*node->rule;
}

namespace {

// A node as the rules name it, and as a rule's path joins them.
std::string NodeName(const DescriptorNode& node) {
  return node.value ? fmt::format("{}_{}", node.key, *node.value) : node.key;
}

}  // namespace

MatchReport ExplainMatch(const Domain& domain, const std::vector<Entry>& entries) {
  MatchReport report;
  const DescriptorLevel* level = &domain.descriptors;
  const DescriptorNode* node = nullptr;
  for (size_t e = 0; e < entries.size(); ++e) {
    node = MatchEntry(*level, entries[e]);
    if (node == nullptr) {
      report.entry = e;
      const auto by_key = level->by_key.find(entries[e].key);
      if (by_key == level->by_key.end()) {
        report.outcome = MatchReport::Outcome::kNoKey;
      } else {
        report.outcome = MatchReport::Outcome::kNoValue;
        for (const DescriptorNode* wildcard : by_key->second.wildcards) {
          report.wildcards.push_back(wildcard->pattern);
        }
      }
      return report;
    }
    report.path.push_back(NodeName(*node));
    level = &node->children;
  }
  if (node != nullptr && node->rule) {
    report.outcome = MatchReport::Outcome::kRule;
    report.rule = &*node->rule;
  }
  return report;
}

std::string DescribeMatch(const Domain& domain, const std::vector<Entry>& entries,
                          const MatchReport& report) {
  std::string where = domain.name;
  for (const std::string& name : report.path) {
    where += "." + name;
  }
  switch (report.outcome) {
    case MatchReport::Outcome::kRule:
      return fmt::format("rule {}", report.rule->path);
    case MatchReport::Outcome::kNoKey:
      return fmt::format("no rule: entry {} (key \"{}\") is no descriptor key under {}",
                         report.entry, entries[report.entry].key, where);
    case MatchReport::Outcome::kNoValue:
      return fmt::format(
          "no rule: under {}, key \"{}\" has no descriptor for value \"{}\" (no exact value, "
          "no descriptor without a value{})",
          where, entries[report.entry].key, entries[report.entry].value,
          report.wildcards.empty()
              ? std::string()
              : fmt::format(", and no wildcard matched: {}", fmt::join(report.wildcards, ", ")));
    case MatchReport::Outcome::kNoLimit:
      break;
  }
  if (entries.empty()) {
    return "no rule: the descriptor has no entries";
  }
  return fmt::format(
      "no rule: {} holds no limit (a rule matches only a descriptor with as many entries as "
      "its path has levels)",
      where);
}

}  // namespace sluice::server
