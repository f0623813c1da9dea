#include "server/rules/rules.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "fmt/format.h"
#include "yaml-cpp/yaml.h"

#include "server/rules/parser.h"

namespace sluice::server {
namespace {

constexpr std::array<std::pair<Mode, std::string_view>, 4> kModes{{
    {Mode::kHard, "hard"},
    {Mode::kSoft, "soft"},
    {Mode::kShadow, "shadow"},
    {Mode::kElastic, "elastic"},
}};

}  // namespace

std::string_view ModeName(Mode mode) {
  for (const auto& [m, name] : kModes) {
    if (m == mode) {
      return name;
    }
  }
  return "unknown";
}

std::unique_ptr<Domain> FileParser::ParseDomain(const YAML::Node& root) {
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

void FileParser::Fail(const YAML::Node& node, std::string_view what) const {
  const YAML::Mark mark = node.Mark();
  throw ConfigError{fmt::format("{}:{}:{}: {}", file_, mark.line + 1, mark.column + 1, what)};
}

void FileParser::CheckKeys(const YAML::Node& map,
                           std::initializer_list<std::string_view> allowed) const {
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

std::string FileParser::String(const YAML::Node& node, std::string_view what) const {
  if (!node.IsScalar()) {
    Fail(node, fmt::format("{} must be a string", what));
  }
  return node.Scalar();
}

std::string FileParser::RequiredString(const YAML::Node& map, const char* key) const {
  const YAML::Node node = map[key];
  if (!node) {
    Fail(map, fmt::format("missing '{}'", key));
  }
  return String(node, fmt::format("'{}'", key));
}

int64_t FileParser::Integer(const YAML::Node& node, std::string_view what, int64_t min,
                            int64_t max) const {
  int64_t value = 0;
  if (!node.IsScalar() || !YAML::convert<int64_t>::decode(node, value)) {
    Fail(node, fmt::format("{} must be an integer", what));
  }
  if (value < min || value > max) {
    Fail(node, fmt::format("{} must be between {} and {}, not {}", what, min, max, value));
  }
  return value;
}

bool FileParser::Bool(const YAML::Node& node, std::string_view what) const {
  bool value = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
    Fail(node, fmt::format("{} must be true or false", what));
  }
  return value;
}

const YAML::Node& FileParser::Sequence(const YAML::Node& node, std::string_view what) const {
  if (!node.IsSequence()) {
    Fail(node, fmt::format("'{}' must be a list", what));
  }
  return node;
}

void FileParser::ParseLevel(const YAML::Node& list, const Domain& domain,
                            const std::string& parent_path, DescriptorLevel& level) {
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

void FileParser::Index(const YAML::Node& node, const DescriptorNode& descriptor,
                       DescriptorLevel& level) {
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
    Fail(node,
         fmt::format("duplicate descriptor: key '{}'{} appears twice at this level", descriptor.key,
                     descriptor.value ? fmt::format(" with value '{}{}'", *descriptor.value,
                                                    descriptor.wildcard ? "*" : "")
                                      : ""));
  }
}

std::optional<Rule> FileParser::ParseRule(const YAML::Node& node, const Domain& domain,
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
  ParseRuleLimits(rate_limit, limits, rule);
  ParseMode(node, mode, rule);
  ParseSoftPercent(node, mode, rate_limit, limits, rule);
  ParsePool(node, mode, domain, rule);
  if (rule.unlimited && rule.mode != Mode::kHard && rule.mode != Mode::kShadow) {
    Fail(mode, "an unlimited rule has no mode");
  }
  if (rule.unlimited && concurrency) {
    Fail(node["concurrency"], "an unlimited rule has no concurrency limit");
  }
  rule.concurrency = std::move(concurrency);
  return rule;
}

void FileParser::ParseRuleLimits(const YAML::Node& rate_limit, const YAML::Node& limits,
                                 Rule& rule) const {
  if (rate_limit) {
    rule.limits.push_back(ParseLimit(rate_limit, rule.path));
    rule.unlimited = rule.limits.back().unlimited;
  } else {
    size_t index = 0;
    for (const YAML::Node& item : Sequence(limits, "limits")) {
      rule.limits.push_back(ParseLimit(item, fmt::format("{}[{}]", rule.path, index++)));
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
}

void FileParser::ParseMode(const YAML::Node& node, const YAML::Node& mode, Rule& rule) const {
  if (mode) {
    const std::string name = String(mode, "'mode'");
    const auto* found =
        std::find_if(kModes.begin(), kModes.end(), [&](const auto& m) { return m.second == name; });
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
}

void FileParser::ParseSoftPercent(const YAML::Node& node, const YAML::Node& mode,
                                  const YAML::Node& rate_limit, const YAML::Node& limits,
                                  Rule& rule) const {
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
}

void FileParser::ParsePool(const YAML::Node& node, const YAML::Node& mode, const Domain& domain,
                           Rule& rule) const {
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
}

namespace {

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
