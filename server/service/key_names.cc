#include "server/service/key_names.h"

#include <cstdlib>
#include <iterator>

#include "fmt/format.h"
#include "openssl/evp.h"
#include "openssl/hmac.h"
#include "openssl/rand.h"

#include "server/service/service_internal.h"

namespace sluice::server {

KeyNames::KeyNames(bool hide) : hide_(hide) {
  // RAND_bytes fails only when the system's entropy source does; a guessable secret would
  // make every hidden key one guess away.
  if (hide_ && RAND_bytes(secret_.data(), static_cast<int>(secret_.size())) != 1) {
    std::abort();
  }
}

std::string KeyNames::Show(std::string_view key) const {
  if (!hide_) {
    return Readable(key);
  }
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
           reinterpret_cast<const unsigned char*>(key.data()), key.size(), mac, &size) == nullptr) {
    std::abort();  // Only when OpenSSL itself is broken: no name is better than a wrong one.
  }
  std::string shown = "#";
  for (unsigned int i = 0; i < 8 && i < size; ++i) {
    fmt::format_to(std::back_inserter(shown), "{:02x}", mac[i]);
  }
  return shown;
}

std::string KeyNames::Readable(std::string_view key) {
  if (key.empty() || key.front() != kDomainMark) {
    return std::string(key);  // An ad hoc key: printable already.
  }
  std::string text;
  for (size_t i = 1; i < key.size(); ++i) {
    const char c = key[i];
    if (c == kEscape && i + 1 < key.size()) {
      // An escaped separator stands for itself; the digest mark of a bounded key ("\x1b#")
      // is "#".
      text.push_back(key[i + 1]);
      ++i;
    } else if (c == kEntrySeparator) {
      text.push_back(' ');
    } else if (c == kValueSeparator) {
      text.push_back('=');
    } else if (c == kPoolSeparator) {
      text += " pool ";
    } else {
      text.push_back(c);
    }
  }
  return text;
}

}  // namespace sluice::server
