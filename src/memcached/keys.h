#pragma once

// The names MemcachedStore gives its items: "<prefix><limit>:<key>", where <limit> is
// Limit::ToString() (the algorithm and every parameter, so a changed limit starts afresh, as
// in MemoryStore) and <key> the caller's key. Memcached's text protocol takes keys of at most
// 250 printable bytes without spaces, so both parts are escaped: a byte outside '!'..'~', and
// '%', becomes %XX. A name that would pass 250 bytes keeps its limit and replaces the key by
// "%#" and the key's SHA-256 in hex: "%#" never comes out of the escaping, so no escaped key
// can take a hashed one's name.
//
// A settle's `once` claim (Store::SettleAllAsync) is an item of its own, "<prefix>once:<id>":
// no limit's item takes that name, for Limit::ToString() always holds a space (escaped %20)
// before its ':'.
//
// Pure functions: thread-safe.

#include <string>
#include <string_view>

#include "sluice/limit.h"

namespace sluice::internal {

// Memcached's longest key.
inline constexpr size_t kMaxItemKeyBytes = 250;

std::string ItemKey(std::string_view prefix, const Limit& limit, std::string_view key);

// The claim of a settle's `once` id (printable ASCII without spaces, at most kMaxOnceBytes).
std::string OnceKey(std::string_view prefix, std::string_view once);

// `text` escaped as above, appended to `out`.
void AppendEscaped(std::string& out, std::string_view text);

}  // namespace sluice::internal
