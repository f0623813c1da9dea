#pragma once

// Rules for the server's tests: parsed from text, every limit checked by the store they will
// be decided in, as sluiced loads a file.

#include <memory>
#include <string>
#include <string_view>

#include "gtest/gtest.h"

#include "server/rules/rules.h"
#include "sluice/store.h"

namespace sluice::testing {

// The rules in `text` (named `file` in errors); a text that does not load fails the test and
// gives no rules. `previous`: the rules they replace, as a reload loads them.
inline std::shared_ptr<const server::RuleSet> MustParseRules(
    std::string_view text, server::CounterRegistry& counters, const Store& store,
    std::string file = "rules.yaml", std::shared_ptr<const server::RuleSet> previous = nullptr) {
  auto history = previous != nullptr
                     ? std::make_shared<const server::LimitHistory>(server::HistoryOf(*previous))
                     : nullptr;
  absl::StatusOr<std::shared_ptr<const server::RuleSet>> rules =
      server::RuleSet::Parse({{std::move(file), std::string(text)}}, counters,
                             [&store](const Limit& limit) { return store.CheckLimit(limit); },
                             {.previous = std::move(history)});
  EXPECT_TRUE(rules.ok()) << rules.status();
  return rules.ok() ? *rules : std::make_shared<const server::RuleSet>();
}

}  // namespace sluice::testing
