// RuleSet::Load and Parse: the rules files read, each file's YAML made to mean what
// envoyproxy/ratelimit's decoder makes of it (a key with no value is no key), and parsed into
// its domain by FileParser (parser.h), a new domain or, when domains are merged, one an earlier
// file defined.

#include <malloc.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "yaml-cpp/depthguard.h"
#include "yaml-cpp/yaml.h"

#include "server/rules/parser.h"
#include "server/rules/rules.h"
#include "server/rules/scan.h"

namespace sluice::server {
namespace {

// The text of `path`, read up to `max_bytes` and one more (ScanYaml refuses what is over).
absl::StatusOr<std::string> ReadFile(const std::string& path, uint64_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(fmt::format("{}: cannot be read", path));
  }
  std::string text;
  std::array<char, 64 * 1024> chunk;
  while (in && text.size() <= max_bytes) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    text.append(chunk.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) {
    return absl::InvalidArgumentError(fmt::format("{}: read failed", path));
  }
  return text;
}

// Removes every key whose value is null (`descriptors:` with nothing after it, `replaces: ~`)
// from the mappings of `node`, at any depth but inside a `metadata` mapping, where null is a
// value. envoyproxy/ratelimit decodes a null into a zero value (an empty list, no rate_limit,
// false, ""), which for every key of the format is what leaving the key out means.
void RemoveNulls(YAML::Node node) {
  if (node.IsSequence()) {
    for (YAML::Node item : node) {
      RemoveNulls(item);
    }
    return;
  }
  if (!node.IsMap()) {
    return;
  }
  std::vector<YAML::Node> nulls;
  for (const auto& item : node) {
    if (item.second.IsNull()) {
      nulls.push_back(item.first);
    } else if (!(item.first.IsScalar() && item.first.Scalar() == "metadata")) {
      RemoveNulls(item.second);
    }
  }
  for (const YAML::Node& key : nulls) {
    node.remove(key);
  }
}

// Gives the memory of the YAML trees back to the system when a load ends, loaded or refused.
// yaml-cpp's tree of a file costs about 600 bytes a node, 6 KB for a per-value rule: five times
// what the rule keeps. Freed, it stayed in glibc's heap, which trims only its top, while the
// rules' own allocations are interleaved with it: a file of 100,000 per-value rules left
// sluiced 630 MB larger where the rules hold 110 MB.
struct TrimHeapOnExit {
  TrimHeapOnExit() = default;
  TrimHeapOnExit(const TrimHeapOnExit&) = delete;
  TrimHeapOnExit& operator=(const TrimHeapOnExit&) = delete;
  ~TrimHeapOnExit() {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
  }
};

}  // namespace

absl::StatusOr<std::vector<std::string>> RuleSet::Files(const std::string& path,
                                                        bool skip_dotfiles) {
  std::vector<std::string> paths;
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    // Folders too, as envoyproxy/ratelimit's runtime reads them (a symlink to a folder is not
    // followed: `path` itself may be one, as their RUNTIME_ROOT's `current` is).
    std::filesystem::recursive_directory_iterator it(path, error);
    for (; !error && it != std::filesystem::recursive_directory_iterator(); it.increment(error)) {
      const std::filesystem::directory_entry& entry = *it;
      const std::string name = entry.path().filename().string();
      if (skip_dotfiles && name.starts_with('.')) {
        it.disable_recursion_pending();
        continue;
      }
      if (entry.is_directory() && it.depth() + 1 > kMaxFolderDepth) {
        return absl::InvalidArgumentError(fmt::format("{}: folders nested more than {} deep",
                                                      entry.path().string(), kMaxFolderDepth));
      }
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
  return paths;
}

absl::StatusOr<std::shared_ptr<const RuleSet>> RuleSet::Load(const std::string& path,
                                                             CounterRegistry& counters,
                                                             const LimitChecker& check_limit,
                                                             const RuleLoadOptions& options) {
  absl::StatusOr<std::vector<std::string>> paths = Files(path, options.skip_dotfiles);
  if (!paths.ok()) {
    return paths.status();
  }
  std::vector<std::pair<std::string, std::string>> files;
  uint64_t bytes = 0;
  for (const std::string& file : *paths) {
    const uint64_t room =
        options.limits.max_file_bytes - std::min(bytes, options.limits.max_file_bytes);
    absl::StatusOr<std::string> text = ReadFile(file, room);
    if (!text.ok()) {
      return text.status();
    }
    bytes += text->size();
    files.emplace_back(file, *std::move(text));
    if (bytes > options.limits.max_file_bytes) {
      break;  // Parse names the file and the limit.
    }
  }
  return Parse(files, counters, check_limit, options);
}

absl::StatusOr<std::shared_ptr<const RuleSet>> RuleSet::Parse(
    const std::vector<std::pair<std::string, std::string>>& files, CounterRegistry& counters,
    const LimitChecker& check_limit, const RuleLoadOptions& options) {
  const TrimHeapOnExit trim;
  auto rules = std::make_shared<RuleSet>();
  YamlBudget budget;
  for (const auto& [file, text] : files) {
    try {
      ScanYaml(file, text, options.limits, budget);
      YAML::Node root = YAML::Load(text);
      if (!root || root.IsNull()) {
        return absl::InvalidArgumentError(fmt::format("{}:1:1: the file is empty", file));
      }
      RemoveNulls(root);
      FileParser parser(file, counters, check_limit, options.limits, budget, options.no_leases);
      const std::string name = parser.DomainName(root);
      const auto known = std::find_if(rules->domains_.begin(), rules->domains_.end(),
                                      [&](const auto& domain) { return domain->name == name; });
      if (known != rules->domains_.end() && !options.merge_domains) {
        return absl::InvalidArgumentError(
            fmt::format("{}:1:1: domain '{}' is already defined in {} (MERGE_DOMAIN_CONFIG "
                        "merges the files of a domain)",
                        file, name, (*known)->file));
      }
      if (known != rules->domains_.end()) {
        parser.ParseDomain(root, **known, /*merging=*/true);
        continue;
      }
      auto domain = std::make_unique<Domain>();
      domain->name = name;
      domain->file = file;
      domain->ip_keys = {"remote_address"};
      parser.ParseDomain(root, *domain, /*merging=*/false);
      rules->domains_.push_back(std::move(domain));
    } catch (const ConfigError& e) {
      return absl::InvalidArgumentError(e.message);
    } catch (const YAML::DeepRecursion& e) {  // ScanYaml's depth limit is far lower.
      return absl::InvalidArgumentError(fmt::format("{}:{}:{}: nesting deeper than {} levels", file,
                                                    e.mark.line + 1, e.mark.column + 1, e.depth()));
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(
          fmt::format("{}:{}:{}: {}", file, e.mark.line + 1, e.mark.column + 1, e.msg));
    }
  }
  if (options.previous != nullptr) {
    InheritLimits(*options.previous, *rules);
  }
  return rules;
}

}  // namespace sluice::server
