#pragma once

// KeyNames: how the keys a store counts under are shown to an operator (an explanation, the top
// offenders, the operator's page). A raw key names a user or an address, which is personal
// data: with --hide-keys each key is shown as a keyed hash instead, the same for one key for
// the life of the process (so that a key can be followed from one view to another) and useless
// to anyone trying candidates offline (its key is random and never leaves the process).
//
// Thread-safe: immutable once made.

#include <array>
#include <string>
#include <string_view>

namespace sluice::server {

class KeyNames {
 public:
  explicit KeyNames(bool hide = false);

  bool hidden() const { return hide_; }

  // `key` as shown: Readable(key), or "#" and the first 16 hex digits of its HMAC-SHA-256.
  std::string Show(std::string_view key) const;

  // A store's key as text: a RuleKey "<domain> key=value key=value" (its escapes taken out; a
  // bounded one ends in "#" and its digest), a pool's key "<domain> pool <name>", an ad hoc
  // key as it is.
  static std::string Readable(std::string_view key);

 private:
  bool hide_;
  std::array<unsigned char, 32> secret_{};
};

}  // namespace sluice::server
