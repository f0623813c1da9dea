#pragma once

// Client addresses as rate-limit identities. An IPv6 client usually holds a whole /64 (or
// more), so limiting single IPv6 addresses lets one machine escape its limit by rotating
// through them; sluiced groups them by a prefix instead.

#include <string>
#include <string_view>

namespace sluice::server {

// The identity of `address`: an IPv4 address as it is; an IPv6 address as its first
// `ipv6_prefix` bits in canonical form with the prefix length ("2001:db8:1:2::/64"); an
// IPv4-mapped IPv6 address (::ffff:192.0.2.1) as its IPv4 address. Anything that is not an IP
// address is returned unchanged. REQUIRES: 0 <= ipv6_prefix <= 128.
std::string GroupAddress(std::string_view address, int ipv6_prefix);

}  // namespace sluice::server
