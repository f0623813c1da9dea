#include "server/rules/rules.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "fmt/format.h"
#include "yaml-cpp/yaml.h"

#include "sluice/duration.h"
#include "sluice/store.h"
#include "src/core/status.h"

namespace sluice::server {
namespace {

constexpr std::array<std::pair<Mode, std::string_view>, 4> kModes{{
    {Mode::kHard, "hard"},
    {Mode::kSoft, "soft"},
    {Mode::kShadow, "shadow"},
    {Mode::kElastic, "elastic"},
}};

// The one exception of this file: thrown by the YAML readers below and turned into a Status
// by Parse, so that every check can name the node it is about in a line of its own.
struct ConfigError {
  std::string message;
};

class FileParser {
 public:
  FileParser(std::string file, CounterRegistry& counters, const LimitChecker& check_limit)
      : file_(std::move(file)), counters_(counters), check_limit_(check_limit) {}

  std::unique_ptr<Domain> ParseDomain(const YAML::Node& root) {
    auto domain = std::make_unique<Domain>();
    domain->file = file_;
    domain->ip_keys = {"remote_address"};
    if (!root.IsMap()) {
      Fail(root, "a rules file must be a mapping with 'domain' and 'descriptors'");
    }
    CheckKeys(root, {"domain", "descriptors", "pools", "ip_keys", "ipv6_prefix", "auth"});
    domain->name = RequiredString(root, "domain");
    if (domain->name.empty()) {
      Fail(root["domain"], "'domain' must not be empty");
    }
    if (const YAML::Node ip_keys = root["ip_keys"]) {
      domain->ip_keys.clear();
      for (const YAML::Node& key : Sequence(ip_keys, "ip_keys")) {
        domain->ip_keys.push_back(String(key, "an entry of ip_keys"));
      }
    }
    if (const YAML::Node prefix = root["ipv6_prefix"]) {
      domain->ipv6_prefix = static_cast<int>(Integer(prefix, "ipv6_prefix", 1, 128));
    }
    if (const YAML::Node pools = root["pools"]) {
      if (!pools.IsMap()) {
        Fail(pools, "'pools' must map pool names to limits");
      }
      for (const auto& item : pools) {
        auto pool = std::make_unique<Pool>();
        pool->name = String(item.first, "a pool name");
        pool->limit = ParseLimit(item.second, fmt::format("{}.pool_{}", domain->name, pool->name));
        if (!pool->limit.limit) {
          Fail(item.second, "a pool must have a limit above 0");
        }
        domain->pools.push_back(std::move(pool));
      }
    }
    if (const YAML::Node auth = root["auth"]) {
      for (const YAML::Node& descriptor : Sequence(auth, "auth")) {
        std::vector<AuthEntry>& entries = domain->auth.emplace_back();
        for (const YAML::Node& entry : Sequence(descriptor, "an auth descriptor")) {
          CheckKeys(entry, {"key", "header"});
          std::string header = RequiredString(entry, "header");
          std::transform(header.begin(), header.end(), header.begin(),
                         [](unsigned char c) { return std::tolower(c); });
          entries.push_back({.key = RequiredString(entry, "key"), .header = std::move(header)});
        }
        if (entries.empty()) {
          Fail(descriptor, "an auth descriptor needs at least one entry");
        }
      }
    }
    if (const YAML::Node descriptors = root["descriptors"]) {
      ParseLevel(descriptors, *domain, domain->name, domain->descriptors);
    }
    return domain;
  }

 private:
  [[noreturn]] void Fail(const YAML::Node& node, std::string_view what) const {
    const YAML::Mark mark = node.Mark();
    throw ConfigError{fmt::format("{}:{}:{}: {}", file_, mark.line + 1, mark.column + 1, what)};
  }

  void CheckKeys(const YAML::Node& map, std::initializer_list<std::string_view> allowed) const {
    if (!map.IsMap()) {
      Fail(map, "expected a mapping");
    }
    for (const auto& item : map) {
      const std::string key = String(item.first, "a key");
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        std::string names;
        for (std::string_view name : allowed) {
          fmt::format_to(std::back_inserter(names), "{}{}", names.empty() ? "" : ", ", name);
        }
        Fail(item.first, fmt::format("unknown key '{}'; expected one of {}", key, names));
      }
    }
  }

