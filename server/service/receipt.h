#pragma once

// Receipts: what a check charged, handed to its client so that the request's real cost can be
// settled later (POST /v1/settle, docs/server.md). The client holds the receipt; the server
// keeps nothing until it is settled. So that a client can neither forge one nor change a
// figure in it, a receipt is signed with HMAC-SHA-256 under a secret the fleet shares
// (--secret-file), and checked in constant time before anything in it is believed.
//
// A token is "r1." then the payload, then "." and the signature, both base64url without
// padding. The payload is binary: integers little-endian, strings length-prefixed. Its
// layout is private to receipt.cc; a new layout takes a new version prefix.
//
// Thread-safe: a ReceiptSigner is immutable once made.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "sluice/clock.h"
#include "sluice/give_back.h"
#include "sluice/limit.h"

namespace sluice::server {

// The bounds on a token, checked before its signature is: a longer one is refused unread.
inline constexpr size_t kMaxReceiptBytes = 64 * 1024;
inline constexpr size_t kMaxReceiptLimits = 256;
// The shortest secret accepted, in bytes (HMAC-SHA-256's output size).
inline constexpr size_t kMinSecretBytes = 32;

// A receipt lives until nothing in it can be given back any more (sluice/settle.h's
// GiveBackHorizon, the latest over its limits), but at least kMinReceiptLife, so that a slow
// response can still settle an extra charge, and at most kMaxReceiptLife, which bounds what
// a store keeps to refuse a second settle (the receipt's id, until it expires).
inline constexpr Micros kMinReceiptLife = std::chrono::minutes(1);
inline constexpr Micros kMaxReceiptLife = std::chrono::hours(1);

// One limit a receipt's check charged.
struct ReceiptLimit {
  std::string name;      // The limit's name, as /v1/check answered it.
  Limit limit;           // As the store decided it (soft mode's enlarged limit, a pool).
  std::string key;       // The key it counts under in the store.
  Charge charge;         // What it charged.
  int64_t max_debt = 0;  // How far past the limit an extra may take the key (rule `max_debt`).
  friend bool operator==(const ReceiptLimit&, const ReceiptLimit&) = default;
};

struct Receipt {
  std::string id;  // 128 random bits, base64url: what the store claims to settle once.
  Timestamp issued{};
  Timestamp expires{};
  int64_t cost = 0;  // What the check charged each limit.
  std::vector<ReceiptLimit> limits;
  friend bool operator==(const Receipt&, const Receipt&) = default;
};

// When a receipt for `limits`, charged at `issued`, expires (see kMinReceiptLife).
Timestamp ReceiptExpiry(Timestamp issued, const std::vector<ReceiptLimit>& limits);

// A fresh receipt id: 128 bits from a cryptographic random source, base64url (22 bytes).
std::string NewReceiptId();

class ReceiptSigner {
 public:
  // InvalidArgument when `secret` is shorter than kMinSecretBytes.
  static absl::StatusOr<ReceiptSigner> Create(std::string secret);
  // The secret in the file at `path` (--secret-file), trailing whitespace trimmed.
  // InvalidArgument naming the file when it cannot be read, or holds too short a secret.
  static absl::StatusOr<ReceiptSigner> FromFile(const std::string& path);
  // A random secret: for a server alone (its receipts do not outlive it).
  static ReceiptSigner Random();

  // This secret bound to the store that keeps the charges (--store and its key prefix, or the
  // memory store of one process): HMAC-SHA-256 of `store` under this secret. A receipt names
  // keys and charges in one store only; given back in another (a second memory store, a
  // restarted one, another Redis) it would return units that store never charged. Signed
  // under the bound secret, it fails the signature check there, and changes nothing.
  ReceiptSigner ForStore(std::string_view store) const;

  std::string Sign(const Receipt& receipt) const;

  // The receipt `token` holds, when this secret signed it and it has not expired at `now`.
  // InvalidArgument naming the reason otherwise, without a word of the token itself: "receipt
  // is empty", "receipt is longer than 65536 bytes", "receipt is not a receipt from sluiced"
  // (malformed), "receipt's signature does not match (forged, changed, or signed with another
  // secret)", "receipt expired <duration> ago". The signature is checked before the payload
  // is read.
  absl::StatusOr<Receipt> Verify(std::string_view token, Timestamp now) const;

 private:
  explicit ReceiptSigner(std::string secret) : secret_(std::move(secret)) {}
  std::string secret_;
};

}  // namespace sluice::server
