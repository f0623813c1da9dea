#pragma once

// `sluice check`: asks a running sluiced (POST /v1/check) about one request, prints its JSON
// answer, and exits 0 when allowed, 1 when denied, 2 on an error (a bad flag, no server).
// `sluice acquire`: the same through POST /v1/acquire, which answers once the request may go
// ahead; exits 0 then, 75 (EX_TEMPFAIL) with the retry time on stderr when it cannot within
// --max-wait, 1 when no wait can help, 2 on an error.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sluice::tools {

struct CheckFlags {
  std::string server = "http://127.0.0.1:8080";
  // Rules mode: a domain and descriptors, each "k=v" or "k=v,k2=v2" for a nested one.
  std::string domain;
  std::vector<std::string> descriptors;
  // Ad hoc: a key and its limit.
  std::string key;
  std::string algorithm;
  std::optional<int64_t> limit;
  std::string period;
  std::optional<int64_t> burst;
  std::optional<int64_t> buckets;
  std::optional<int64_t> max_debt;  // Ad hoc: how far past the limit a settle may charge.
  bool calendar = false;            // Ad hoc: a calendar quota (--period 1d, 1w, 1mo or 1y).
  std::string time_zone;            // Ad hoc, with `calendar`: its IANA zone (default UTC).
  bool feedback = false;  // Ad hoc: the limit takes its partner's feedback (`sluice feedback`).
  int64_t cost = 1;
  bool receipt = false;  // Ask for a receipt, to settle the real cost later (`sluice settle`).
  bool explain = false;  // Ask for the answer's explanation (`sluice explain`).
  std::string timeout = "5s";
  std::string max_wait;  // acquire only: how long the server may hold the request.
};

// The JSON body of POST /v1/check for `flags`; InvalidArgument naming the flag otherwise.
absl::StatusOr<std::string> CheckBody(const CheckFlags& flags);

// The JSON body of POST /v1/reset for `flags`: the keys of CheckBody's, without a cost.
absl::StatusOr<std::string> ResetBody(const CheckFlags& flags);

// The URL of `path` (such as "/v1/check") on the server of --server `server`: "http://HOST:PORT",
// or HOST:PORT alone, a trailing slash or not. InvalidArgument naming --server and the text as
// given when it is not such an address.
absl::StatusOr<std::string> Endpoint(std::string_view server, std::string_view path);

struct HttpAnswer {
  unsigned status = 0;
  std::string body;
};

// POSTs `body` to `url` ("http://host:port/path"), with "Authorization: Bearer
// `bearer_token`" when that is not empty. Unavailable naming the server when it cannot be
// reached or does not answer within `timeout`.
absl::StatusOr<HttpAnswer> PostJson(const std::string& url, const std::string& body,
                                    std::string_view timeout, std::string_view bearer_token = {});

// As PostJson, a GET without a body.
absl::StatusOr<HttpAnswer> GetJson(const std::string& url, std::string_view timeout,
                                   std::string_view bearer_token = {});

// PostJson to `path` on --server `server`; an error is also said on stderr, as `command`'s
// ("sluice reset: ...").
absl::StatusOr<HttpAnswer> PostAs(std::string_view command, std::string_view server,
                                  std::string_view path, const std::string& body,
                                  std::string_view timeout, std::string_view bearer_token = {});

// `text` safe to print on a terminal: control bytes (ESC and the like, which a key or a value a
// caller chose may hold) each become '?'.
std::string Printable(std::string_view text);

// The server's "error" of a JSON answer, or the answer itself when it has none.
std::string ErrorOf(const HttpAnswer& answer);

}  // namespace sluice::tools
