#pragma once

// FileParser: reads the YAML of one rules file into a Domain (rules.h), checking every node as
// it goes and stopping at the first mistake with its file, line and column. Private to
// server/rules/: RuleSet::Parse (load.cc) is its only user, and gives it YAML in which a key
// with a null value has been removed (null means what no key means, as in their decoder).
// rules.cc reads the file's domain, its tree of descriptors and each descriptor's rule;
// limits.cc reads the limits of a rule and metadata.cc a descriptor's metadata.
//
// Not thread-safe: one parser reads one file, on one thread. The CounterRegistry it asks for
// counters is thread-safe.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "yaml-cpp/yaml.h"

#include "server/rules/rules.h"
#include "server/rules/scan.h"

namespace sluice::server {

// The one exception of the loader: thrown by FileParser's YAML readers and turned into a Status
// by RuleSet::Parse, so that every check can name the node it is about in a line of its own.
struct ConfigError {
  std::string message;
};

class FileParser {
 public:
  // `counters`, `check_limit`, `limits` and `budget` must outlive the parser. Each descriptor
  // and rule limit read is counted in `budget` against `limits`. `no_leases`: why a
  // `concurrency:` rule is refused (RuleLoadOptions::no_leases); empty: it is not.
  FileParser(std::string file, CounterRegistry& counters, const LimitChecker& check_limit,
             const RuleFileLimits& limits, YamlBudget& budget, std::string no_leases = {})
      : file_(std::move(file)),
        counters_(counters),
        check_limit_(check_limit),
        limits_(limits),
        budget_(budget),
        no_leases_(std::move(no_leases)) {}

  // The name of the domain of the file whose YAML is `root`: a mapping of known keys with a
  // non-empty `domain`. Throws ConfigError.
  std::string DomainName(const YAML::Node& root) const;
  // Reads the file whose YAML is `root` into `domain`: a new one, named and with its file and
  // defaults set, or, `merging`, one that an earlier file defined. Throws ConfigError.
  void ParseDomain(const YAML::Node& root, Domain& domain, bool merging);

 private:
  // The YAML readers (rules.cc): each returns what `node` holds, or throws ConfigError
  // "FILE:LINE:COLUMN: what is wrong" about it.
  [[noreturn]] void Fail(const YAML::Node& node, std::string_view what) const;
  // `map` is a mapping whose keys are all in `allowed`.
  void CheckKeys(const YAML::Node& map, std::initializer_list<std::string_view> allowed) const;
  std::string String(const YAML::Node& node, std::string_view what) const;
  std::string RequiredString(const YAML::Node& map, const char* key) const;
  int64_t Integer(const YAML::Node& node, std::string_view what, int64_t min, int64_t max) const;
  bool Bool(const YAML::Node& node, std::string_view what) const;
  const YAML::Node& Sequence(const YAML::Node& node, std::string_view what) const;

  // The domain's settings (rules.cc): ip_keys and ipv6_prefix, which a later file of a merged
  // domain may repeat but not change, its pools and its auth descriptors.
  void ParseDomainSettings(const YAML::Node& root, Domain& domain, bool merging) const;
  void ParseAuth(const YAML::Node& auth, Domain& domain) const;

  // The tree of descriptors (rules.cc).
  // The descriptors of `list`, and their children, into `level`; `parent_path` names the level.
  void ParseLevel(const YAML::Node& list, const Domain& domain, const std::string& parent_path,
                  DescriptorLevel& level);
  // One descriptor of a level, its rule and its children, indexed in `level` (which its
  // caller then owns it in).
  std::unique_ptr<DescriptorNode> ParseDescriptor(const YAML::Node& node, const Domain& domain,
                                                  const std::string& parent_path,
                                                  DescriptorLevel& level);
  // Its `value`: none when absent or empty; a wildcard when it holds a '*'.
  void ParseValue(const YAML::Node& node, DescriptorNode& descriptor) const;
  // Its flags: shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold
  // (only on a wildcard) and metadata, set on its rule; without a rule they are checked and
  // have no effect, as in envoyproxy/ratelimit.
  void ParseFlags(const YAML::Node& node, const std::string& path,
                  DescriptorNode& descriptor) const;
  // Indexes `descriptor` in `level` for matching; a second one with its key and value fails.
  void Index(const YAML::Node& node, const DescriptorNode& descriptor, const std::string& path,
             DescriptorLevel& level) const;