  std::string String(const YAML::Node& node, std::string_view what) const {
    if (!node.IsScalar()) {
      Fail(node, fmt::format("{} must be a string", what));
    }
    return node.Scalar();
  }

  std::string RequiredString(const YAML::Node& map, const char* key) const {
    const YAML::Node node = map[key];
    if (!node) {
      Fail(map, fmt::format("missing '{}'", key));
    }
    return String(node, fmt::format("'{}'", key));
  }

  int64_t Integer(const YAML::Node& node, std::string_view what, int64_t min, int64_t max) const {
    int64_t value = 0;
    if (!node.IsScalar() || !YAML::convert<int64_t>::decode(node, value)) {
      Fail(node, fmt::format("{} must be an integer", what));
    }
    if (value < min || value > max) {
      Fail(node, fmt::format("{} must be between {} and {}, not {}", what, min, max, value));
    }
    return value;
  }

  bool Bool(const YAML::Node& node, std::string_view what) const {
    bool value = false;
    if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
      Fail(node, fmt::format("{} must be true or false", what));
    }
    return value;
  }

  const YAML::Node& Sequence(const YAML::Node& node, std::string_view what) const {
    if (!node.IsSequence()) {
      Fail(node, fmt::format("'{}' must be a list", what));
    }
    return node;
  }

  // A rate_limit (or an entry of `limits`, or a pool): envoy's unit and requests_per_unit, or
  // sluice's period, with algorithm, burst and buckets.
  RuleLimit ParseLimit(const YAML::Node& node, std::string default_name) const {
    CheckKeys(node, {"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm",
                     "period", "burst", "buckets"});
    RuleLimit rule_limit;
    rule_limit.named = static_cast<bool>(node["name"]);
    rule_limit.name = rule_limit.named ? String(node["name"], "'name'") : std::move(default_name);
    if (const YAML::Node replaces = node["replaces"]) {
      for (const YAML::Node& item : Sequence(replaces, "replaces")) {
        CheckKeys(item, {"name"});
        std::string name = RequiredString(item, "name");
        if (name.empty()) {
          Fail(item, "a 'replaces' entry needs a non-empty name");
        }
        if (name == rule_limit.name) {
          Fail(item, fmt::format("'{}' cannot replace itself", name));
        }
        rule_limit.replaces.push_back(std::move(name));
      }
    }
    if (const YAML::Node unlimited = node["unlimited"]; unlimited && Bool(unlimited, "unlimited")) {
      if (node["unit"] || node["period"]) {
        Fail(node, "an unlimited rate_limit has no unit or period");
      }
      rule_limit.unlimited = true;  // requests_per_unit is ignored, as envoyproxy/ratelimit does.
      rule_limit.counters = counters_.Get(rule_limit.name);
      return rule_limit;
    }
    const YAML::Node count = node["requests_per_unit"];
    if (!count) {
      Fail(node, "missing 'requests_per_unit'");
    }
    rule_limit.nominal = Integer(count, "requests_per_unit", 0, Limit::kMaxCount);
    LimitSpec spec{.limit = rule_limit.nominal};
    const YAML::Node unit = node["unit"];
    const YAML::Node period = node["period"];
    if (unit && period) {
      Fail(period, "give either 'unit' or 'period', not both");
    }
    if (unit) {
      const std::optional<Unit> parsed = ParseUnit(String(unit, "'unit'"));
      if (!parsed) {
        Fail(unit, fmt::format("unknown unit '{}'; expected second, minute, hour, day, week, "
                               "month or year",
                               unit.Scalar()));
      }
      rule_limit.unit = *parsed;
      spec.period = UnitPeriod(*parsed);
    } else if (period) {
      const absl::StatusOr<Micros> parsed = ParseDuration(String(period, "'period'"));
      if (!parsed.ok()) {
        Fail(period, internal::Message(parsed.status()));
      }
      spec.period = *parsed;
    } else {
      Fail(node, "missing 'unit' (or 'period')");
    }
    if (const YAML::Node algorithm = node["algorithm"]) {
      const absl::StatusOr<Algorithm> parsed = ParseAlgorithm(String(algorithm, "'algorithm'"));
      if (!parsed.ok()) {
        Fail(algorithm, internal::Message(parsed.status()));
      }
      spec.algorithm = *parsed;
    }
    if (const YAML::Node burst = node["burst"]) {
      spec.burst = Integer(burst, "burst", 1, Limit::kMaxCount);
    }
    if (const YAML::Node buckets = node["buckets"]) {
      spec.buckets = Integer(buckets, "buckets", 1, Limit::kMaxCount);
    }
    if (spec.limit > 0) {
      absl::StatusOr<Limit> limit = Limit::Create(spec);
      if (!limit.ok()) {
        Fail(node, internal::Message(limit.status()));
      }
      if (absl::Status s = check_limit_(*limit); !s.ok()) {
        Fail(node, internal::Message(s));
      }
      rule_limit.limit = *limit;
    }
    rule_limit.counters = counters_.Get(rule_limit.name);
    return rule_limit;
  }

