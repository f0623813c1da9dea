#include "src/memcached/keys.h"

#include "fmt/format.h"
#include <openssl/sha.h>

namespace sluice::internal {

void AppendEscaped(std::string& out, std::string_view text) {
  for (char c : text) {
    if (c > ' ' && c <= '~' && c != '%') {
      out += c;
    } else {
      fmt::format_to(std::back_inserter(out), "%{:02X}", static_cast<unsigned char>(c));
    }
  }
}

std::string ItemKey(std::string_view prefix, const Limit& limit, std::string_view key) {
  std::string out(prefix);
  AppendEscaped(out, limit.ToString());
  out += ':';
  const size_t head = out.size();
  AppendEscaped(out, key);
  if (out.size() > kMaxItemKeyBytes) {
    out.resize(head);
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest);
    out += "%#";
    for (unsigned char b : digest) {
      fmt::format_to(std::back_inserter(out), "{:02x}", b);
    }
  }
  return out;
}

std::string OnceKey(std::string_view prefix, std::string_view once) {
  return fmt::format("{}once:{}", prefix, once);
}

}  // namespace sluice::internal
