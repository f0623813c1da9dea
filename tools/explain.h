#pragma once

// `sluice explain`: asks a running sluiced about one request with "explain" (POST /v1/check)
// and prints why it was answered so: for each descriptor the rule it matched or why none, each
// limit with its key, figures and state before and after, and the limit that decided. Exits as
// `sluice check` does: 0 allowed, 1 denied, 2 on an error. At --cost 0 nothing is charged, and
// the server wants its admin token (--admin-token-file).

#include <string>

#include "nlohmann/json.hpp"

#include "tools/check.h"

namespace sluice::tools {

struct ExplainFlags {
  CheckFlags request;
  std::string admin_token_file;  // Needed for --cost 0.
  bool json = false;             // Print the server's answer as it is.
};

// The explanation of a /v1/check answer (its "explain" object) as text, one line per fact.
std::string FormatExplanation(const nlohmann::json& answer);

int RunExplain(const ExplainFlags& flags);

}  // namespace sluice::tools
