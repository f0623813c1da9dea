#pragma once

// Reading what a partner answered (server/service/feedback.h's PartnerAnswer) from the status
// and headers of its answer, as a worker received them and sent them on to POST /v1/feedback.
// Every form a rate-limited API sends:
//
//   Retry-After            seconds, or an HTTP date (RFC 9110 10.2.3: IMF-fixdate, RFC 850,
//                          asctime); retry-after-ms (milliseconds; OpenAI, Azure)
//   RateLimit, -Policy     the IETF draft's structured fields, revisions 08 to 11
//                          (`"name";r=4;t=10`, `"name";q=100;w=60`) and 07 (`limit=100,
//                          remaining=4, reset=10`; policy `100;w=60`)
//   RateLimit-Limit, -Remaining, -Reset             draft-06 and earlier
//   X-RateLimit-Limit, -Remaining, -Reset, -Reset-After, X-Rate-Limit-*   GitHub's and others'
//
// A reset is seconds from now, unless it is at least 10^9: then it is a time in epoch seconds
// (GitHub's, Twitter's), as no partner's window is 31 years long. A field given more than
// once (repeated, or a list) is read at its most cautious: the latest retry time and reset,
// the fewest remaining, the slowest policy. Nothing is trusted past a bound: times past
// kMaxPartnerTime are read as it, counts past Limit::kMaxCount are ignored, and so is every
// value that is not what its field holds (negative, fractional counts, unknown units,
// garbage); each is said in PartnerAnswer::notes.
//
// Thread-safe: a pure function of its arguments.

#include <span>
#include <string>
#include <string_view>

#include "server/service/feedback.h"
#include "sluice/clock.h"

namespace sluice::server {

struct PartnerHeader {
  std::string name;  // Any case.
  std::string value;
};

// At most this many headers, and bytes in one value, are read; the rest are noted and ignored.
inline constexpr size_t kMaxPartnerHeaders = 64;
inline constexpr size_t kMaxPartnerValueBytes = 1024;

// `now` is the time an HTTP date or an epoch reset is measured from (the server's clock).
PartnerAnswer ReadPartnerAnswer(int status, std::span<const PartnerHeader> headers, Timestamp now);

}  // namespace sluice::server
