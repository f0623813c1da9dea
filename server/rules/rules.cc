#include "server/rules/rules.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

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

std::string FileParser::DomainName(const YAML::Node& root) const {
  if (!root.IsMap()) {
    Fail(root, "a rules file must be a mapping with 'domain' and 'descriptors'");
  }
  CheckKeys(root, {"domain", "descriptors", "pools", "ip_keys", "ipv6_prefix", "auth"});
  std::string name = RequiredString(root, "domain");
  if (name.empty()) {
    Fail(root["domain"], "'domain' must not be empty");
  }
  return name;
}

namespace {

bool AnyShareThreshold(const DescriptorLevel& level) {
  return std::any_of(level.nodes.begin(), level.nodes.end(), [](const auto& node) {
    return node->share_threshold || AnyShareThreshold(node->children);
  });
}

}  // namespace

void FileParser::ParseDomain(const YAML::Node& root, Domain& domain, bool merging) {
  ParseDomainSettings(root, domain, merging);
  if (const YAML::Node descriptors = root["descriptors"]) {
    ParseLevel(descriptors, domain, domain.name, domain.descriptors);
  }
  domain.share_threshold = AnyShareThreshold(domain.descriptors);
}

void FileParser::ParseDomainSettings(const YAML::Node& root, Domain& domain, bool merging) const {
  // A domain merged from several files has one set of IP keys for all of its descriptors.
  if (const YAML::Node ip_keys = root["ip_keys"]) {
    std::vector<std::string> keys;
    for (const YAML::Node& key : Sequence(ip_keys, "ip_keys")) {
      keys.push_back(String(key, "an entry of ip_keys"));
    }
    if (merging && keys != domain.ip_keys) {
      Fail(ip_keys, fmt::format("'ip_keys' differs from those of domain '{}' in {}", domain.name,
                                domain.file));
    }
    domain.ip_keys = std::move(keys);
  }
  if (const YAML::Node prefix = root["ipv6_prefix"]) {
    const int bits = static_cast<int>(Integer(prefix, "ipv6_prefix", 1, 128));
    if (merging && bits != domain.ipv6_prefix) {
      Fail(prefix, fmt::format("'ipv6_prefix' differs from that of domain '{}' in {}", domain.name,
                               domain.file));
    }
    domain.ipv6_prefix = bits;
  }
  if (const YAML::Node pools = root["pools"]) {
    if (!pools.IsMap()) {
      Fail(pools, "'pools' must map pool names to limits");
    }
    for (const auto& item : pools) {
      auto pool = std::make_unique<Pool>();
      pool->name = String(item.first, "a pool name");
      for (const auto& other : domain.pools) {
        if (other->name == pool->name) {
          Fail(item.first,
               fmt::format("pool '{}' is already defined in domain '{}'", pool->name, domain.name));
        }
      }
      pool->limit = ParseLimit(item.second, fmt::format("{}.pool_{}", domain.name, pool->name));
      if (!pool->limit.limit) {
        Fail(item.second, "a pool must have a limit above 0");
      }
      domain.pools.push_back(std::move(pool));
    }
  }
  if (const YAML::Node auth = root["auth"]) {
    ParseAuth(auth, domain);
  }
}

void FileParser::ParseAuth(const YAML::Node& auth, Domain& domain) const {
  for (const YAML::Node& descriptor : Sequence(auth, "auth")) {
    std::vector<AuthEntry>& entries = domain.auth.emplace_back();
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
    const std::string text = node.IsScalar() ? node.Scalar() : "";
    const std::string_view digits =
        std::string_view(text).substr(text.starts_with('-') || text.starts_with('+'));
    if (!digits.empty() &&
        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      Fail(node, fmt::format("{} {} is out of range: it must be between {} and {}", what, text, min,
                             max));
    }
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
    level.nodes.push_back(ParseDescriptor(node, domain, parent_path, level));
  }
}

