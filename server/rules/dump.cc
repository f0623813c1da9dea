// DumpRules (rules.h): the rules in force as envoyproxy/ratelimit's debug port shows them
// (their config_impl.go, rateLimitDescriptor.dump), for GET /rlconfig; FindRule, a rule by its
// path.

#include <string>

#include "fmt/format.h"

#include "server/rules/rules.h"
#include "sluice/duration.h"

namespace sluice::server {
namespace {

// One line per limit, in the tree's order: a node's limits, then its children's.
void DumpLevel(const DescriptorLevel& level, std::string& out) {
  for (const auto& node : level.nodes) {
    if (node->rule) {
      const Rule& rule = *node->rule;
      for (const RuleLimit& limit : rule.limits) {
        // An unlimited rule has no unit (UNKNOWN) and counts nothing (0), as theirs.
        const bool unlimited = rule.unlimited || limit.unlimited;
        fmt::format_to(std::back_inserter(out),
                       "{}: unit={} requests_per_unit={}, shadow_mode: {}, quota_mode: {}",
                       rule.path, UnitName(unlimited ? Unit::kUnknown : limit.unit),
                       unlimited ? 0 : limit.nominal, rule.mode == Mode::kShadow, rule.quota_mode);
        // A limit written with `period` (sluice's) has no unit of theirs: its period says it.
        if (!unlimited && limit.unit == Unit::kUnknown && limit.limit) {
          out += ", period: ";
          AppendDuration(out, limit.limit->period());
        }
        if (!unlimited && limit.limit && limit.limit->calendar()) {  // sluice's, too.
          fmt::format_to(std::back_inserter(out), ", calendar: {}", limit.limit->PeriodName());
        }
        out += '\n';
      }
    }
    DumpLevel(node->children, out);
  }
}

const Rule* FindInLevel(const DescriptorLevel& level, std::string_view path) {
  for (const auto& node : level.nodes) {
    if (node->rule && node->rule->path == path) {
      return &*node->rule;
    }
    if (const Rule* found = FindInLevel(node->children, path)) {
      return found;
    }
  }
  return nullptr;
}

}  // namespace

const Rule* FindRule(const RuleSet& rules, std::string_view path) {
  for (const auto& domain : rules.domains()) {
    if (const Rule* found = FindInLevel(domain->descriptors, path)) {
      return found;
    }
  }
  return nullptr;
}

std::string DumpRules(const RuleSet& rules) {
  std::string out;
  for (const auto& domain : rules.domains()) {
    DumpLevel(domain->descriptors, out);
  }
  return out;
}

}  // namespace sluice::server
