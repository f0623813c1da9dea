#include "server/daemon/check_config.h"

#include <cstdio>
#include <vector>

#include "fmt/format.h"

#include "server/stats/metrics.h"
#include "sluice/memcached_store.h"
#include "sluice/memory_store.h"
#include "sluice/redis_store.h"
#include "src/core/status.h"

namespace sluice::server {

int CheckConfig(const Flags& flags, const std::string& path) {
  const auto fail = [&](std::string_view message) {
    fmt::print(stderr, "sluiced: {}\nsluiced: {}: the check failed\n", message, path);
    return 2;
  };
  const bool memcached = flags.store.starts_with("memcached://");
  if (memcached) {
    if (absl::StatusOr<MemcachedStoreOptions> url = ParseMemcachedUrl(flags.store); !url.ok()) {
      return fail(fmt::format("--store: {}", internal::Message(url.status())));
    }
  } else if (flags.store != "memory") {
    if (absl::StatusOr<RedisStoreOptions> url = ParseRedisUrl(flags.store); !url.ok()) {
      return fail(fmt::format("--store: {}", internal::Message(url.status())));
    }
  }
  const LimitChecker check_limit = flags.store == "memory" ? &MemoryStore::Supports
                                   : memcached             ? &MemcachedStore::Supports
                                                           : &RedisStore::Supports;
  const RuleLoadOptions options{.merge_domains = flags.merge_domains,
                                .skip_dotfiles = flags.skip_dotfiles,
                                .no_leases = memcached ? MemcachedStore::kNoLeases : ""};
  absl::StatusOr<std::vector<std::string>> files = RuleSet::Files(path, flags.skip_dotfiles);
  if (!files.ok()) {
    return fail(internal::Message(files.status()));
  }
  if (files->empty()) {
    return fail(fmt::format("{}: no .yaml or .yml file", path));
  }
  // Each file alone first, so that one broken file does not hide the others' errors.
  int errors = 0;
  for (const std::string& file : *files) {
    CounterRegistry counters;
    if (absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
            RuleSet::Load(file, counters, check_limit, options);
        !rules.ok()) {
      fmt::print(stderr, "sluiced: {}\n", internal::Message(rules.status()));
      ++errors;
    }
  }
  CounterRegistry counters;
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
      errors > 0 ? absl::CancelledError() : RuleSet::Load(path, counters, check_limit, options);
  if (errors == 0 && !rules.ok()) {
    fmt::print(stderr, "sluiced: {}\n", internal::Message(rules.status()));
    ++errors;
  }
  if (errors > 0) {
    fmt::print(stderr, "sluiced: {}: {} error(s) in {} file(s); the check failed\n", path, errors,
               files->size());
    return 2;
  }
  fmt::print("{}: the rules are valid: {} file(s), {} domain(s), {} rule limit(s)\n", path,
             files->size(), (*rules)->domains().size(), counters.All().size());
  for (const auto& domain : (*rules)->domains()) {
    fmt::print("  domain '{}' from {}\n", domain->name, domain->file);
  }
  return 0;
}

}  // namespace sluice::server