  void ParseLevel(const YAML::Node& list, const Domain& domain, const std::string& parent_path,
                  DescriptorLevel& level) {
    for (const YAML::Node& node : Sequence(list, "descriptors")) {
      CheckKeys(node, {"key", "value", "rate_limit", "limits", "descriptors", "shadow_mode",
                       "detailed_metric", "value_to_metric", "mode", "soft_percent", "pool",
                       "concurrency", "lease_ttl"});
      auto descriptor = std::make_unique<DescriptorNode>();
      descriptor->key = RequiredString(node, "key");
      if (descriptor->key.empty()) {
        Fail(node["key"], "'key' must not be empty");
      }
      std::string path = fmt::format("{}.{}", parent_path, descriptor->key);
      if (const YAML::Node value = node["value"]) {
        std::string text = String(value, "'value'");
        path = fmt::format("{}_{}", path, text);
        if (!text.empty() && text.back() == '*') {
          text.pop_back();
          descriptor->wildcard = true;
        }
        descriptor->value = std::move(text);
      }
      descriptor->rule = ParseRule(node, domain, path);
      if (const YAML::Node children = node["descriptors"]) {
        ParseLevel(children, domain, path, descriptor->children);
      }
      for (const char* detailed : {"detailed_metric", "value_to_metric"}) {
        if (const YAML::Node flag = node[detailed];
            flag && Bool(flag, detailed) && descriptor->rule) {
          descriptor->rule->detailed_metric = true;
        }
      }
      Index(node, *descriptor, level);
      level.nodes.push_back(std::move(descriptor));
    }
  }

  void Index(const YAML::Node& node, const DescriptorNode& descriptor, DescriptorLevel& level) {
    DescriptorLevel::ByKey& by_key = level.by_key[descriptor.key];
    bool duplicate = false;
    if (!descriptor.value) {
      duplicate = by_key.any != nullptr;
      by_key.any = &descriptor;
    } else if (descriptor.wildcard) {
      for (const DescriptorNode* other : by_key.wildcards) {
        duplicate = duplicate || other->value == descriptor.value;
      }
      by_key.wildcards.push_back(&descriptor);
    } else {
      duplicate = !by_key.exact.emplace(*descriptor.value, &descriptor).second;
    }
    if (duplicate) {
      Fail(node, fmt::format("duplicate descriptor: key '{}'{} appears twice at this level",
                             descriptor.key,
                             descriptor.value ? fmt::format(" with value '{}{}'", *descriptor.value,
                                                            descriptor.wildcard ? "*" : "")
                                              : ""));
    }
  }

