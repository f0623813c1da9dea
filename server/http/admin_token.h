#pragma once

// The admin token: what a request must carry to act on keys other than its own request's
// (POST /v1/reset, GET /v1/top, an explanation at cost 0, the operator's page). It is read from
// --admin-token-file and sent as "Authorization: Bearer <token>". Without the flag those endpoints
// are off: never open by default.
//
// Thread-safe: immutable once made.

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace sluice::server {

// The shortest token accepted, in bytes: guessing one is then out of reach.
inline constexpr size_t kMinAdminTokenBytes = 16;

class AdminToken {
 public:
  enum class Verdict {
    kMissing,  // No Authorization header, or not "Bearer ...": 401.
    kWrong,    // A bearer token that is not this one: 403.
    kGranted,
  };

  // The token in the file at `path`, trailing whitespace trimmed. InvalidArgument naming the
  // file when it cannot be read, when the token is shorter than kMinAdminTokenBytes, or when
  // it holds bytes outside printable ASCII or a space.
  static absl::StatusOr<AdminToken> FromFile(const std::string& path);
  static absl::StatusOr<AdminToken> Create(std::string token);

  // The credentials Judge takes: "Bearer <token>" always; with kBearerOrBasic also
  // "Basic base64(user:token)", any user, which is what a browser sends for a page once a 401
  // asked for it (WWW-Authenticate: Basic): the operator's page (server/ui/). Only there: a
  // browser adds Basic credentials to requests on its own, cross-site ones too, so the
  // endpoints that change something take Bearer alone.
  enum class Schemes { kBearer, kBearerOrBasic };

  // Judges the value of a request's Authorization header (empty when absent). The comparison
  // takes the same time wherever the first difference is (CRYPTO_memcmp over digests, so the
  // length is not leaked either).
  Verdict Judge(std::string_view authorization, Schemes schemes = Schemes::kBearer) const;

 private:
  explicit AdminToken(std::string digest) : digest_(std::move(digest)) {}
  std::string digest_;  // SHA-256 of the token.
};

}  // namespace sluice::server
