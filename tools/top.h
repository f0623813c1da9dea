#pragma once

// `sluice top`: each rule limit's top offenders on a running sluiced (GET /v1/top, with its admin
// token), as a live view that refreshes in place, as `top` does, until interrupted; --once
// prints one view and exits. Exits 0, 1 when the server refuses the token, 2 on an error (a bad
// flag, no server).

#include <string>

#include "nlohmann/json.hpp"

namespace sluice::tools {

struct TopFlags {
  std::string server = "http://127.0.0.1:8080";
  std::string admin_token_file;
  std::string rule;  // Empty: every rule limit followed.
  std::string by = "denied";
  int n = 10;
  std::string interval = "2s";
  bool once = false;
  bool json = false;  // --once: the server's answer as it is.
  std::string timeout = "5s";
};

// One view of a GET /v1/top answer, as text: per rule limit, its total and bound, then its keys
// with their counts and shares.
std::string FormatTop(const nlohmann::json& answer);

int RunTop(const TopFlags& flags);

}  // namespace sluice::tools