  // A descriptor's `metadata` (metadata.cc): the text of a JSON object, as rules.h's
  // Rule::metadata_json describes; "" for an empty mapping.
  std::string MetadataJson(const YAML::Node& metadata) const;

  // A descriptor's rule (rules.cc): its limits, mode and pool; nullopt when it has neither
  // limits nor concurrency.
  std::optional<Rule> ParseRule(const YAML::Node& node, const Domain& domain,
                                const std::string& path);
  // Its steps, in this order (after ParseConcurrency, below). The rule's `rate_limit` or
  // `limits` (exactly one is given), each distinct in limit and in name; sets rule.unlimited.
  void ParseRuleLimits(const YAML::Node& rate_limit, const YAML::Node& limits, Rule& rule) const;
  // `mode` (kModes), then `shadow_mode: true`, which may only repeat mode: shadow.
  void ParseMode(const YAML::Node& node, const YAML::Node& mode, Rule& rule) const;
  // `soft_percent`, which mode: soft needs and no other mode takes; softens the rule's limits.
  void ParseSoftPercent(const YAML::Node& node, const YAML::Node& mode,
                        const YAML::Node& rate_limit, const YAML::Node& limits, Rule& rule) const;
  // `pool`, which mode: elastic needs and no other mode takes: one of the domain's pools.
  void ParsePool(const YAML::Node& node, const YAML::Node& mode, const Domain& domain,
                 Rule& rule) const;

  // The limits of a rule (limits.cc).
  // A rate_limit (or an entry of `limits`, or a pool): envoy's unit and requests_per_unit, or
  // sluice's period, with algorithm, burst and buckets.
  RuleLimit ParseLimit(const YAML::Node& node, std::string default_name) const;
  // Its steps. `replaces`: names of other limits, none empty nor the limit's own.
  void ParseReplaces(const YAML::Node& node, RuleLimit& rule_limit) const;
  // The period: Envoy's `unit` (kept in rule_limit.unit too) or sluice's `period`, one of them.
  void ParsePeriod(const YAML::Node& node, RuleLimit& rule_limit, LimitSpec& spec) const;
  void ParseCalendar(const YAML::Node& node, Unit unit, LimitSpec& spec) const;
  // `share: {max, ttl}`: quota leasing for the limit (SharePolicy), refused for an algorithm
  // that cannot be leased.
  SharePolicy ParseShare(const YAML::Node& node, const RuleLimit& rule_limit) const;
  void ParseAfterDecision(const YAML::Node& node, int64_t limit, RuleLimit& rule_limit) const;
  FeedbackPolicy ParseFeedback(const YAML::Node& node, int64_t limit) const;
  AdaptivePolicy ParseAdaptive(const YAML::Node& node, int64_t limit) const;
  void MakeAdaptive(const YAML::Node& node, RuleLimit& rule_limit) const;
  // `concurrency: N` and its `lease_ttl`, when given.
  std::optional<ConcurrencyLimit> ParseConcurrency(const YAML::Node& node, const std::string& path);
  // Soft mode stores the limit enlarged by soft_percent (rounded down) and keeps the nominal
  // one for what clients are told.
  void Soften(RuleLimit& rule_limit, int64_t percent, const YAML::Node& node) const;

  std::string file_;  // Named in every error.
  CounterRegistry& counters_;
  const LimitChecker& check_limit_;  // The store's verdict, asked for every limit.
  const RuleFileLimits& limits_;
  YamlBudget& budget_;           // Shared by the files of one load.
  const std::string no_leases_;  // Why a concurrency rule is refused; empty: it is not.
};

// Sets RuleLimit::before in `next` from the limits `previous` held under the same identity
// (lineage.cc). RuleSet::Parse calls it when RuleLoadOptions::previous is set.
void InheritLimits(const LimitHistory& previous, RuleSet& next);

}  // namespace sluice::server
