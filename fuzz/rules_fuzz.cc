// A rules file (server/rules/rules.h): YAML text loaded as sluiced loads it at start and on
// reload, every limit checked by a memory store. A file that loads is then dumped as /rlconfig
// shows it and matched against a request built from its own first descriptors.

#include <cstddef>
#include <cstdint>
#include <string>

#include "server/rules/rules.h"
#include "sluice/memory_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  using namespace sluice::server;
  static const MemoryStore store;
  CounterRegistry counters;
  const absl::StatusOr<std::shared_ptr<const RuleSet>> rules =
      RuleSet::Parse({{"rules.yaml", std::string(reinterpret_cast<const char*>(data), size)}},
                     counters, [](const Limit& limit) { return store.CheckLimit(limit); });
  if (!rules.ok()) {
    return 0;
  }
  (void)DumpRules(**rules);
  for (const auto& domain : (*rules)->domains()) {
    // The first path down the tree, its values as written ('*' included), then one level less.
    std::vector<Entry> entries;
    for (const DescriptorLevel* level = &domain->descriptors; !level->nodes.empty();
         level = &level->nodes.front()->children) {
      const DescriptorNode& node = *level->nodes.front();
      entries.push_back({.key = node.key, .value = node.value.value_or("v")});
    }
    while (!entries.empty()) {
      (void)RuleSet::Match(*domain, entries);
      entries.pop_back();
    }
  }
  return 0;
}
