#pragma once

// Explanations of decisions: what a check asked with "explain" (CheckRequest::explain,
// AdHocRequest::explain) is answered beside its decision. For each descriptor, the rule it
// matched or why none did; for each limit that applied, the key it counts under, its figures,
// its own decision, and the state of its key just before and just after; and which limit the
// answer's figures came from. docs/server.md ("Explain") documents the answer.
//
// The states are two queries of the store (cost 0, which changes nothing) around the decision,
// at the decision's instant: on a shared store another request may land between them, so they
// show the key as it stood then, not a lock on it.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "server/rules/rules.h"
#include "server/service/service.h"

namespace sluice::server {

// One limit that applied, and what it did.
struct LimitExplanation {
  // The limit as the answer's "limits" tell it: name, figures, mode, its decision and flags.
  LimitOutcome outcome;
  // Where it comes from: the rule's path, "<domain>.override" for Envoy's limit in the request,
  // "pool <name>" for an elastic pool, "ad hoc" for a limit in the request.
  std::string source;
  std::string key;  // The key it counts under, as KeyNames shows it.
  // Its key's state, as a query (cost 0) answers it in the figures the answer uses, just
  // before and just after the decision; empty where there is nothing to ask (unlimited, a
  // limit that allows nothing, a limit replaced) or the query failed (Explanation::error).
  std::optional<Decision> before;
  std::optional<Decision> after;
  std::string verdict;  // What it did, in words ("admitted", "denied", "would deny: shadow").
  // False for a limit of the matched rule that another's `replaces` dropped: it was not asked,
  // and outcome.decision means nothing.
  bool decided = true;
};

// One descriptor of the request, and the limits that applied to it.
struct DescriptorExplanation {
  std::vector<Entry> entries;  // As sent.
  std::string rule;            // The rule it matched; empty when none.
  std::string match;           // How it matched, or why nothing did, in a sentence.
  std::vector<LimitExplanation> limits;
};

struct Explanation {
  std::string domain;  // Empty for an ad hoc check.
  int64_t cost = 0;
  bool admitted = true;
  std::vector<DescriptorExplanation> descriptors;
  // The limit the answer's figures came from: when denied, the denying limit whose
  // retry_after the answer carries; when admitted, the one with the fewest remaining. Empty
  // when no limit applied.
  struct At {
    size_t descriptor = 0;
    size_t limit = 0;
  };
  std::optional<At> decided_by;
  std::string error;  // Why a state query failed, when one did (the decision stands).
};

}  // namespace sluice::server
