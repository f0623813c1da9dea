#include "server/http/admin_token.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "absl/strings/escaping.h"
#include "fmt/format.h"
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include "server/service/secret_file.h"

namespace sluice::server {
namespace {

std::string Sha256(std::string_view text) {
  std::string digest(SHA256_DIGEST_LENGTH, '\0');
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(),
         reinterpret_cast<unsigned char*>(digest.data()));
  return digest;
}

// Printable ASCII but the space: what a token in a header can hold, and what a file of one
// holds unless it is the wrong file.
bool IsTokenByte(char c) { return c > ' ' && c <= '~'; }

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    if (lower(a[i]) != lower(b[i])) {
      return false;
    }
  }
  return true;
}

// The token `authorization` presents under `scheme` (RFC 7235 section 2.1: the scheme
// case-insensitive, then one or more spaces), or empty when it is not a credential of that
// scheme.
std::string_view Credential(std::string_view authorization, std::string_view scheme) {
  if (authorization.size() <= scheme.size() ||
      !EqualsIgnoringCase(authorization.substr(0, scheme.size()), scheme) ||
      authorization[scheme.size()] != ' ') {
    return {};
  }
  std::string_view credential = authorization.substr(scheme.size());
  credential.remove_prefix(std::min(credential.find_first_not_of(' '), credential.size()));
  return credential;
}

}  // namespace

absl::StatusOr<AdminToken> AdminToken::Create(std::string token) {
  if (token.size() < kMinAdminTokenBytes) {
    return absl::InvalidArgumentError(fmt::format(
        "the admin token is {} bytes; at least {} are needed", token.size(), kMinAdminTokenBytes));
  }
  for (char c : token) {
    if (!IsTokenByte(c)) {
      return absl::InvalidArgumentError(
          "the admin token holds a byte that is not printable ASCII, or a space");
    }
  }
  return AdminToken(Sha256(token));
}

absl::StatusOr<AdminToken> AdminToken::FromFile(const std::string& path) {
  absl::StatusOr<std::string> token = ReadSecretFile("admin token file", path);
  if (!token.ok()) {
    return token.status();
  }
  absl::StatusOr<AdminToken> made = Create(*std::move(token));
  if (!made.ok()) {
    // Create's reason, with the file it came from (and still not a byte of the token).
    return absl::InvalidArgumentError(fmt::format(
        "admin token file '{}': {} (trailing whitespace trimmed)", path,
        std::string_view(made.status().message().data(), made.status().message().size())));
  }
  return made;
}

AdminToken::Verdict AdminToken::Judge(std::string_view authorization, Schemes schemes) const {
  // RFC 6750 section 2.1: "Bearer" 1*SP b64token. RFC 7617: "Basic" 1*SP base64(user ":"
  // password), the token being the password. Anything else is no credential at all, as far as
  // this token is concerned.
  std::string_view presented = Credential(authorization, "Bearer");
  std::string decoded;
  if (presented.empty() && schemes == Schemes::kBearerOrBasic) {
    if (const std::string_view basic = Credential(authorization, "Basic");
        !basic.empty() &&
        absl::Base64Unescape(absl::string_view(basic.data(), basic.size()), &decoded)) {
      const size_t colon = decoded.find(':');
      presented = colon == std::string::npos ? std::string_view()
                                             : std::string_view(decoded).substr(colon + 1);
    }
  }
  if (presented.empty()) {
    return Verdict::kMissing;
  }
  // Digests of equal length whatever was presented: the comparison's time says nothing about
  // the token's length or where a guess first differs.
  const std::string digest = Sha256(presented);
  if (CRYPTO_memcmp(digest.data(), digest_.data(), SHA256_DIGEST_LENGTH) != 0) {
    return Verdict::kWrong;
  }
  return Verdict::kGranted;
}

}  // namespace sluice::server
