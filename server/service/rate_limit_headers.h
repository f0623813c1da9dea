#pragma once

// The rate limit headers a decision is told to the client with, built in one place for the
// three surfaces that send them: POST /v1/check (and /v1/acquire), GET /v1/auth (nginx's
// auth_request) and the Envoy API's response_headers_to_add. Three formats:
//
// - kDraftIetf, draft-ietf-httpapi-ratelimit-headers revisions 08 to 11: two structured fields
//   (RFC 9651), `RateLimit-Policy: "api.user";q=10;w=1, "api.day";q=1000;w=86400` (every
//   limit, named) and `RateLimit: "api.user";r=4;t=1` (the limit closest to denying);
// - kDraft06, the 2022 draft: RateLimit-Limit, -Remaining, -Reset, and `RateLimit-Policy:
//   10;w=1, 1000;w=86400`;
// - kXRateLimit, GitHub's: X-RateLimit-Limit, -Remaining, -Used, and -Reset in epoch seconds.
//
// The figures are the same in all three (docs/server.md, "RateLimit headers"):
// - the quota q of a limit is what a client may spend at once: its burst where it has one
//   (gcra 10/s burst 20: q=20), with the window the time it takes to refill (w=2), so that
//   q/w is the rate and remaining never exceeds q;
// - a request that can never pass (its cost above the quota, requests_per_unit: 0) is told
//   remaining 0 with no reset: no wait cures it (and the HTTP API sends no Retry-After).
//
// Thread-safe: pure functions of their arguments.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"

#include "server/service/service.h"
#include "sluice/clock.h"

namespace sluice::server {

enum class HeaderFormat : uint8_t { kDraftIetf, kDraft06, kXRateLimit };

// "draft-ietf", "draft-06", "x-ratelimit", and back (nullopt for any other text).
std::string_view HeaderFormatName(HeaderFormat format);
std::optional<HeaderFormat> ParseHeaderFormat(std::string_view name);
inline constexpr std::string_view kHeaderFormatNames = "draft-ietf, draft-06, x-ratelimit";

struct HeaderOptions {
  HeaderFormat format = HeaderFormat::kDraftIetf;
  // kDraft06's names (the Envoy API's --header-limit, --header-remaining, --header-reset).
  std::string limit_name = "RateLimit-Limit";
  std::string remaining_name = "RateLimit-Remaining";
  std::string reset_name = "RateLimit-Reset";
};

// One limit as the headers tell it.
struct HeaderQuota {
  std::string_view name;
  std::string_view partition;  // pk (bytes); empty: none.
  int64_t quota = 0;           // q: what may be spent at once.
  int64_t window = 0;          // w in seconds; 0: none (concurrency, requests_per_unit: 0).
  bool concurrent = false;     // A concurrency limit: qu="concurrent-requests".
  int64_t remaining = 0;       // r, within [0, quota].
  Micros reset{0};             // t, rounded up to whole seconds.
  bool denies = false;         // It denied this request.
  bool never = false;          // It can never admit this request.
  bool candidate = true;       // May be the one RateLimit tells (not borrowed from a pool).
};

// `outcome` as the headers tell it, or nullopt when they leave it out (unlimited, shadow).
std::optional<HeaderQuota> QuotaOf(const LimitOutcome& outcome);

// The index in `quotas` of the limit closest to denying: one that can never admit the request,
// else one that denies, else the fewest remaining; quotas.size() when none is a candidate.
size_t ClosestQuota(std::span<const HeaderQuota> quotas);

using AddHeader = absl::FunctionRef<void(std::string_view name, std::string_view value)>;

// Adds the headers of `quotas` in `options.format`, `closest` (an index in `quotas`) being
// the limit the single-limit fields tell. `now` is the wall clock (x-ratelimit's epoch
// Reset). Nothing when `closest` is out of range.
void AddRateLimitHeaders(std::span<const HeaderQuota> quotas, size_t closest,
                         const HeaderOptions& options, Timestamp now, AddHeader add);

// `text` as a structured-field String (RFC 9651 3.3.3): printable ASCII with `"` and `\`
// escaped; any other byte, and `%`, percent-encoded (lower-case hex), so that every name,
// UTF-8 or not, is a valid String and can be told apart. Appended to `out`.
void AppendSfString(std::string& out, std::string_view text);

}  // namespace sluice::server
