#include "server/service/ip.h"

#include <arpa/inet.h>

#include <array>
#include <cstring>

#include "fmt/format.h"

namespace sluice::server {

std::string GroupAddress(std::string_view address, int ipv6_prefix) {
  // INET6_ADDRSTRLEN bounds every valid text form; longer input is not an address.
  std::array<char, INET6_ADDRSTRLEN + 1> text{};
  if (address.empty() || address.size() >= INET6_ADDRSTRLEN) {
    return std::string(address);
  }
  std::memcpy(text.data(), address.data(), address.size());
  in6_addr ip6{};
  if (inet_pton(AF_INET6, text.data(), &ip6) != 1) {
    return std::string(address);  // IPv4 (used as it is) or not an address.
  }
  const uint8_t* bytes = ip6.s6_addr;
  constexpr std::array<uint8_t, 12> kMappedPrefix = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(bytes, kMappedPrefix.data(), kMappedPrefix.size()) == 0) {
    return fmt::format("{}.{}.{}.{}", bytes[12], bytes[13], bytes[14], bytes[15]);
  }
  for (int bit = ipv6_prefix; bit < 128; ++bit) {
    ip6.s6_addr[bit / 8] &= static_cast<uint8_t>(~(0x80u >> (bit % 8)));
  }
  std::array<char, INET6_ADDRSTRLEN> out{};
  inet_ntop(AF_INET6, &ip6, out.data(), out.size());
  return fmt::format("{}/{}", out.data(), ipv6_prefix);
}

}  // namespace sluice::server
