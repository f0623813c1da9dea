#pragma once

// `sluice settle` and `sluice reset`: the commands that act after a decision (docs/server.md,
// POST /v1/settle and POST /v1/reset).
// `sluice settle RECEIPT --cost M` settles the request `sluice check --receipt` was charged
// for at M units (0 a refund): exits 0 with the server's JSON answer on stdout, 1 when the
// server refuses the receipt (settled already, expired, forged: its error on stderr), 2 on an
// error (a bad flag, no server, any other answer).
// `sluice reset` makes the keys of a check's flags (rules mode or ad hoc, no cost) start
// afresh, with the admin token of --admin-token-file: exits 0 with the answer on stdout, 1
// when the server refuses the token (401, 403: its error on stderr), 2 on an error.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

#include "tools/check.h"

namespace sluice::tools {

struct SettleFlags {
  std::string server = CheckFlags{}.server;
  std::string receipt;
  int64_t cost = 0;
  std::string timeout = CheckFlags{}.timeout;
};

struct ResetFlags {
  CheckFlags request;  // Its keys; its cost is not sent.
  std::string admin_token_file;
};

// The admin token in the file at `path`, trailing whitespace trimmed (as sluiced reads its
// --admin-token-file). InvalidArgument naming the file when it cannot be read or is empty.
absl::StatusOr<std::string> ReadAdminToken(const std::string& path);

// Run the commands, writing to std::cout and std::cerr; return the exit status.
int RunSettle(const SettleFlags& flags);
int RunReset(const ResetFlags& flags);

}  // namespace sluice::tools
