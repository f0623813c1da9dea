#pragma once

// The names MemcachedStore gives its items: "<prefix><limit>:<key>", where <limit> is
// Limit::ToString() (the algorithm and every parameter, so a changed limit starts afresh, as
// in MemoryStore) and <key> the caller's key. Memcached's text protocol takes keys of at most
// 250 printable bytes without spaces, so both parts are escaped: a byte outside '!'..'~', and
// '%', becomes %XX. A name that would pass 250 bytes keeps its limit and replaces the key by
// "%#" and the key's SHA-256 in hex: "%#" never comes out of the escaping, so no escaped key
// can take a hashed one's name.
//
// Pure functions: thread-safe.

#include <string>
#include <string_view>

#include "sluice/limit.h"

namespace sluice::internal {

// Memcached's longest key.
inline constexpr size_t kMaxItemKeyBytes = 250;

std::string ItemKey(std::string_view prefix, const Limit& limit, std::string_view key);

// `text` escaped as above, appended to `out`.
void AppendEscaped(std::string& out, std::string_view text);

}  // namespace sluice::internal
