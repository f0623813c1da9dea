#pragma once

// What the reading of Redis URLs (url.cc; ParseRedisUrl and its kin are declared in
// include/sluice/redis_store.h) shares with the reading of Redis's own answers (cluster.cc's
// MOVED and ASK): a number in text.
//
// Pure functions: thread-safe.

#include <optional>
#include <string_view>

namespace sluice::internal {

// `text` as a whole non-negative number: nullopt for anything else (empty, a sign, a space,
// trailing text, overflow).
std::optional<unsigned> WholeNumber(std::string_view text);

}  // namespace sluice::internal