  std::optional<Rule> ParseRule(const YAML::Node& node, const Domain& domain,
                                const std::string& path) {
    const YAML::Node rate_limit = node["rate_limit"];
    const YAML::Node limits = node["limits"];
    const YAML::Node mode = node["mode"];
    std::optional<ConcurrencyLimit> concurrency = ParseConcurrency(node, path);
    if (!rate_limit && !limits) {
      for (const char* key : {"shadow_mode", "mode", "soft_percent", "pool"}) {
        if (node[key]) {
          Fail(node[key],
               fmt::format("'{}' needs a 'rate_limit' or 'limits' on this descriptor", key));
        }
      }
      if (!concurrency) {
        return std::nullopt;
      }
      return Rule{.path = path, .concurrency = std::move(concurrency)};
    }
    if (rate_limit && limits) {
      Fail(limits, "give either 'rate_limit' or 'limits', not both");
    }
    Rule rule;
    rule.path = path;
    if (rate_limit) {
      rule.limits.push_back(ParseLimit(rate_limit, path));
      rule.unlimited = rule.limits.back().unlimited;
    } else {
      size_t index = 0;
      for (const YAML::Node& item : Sequence(limits, "limits")) {
        rule.limits.push_back(ParseLimit(item, fmt::format("{}[{}]", path, index++)));
        if (rule.limits.back().unlimited) {
          Fail(item["unlimited"], "'unlimited' belongs in a rate_limit, not in 'limits'");
        }
      }
      if (rule.limits.empty()) {
        Fail(limits, "'limits' must list at least one limit");
      }
    }
    for (size_t i = 0; i < rule.limits.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (rule.limits[i].limit && rule.limits[i].limit == rule.limits[j].limit) {
          Fail(limits, fmt::format("limits {} and {} are the same limit", j, i));
        }
        if (rule.limits[i].name == rule.limits[j].name) {
          Fail(limits, fmt::format("two limits are named '{}'", rule.limits[i].name));
        }
      }
    }
    if (mode) {
      const std::string name = String(mode, "'mode'");
      const auto* found = std::find_if(kModes.begin(), kModes.end(),
                                       [&](const auto& m) { return m.second == name; });
      if (found == kModes.end()) {
        Fail(mode, fmt::format("unknown mode '{}'; expected hard, soft, shadow or elastic", name));
      }
      rule.mode = found->first;
    }
    if (const YAML::Node shadow = node["shadow_mode"]; shadow && Bool(shadow, "shadow_mode")) {
      if (mode && rule.mode != Mode::kShadow) {
        Fail(shadow, fmt::format("shadow_mode: true contradicts mode: {}", ModeName(rule.mode)));
      }
      rule.mode = Mode::kShadow;
    }
    if (const YAML::Node percent = node["soft_percent"]) {
      if (rule.mode != Mode::kSoft) {
        Fail(percent, "'soft_percent' needs mode: soft");
      }
      rule.soft_percent = Integer(percent, "soft_percent", 1, 1000);
    } else if (rule.mode == Mode::kSoft) {
      Fail(mode, "mode: soft needs 'soft_percent'");
    }
    if (rule.mode == Mode::kSoft) {
      for (size_t i = 0; i < rule.limits.size(); ++i) {
        Soften(rule.limits[i], rule.soft_percent, rate_limit ? rate_limit : limits[i]);
      }
    }
    if (const YAML::Node pool = node["pool"]) {
      if (rule.mode != Mode::kElastic) {
        Fail(pool, "'pool' needs mode: elastic");
      }
      const std::string name = String(pool, "'pool'");
      for (const auto& candidate : domain.pools) {
        if (candidate->name == name) {
          rule.pool = candidate.get();
        }
      }
      if (rule.pool == nullptr) {
        Fail(pool, fmt::format("no pool named '{}' in this file's 'pools'", name));
      }
    } else if (rule.mode == Mode::kElastic) {
      Fail(mode, "mode: elastic needs a 'pool' to borrow from");
    }
    if (rule.unlimited && rule.mode != Mode::kHard && rule.mode != Mode::kShadow) {
      Fail(mode, "an unlimited rule has no mode");
    }
    if (rule.unlimited && concurrency) {
      Fail(node["concurrency"], "an unlimited rule has no concurrency limit");
    }
    rule.concurrency = std::move(concurrency);
    return rule;
  }

  // `concurrency: N` and its `lease_ttl`, when given.
  std::optional<ConcurrencyLimit> ParseConcurrency(const YAML::Node& node,
                                                   const std::string& path) {
    const YAML::Node capacity = node["concurrency"];
    const YAML::Node ttl = node["lease_ttl"];
    if (!capacity) {
      if (ttl) {
        Fail(ttl, "'lease_ttl' needs 'concurrency' on this descriptor");
      }
      return std::nullopt;
    }
    ConcurrencyLimit concurrency;
    concurrency.name = path + ":concurrency";
    concurrency.capacity = Integer(capacity, "concurrency", 1, kMaxConcurrency);
    if (ttl) {
      const absl::StatusOr<Micros> parsed = ParseDuration(String(ttl, "'lease_ttl'"));
      if (!parsed.ok()) {
        Fail(ttl, fmt::format("lease_ttl: {}", internal::Message(parsed.status())));
      }
      if (*parsed <= Micros{0} || *parsed > kMaxLeaseTtl) {
        Fail(ttl, fmt::format("lease_ttl must be more than 0 and at most {}",
                              FormatDuration(kMaxLeaseTtl)));
      }
      concurrency.lease_ttl = *parsed;
    }
    concurrency.counters = counters_.Get(concurrency.name);
    return concurrency;
  }

  // Soft mode stores the limit enlarged by soft_percent (rounded down) and keeps the nominal
  // one for what clients are told.
  void Soften(RuleLimit& rule_limit, int64_t percent, const YAML::Node& node) const {
    if (!rule_limit.limit) {
      return;
    }
    const Limit& limit = *rule_limit.limit;
    auto enlarge = [&](int64_t n) {
      return n + static_cast<int64_t>(static_cast<__int128>(n) * percent / 100);
    };
    LimitSpec spec{.algorithm = limit.algorithm(),
                   .limit = enlarge(limit.limit()),
                   .period = limit.period(),
                   .burst = enlarge(limit.burst()),
                   .buckets = limit.buckets()};
    absl::StatusOr<Limit> softened = Limit::Create(spec);
    if (!softened.ok()) {
      Fail(node, fmt::format("with soft_percent: {}", internal::Message(softened.status())));
    }
    if (absl::Status s = check_limit_(*softened); !s.ok()) {
      Fail(node, fmt::format("with soft_percent: {}", internal::Message(s)));
    }
    rule_limit.soft_extra = softened->burst() - limit.burst();
    rule_limit.limit = *softened;
  }

  std::string file_;
  CounterRegistry& counters_;
  const LimitChecker& check_limit_;
};

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(fmt::format("{}: cannot be read", path));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(fmt::format("{}: read failed", path));
  }
  return text.str();
}

}  // namespace