std::unique_ptr<DescriptorNode> FileParser::ParseDescriptor(const YAML::Node& node,
                                                            const Domain& domain,
                                                            const std::string& parent_path,
                                                            DescriptorLevel& level) {
  CheckKeys(node, {"key", "value", "rate_limit", "limits", "descriptors", "shadow_mode",
                   "quota_mode", "detailed_metric", "value_to_metric", "share_threshold",
                   "metadata", "mode", "soft_percent", "pool", "concurrency", "lease_ttl"});
  if (++budget_.descriptors > limits_.max_descriptors) {
    Fail(node,
         fmt::format("more than {} descriptors (the descriptor limit)", limits_.max_descriptors));
  }
  auto descriptor = std::make_unique<DescriptorNode>();
  descriptor->key = RequiredString(node, "key");
  if (descriptor->key.empty()) {
    Fail(node["key"], "'key' must not be empty");
  }
  ParseValue(node, *descriptor);
  std::string path = fmt::format("{}.{}", parent_path, descriptor->key);
  if (descriptor->value) {
    path = fmt::format("{}_{}", path, *descriptor->value);
  }
  descriptor->rule = ParseRule(node, domain, path);
  ParseFlags(node, path, *descriptor);
  if (const YAML::Node children = node["descriptors"]) {
    ParseLevel(children, domain, path, descriptor->children);
  }
  Index(node, *descriptor, path, level);
  return descriptor;
}

void FileParser::ParseValue(const YAML::Node& node, DescriptorNode& descriptor) const {
  const YAML::Node value = node["value"];
  if (!value) {
    return;
  }
  std::string text = String(value, "'value'");
  if (text.empty()) {
    return;  // As envoyproxy/ratelimit: an empty value is no value.
  }
  descriptor.pattern = text;
  if (text.find('*') != std::string::npos) {
    descriptor.wildcard = true;
    size_t start = 0;
    for (size_t star = text.find('*'); star != std::string::npos; star = text.find('*', start)) {
      descriptor.segments.push_back(text.substr(start, star - start));
      start = star + 1;
    }
    descriptor.segments.push_back(text.substr(start));
  }
  descriptor.value = std::move(text);
}

void FileParser::ParseFlags(const YAML::Node& node, const std::string& path,
                            DescriptorNode& descriptor) const {
  auto flag = [&](const char* key) {
    const YAML::Node value = node[key];
    return value && Bool(value, key);
  };
  const bool detailed = flag("detailed_metric");
  const bool value_to_metric = flag("value_to_metric");
  const bool quota_mode = flag("quota_mode");
  flag("shadow_mode");  // Read with the rule's mode, when there is a rule; checked here.
  descriptor.share_threshold = flag("share_threshold");
  if (descriptor.share_threshold && !descriptor.wildcard) {
    Fail(node["share_threshold"],
         fmt::format("share_threshold needs a wildcard value (one with '*'); descriptor '{}' "
                     "has none",
                     path));
  }
  std::string metadata;
  if (const YAML::Node map = node["metadata"]) {
    metadata = MetadataJson(map);
  }
  if (descriptor.rule) {
    descriptor.rule->detailed_metric = detailed || value_to_metric;
    descriptor.rule->quota_mode = quota_mode;
    descriptor.rule->metadata_json = std::move(metadata);
  }
}

void FileParser::Index(const YAML::Node& node, const DescriptorNode& descriptor,
                       const std::string& path, DescriptorLevel& level) const {
  DescriptorLevel::ByKey& by_key = level.by_key[descriptor.key];
  bool duplicate = false;
  if (!descriptor.value) {
    duplicate = by_key.any != nullptr;
    by_key.any = &descriptor;
  } else {
    // Wildcards too, by their text: a request's value equal to it matches it first, as theirs.
    duplicate = !by_key.exact.emplace(*descriptor.value, &descriptor).second;
    if (descriptor.wildcard && !duplicate) {
      by_key.wildcards.push_back(&descriptor);
    }
  }
  if (duplicate) {
    Fail(node, fmt::format("duplicate descriptor '{}': key '{}'{} is already at this level", path,
                           descriptor.key,
                           descriptor.value ? fmt::format(" with value '{}'", *descriptor.value)
                                            : " with no value"));
  }
}

std::optional<Rule> FileParser::ParseRule(const YAML::Node& node, const Domain& domain,
                                          const std::string& path) {
  const YAML::Node rate_limit = node["rate_limit"];
  const YAML::Node limits = node["limits"];
  const YAML::Node mode = node["mode"];
  std::optional<ConcurrencyLimit> concurrency = ParseConcurrency(node, path);
  if (!rate_limit && !limits) {
    // shadow_mode is not among them: envoyproxy/ratelimit ignores it without a rate_limit.
    for (const char* key : {"mode", "soft_percent", "pool"}) {
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

}  // namespace sluice::server
