#pragma once

// `sluice feedback`: tells a running sluiced what a partner answered a shell worker
// (docs/server.md, POST /v1/feedback), for the keys of a check's flags:
//
//   code=$(curl -s -o out.json -D headers.txt -w '%{http_code}' https://api.partner.example/)
//   sluice feedback --domain jobs --descriptor partner=acme --headers-file headers.txt
//
// The headers come from --header 'Name: value' (repeatable) and from --headers-file, a dump
// of them as curl -D writes it ("-": standard input), whose last status line gives the status
// when --status is not given. Only the rate limit headers are sent (the partner's others,
// cookies and all, stay here). Exits 0 with the server's JSON answer on stdout, 2 on an error
// (a bad flag, an unreadable file, no server, a refusal: its error on stderr).

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

#include "tools/check.h"

namespace sluice::tools {

struct FeedbackFlags {
  CheckFlags request;  // Its keys; its cost is not sent.
  std::optional<int> status;
  std::vector<std::string> headers;  // "Name: value".
  std::string headers_file;
};

// A header dump as curl -D writes it: the status of its last response (0 when it has no
// status line) and that response's headers, in order.
struct HeaderDump {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
};
HeaderDump ParseHeaderDump(std::string_view text);

// POST /v1/feedback's body for `flags`, with the headers already gathered; InvalidArgument
// naming the flag otherwise.
absl::StatusOr<std::string> FeedbackBody(
    const CheckFlags& keys, std::optional<int> status,
    const std::vector<std::pair<std::string, std::string>>& headers);

int RunFeedback(const FeedbackFlags& flags);

}  // namespace sluice::tools