std::string_view ModeName(Mode mode) {
  for (const auto& [m, name] : kModes) {
    if (m == mode) {
      return name;
    }
  }
  return "unknown";
}

absl::StatusOr<std::shared_ptr<const RuleSet>> RuleSet::Load(const std::string& path,
                                                             CounterRegistry& counters,
                                                             const LimitChecker& check_limit) {
  std::vector<std::string> paths;
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    for (const auto& entry : std::filesystem::directory_iterator(path, error)) {
      const std::string extension = entry.path().extension().string();
      if (entry.is_regular_file() && (extension == ".yaml" || extension == ".yml")) {
        paths.push_back(entry.path().string());
      }
    }
    if (error) {
      return absl::InvalidArgumentError(fmt::format("{}: {}", path, error.message()));
    }
    std::sort(paths.begin(), paths.end());
  } else {
    paths.push_back(path);
  }
  std::vector<std::pair<std::string, std::string>> files;
  for (const std::string& file : paths) {
    absl::StatusOr<std::string> text = ReadFile(file);
    if (!text.ok()) {
      return text.status();
    }
    files.emplace_back(file, *std::move(text));
  }
  return Parse(files, counters, check_limit);
}

absl::StatusOr<std::shared_ptr<const RuleSet>> RuleSet::Parse(
    const std::vector<std::pair<std::string, std::string>>& files, CounterRegistry& counters,
    const LimitChecker& check_limit) {
  auto rules = std::make_shared<RuleSet>();
  for (const auto& [file, text] : files) {
    try {
      const YAML::Node root = YAML::Load(text);
      if (!root || root.IsNull()) {
        return absl::InvalidArgumentError(fmt::format("{}:1:1: the file is empty", file));
      }
      FileParser parser(file, counters, check_limit);
      std::unique_ptr<Domain> domain = parser.ParseDomain(root);
      if (const Domain* other = rules->FindDomain(domain->name)) {
        return absl::InvalidArgumentError(fmt::format(
            "{}:1:1: domain '{}' is already defined in {}", file, domain->name, other->file));
      }
      rules->domains_.push_back(std::move(domain));
    } catch (const ConfigError& e) {
      return absl::InvalidArgumentError(e.message);
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(
          fmt::format("{}:{}:{}: {}", file, e.mark.line + 1, e.mark.column + 1, e.msg));
    }
  }
  return rules;
}

}  // namespace sluice::server
