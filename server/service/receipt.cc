#include "server/service/receipt.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "fmt/format.h"
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "server/service/secret_file.h"
#include "sluice/duration.h"
#include "sluice/settle.h"  // kMaxDebt

namespace sluice::server {
namespace {

// The payload, version 1 ("r1."), in order; integers little-endian, a string as its u32
// length then its bytes, Int128 as its low then its high 64 bits (two's complement):
//
//   id: string, issued: i64 us, expires: i64 us, cost: i64, count: u32, then count times:
//     name: string, algorithm: u8, limit: i64, period: i64 us, burst: i64, buckets: i64,
//     key: string, charge.at: i64 us, charge.units: i64, charge.ahead: i128, max_debt: i64
//
// and nothing after. A calendar quota's algorithm byte has kCalendarBit set, its period is 0,
// and after its buckets come unit: u8 (CalendarUnit) and zone: string; every other entry is as
// it was before calendar quotas, so that older tokens read as they did. Any other change takes
// a new prefix: tokens outlive a server's version.
constexpr std::string_view kPrefix = "r1.";
constexpr uint8_t kCalendarBit = 0x80;  // On a limit's algorithm byte: a calendar quota.
// The smallest a limit's entry can be (both strings empty): a count the rest of the payload
// cannot hold is refused before anything is allocated for it.
constexpr size_t kMinLimitBytes = 4 + 1 + 4 * 8 + 4 + 8 + 8 + 16 + 8;
constexpr size_t kMacBytes = 32;  // SHA-256's output.
// base64url of kMacBytes without padding: 32 bytes are 256 bits, 43 sextets.
constexpr size_t kMacChars = (kMacBytes * 8 + 5) / 6;

__extension__ using UInt128 = unsigned __int128;

// The messages Verify returns (receipt.h): none of them quotes the token.
absl::Status Malformed() {
  return absl::InvalidArgumentError("receipt is not a receipt from sluiced");
}

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Unsigned(v, 4); }
  void I64(int64_t v) { Unsigned(static_cast<uint64_t>(v), 8); }
  void I128(Int128 v) {
    const auto u = static_cast<UInt128>(v);
    Unsigned(static_cast<uint64_t>(u), 8);
    Unsigned(static_cast<uint64_t>(u >> 64), 8);
  }
  // REQUIRES: s.size() < 2^32 (a receipt's strings are names and keys, bounded by the rules).
  void String(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void Time(Timestamp t) { I64(t.time_since_epoch().count()); }
  std::string Take() { return std::move(out_); }

 private:
  void Unsigned(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) {
      U8(static_cast<uint8_t>(v >> (8 * i)));
    }
  }
  std::string out_;
};

// Reads the payload front to back. Every read checks that the bytes it takes are there and
// fails (false) otherwise, so no input, however crafted, reads past the end; a string is
// copied only once its claimed length is known to be present.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : rest_(bytes) {}

  bool U8(uint8_t& v) {
    uint64_t wide = 0;
    if (!Unsigned(1, wide)) {
      return false;
    }
    v = static_cast<uint8_t>(wide);
    return true;
  }
  bool U32(uint32_t& v) {
    uint64_t wide = 0;
    if (!Unsigned(4, wide)) {
      return false;
    }
    v = static_cast<uint32_t>(wide);
    return true;
  }
  bool I64(int64_t& v) {
    uint64_t wide = 0;
    if (!Unsigned(8, wide)) {
      return false;
    }
    v = static_cast<int64_t>(wide);  // Two's complement, as C++20 defines the conversion.
    return true;
  }
  bool I128(Int128& v) {
    uint64_t low = 0;
    uint64_t high = 0;
    if (!Unsigned(8, low) || !Unsigned(8, high)) {
      return false;
    }
    v = static_cast<Int128>((static_cast<UInt128>(high) << 64) | low);
    return true;
  }
  bool Time(Timestamp& t) {
    int64_t us = 0;
    if (!I64(us)) {
      return false;
    }
    t = Timestamp(Micros(us));
    return true;
  }
  bool String(std::string& s) {
    uint32_t size = 0;
    if (!U32(size) || size > rest_.size()) {
      return false;
    }
    s.assign(rest_.substr(0, size));
    rest_.remove_prefix(size);
    return true;
  }
  size_t left() const { return rest_.size(); }

 private:
  bool Unsigned(size_t bytes, uint64_t& v) {
    if (rest_.size() < bytes) {
      return false;
    }
    v = 0;
    for (size_t i = 0; i < bytes; ++i) {
      v |= uint64_t{static_cast<unsigned char>(rest_[i])} << (8 * i);
    }
    rest_.remove_prefix(bytes);
    return true;
  }
  std::string_view rest_;
};

std::string Encode(const Receipt& receipt) {
  Writer w;
  w.String(receipt.id);
  w.Time(receipt.issued);
  w.Time(receipt.expires);
  w.I64(receipt.cost);
  w.U32(static_cast<uint32_t>(receipt.limits.size()));
  for (const ReceiptLimit& l : receipt.limits) {
    w.String(l.name);
    const std::optional<CalendarUnit> calendar = l.limit.calendar();
    w.U8(static_cast<uint8_t>(l.limit.algorithm()) | (calendar ? kCalendarBit : 0));
    w.I64(l.limit.limit());
    w.I64(calendar ? 0 : l.limit.period().count());
    w.I64(l.limit.burst());
    w.I64(l.limit.buckets());
    if (calendar) {
      w.U8(static_cast<uint8_t>(*calendar));
      w.String(l.limit.time_zone().name());
    }
    w.String(l.key);
    w.Time(l.charge.at);
    w.I64(l.charge.units);
    w.I128(l.charge.ahead);
    w.I64(l.max_debt);
  }
  return w.Take();
}

// A Limit as Sign wrote it: valid (Limit::Create), and with the parameters its algorithm
// ignores at the values Create gives them, so that one limit has one encoding.
std::optional<Limit> ReadLimit(Reader& r) {
  uint8_t algorithm = 0;
  int64_t n = 0;
  int64_t period = 0;
  int64_t burst = 0;
  int64_t buckets = 0;
  if (!r.U8(algorithm) || !r.I64(n) || !r.I64(period) || !r.I64(burst) || !r.I64(buckets)) {
    return std::nullopt;
  }
  std::optional<Calendar> calendar;
  if ((algorithm & kCalendarBit) != 0) {
    algorithm &= ~kCalendarBit;
    uint8_t unit = 0;
    std::string zone;
    if (!r.U8(unit) || unit > static_cast<uint8_t>(CalendarUnit::kYear) || !r.String(zone)) {
      return std::nullopt;
    }
    calendar = Calendar{static_cast<CalendarUnit>(unit), std::move(zone)};
  }
  if (algorithm > static_cast<uint8_t>(Algorithm::kLeakyBucket)) {
    return std::nullopt;
  }
  absl::StatusOr<Limit> made = Limit::Create({.algorithm = static_cast<Algorithm>(algorithm),
                                              .limit = n,
                                              .period = Micros(period),
                                              .burst = burst,
                                              .buckets = buckets,
                                              .calendar = std::move(calendar)});
  if (!made.ok() || made->burst() != burst || made->buckets() != buckets) {
    return std::nullopt;
  }
  return *made;
}

// Appends the next limit to `limits`; false when the payload does not hold one.
bool ReadReceiptLimit(Reader& r, std::vector<ReceiptLimit>& limits) {
  std::string name;
  if (!r.String(name)) {
    return false;
  }
  const std::optional<Limit> limit = ReadLimit(r);
  if (!limit.has_value()) {
    return false;
  }
  ReceiptLimit l{.name = std::move(name), .limit = *limit};
  // Figures Sign never writes (what a check charges is not negative; the debt is bounded as
  // settle.h bounds it) are refused, so that code reading a receipt may rely on them.
  if (!r.String(l.key) || !r.Time(l.charge.at) || !r.I64(l.charge.units) || l.charge.units < 0 ||
      !r.I128(l.charge.ahead) || !r.I64(l.max_debt) || l.max_debt < 0 || l.max_debt > kMaxDebt) {
    return false;
  }
  limits.push_back(std::move(l));
  return true;
}

absl::StatusOr<Receipt> Decode(std::string_view payload) {
  Reader r(payload);
  Receipt receipt;
  uint32_t count = 0;
  if (!r.String(receipt.id) || !r.Time(receipt.issued) || !r.Time(receipt.expires) ||
      !r.I64(receipt.cost) || receipt.cost < 0 || !r.U32(count) || count > kMaxReceiptLimits ||
      count > r.left() / kMinLimitBytes) {
    return Malformed();
  }
  // Only now, with the entries' bytes known to be there, is room made for them.
  receipt.limits.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    if (!ReadReceiptLimit(r, receipt.limits)) {
      return Malformed();
    }
  }
  if (r.left() != 0) {
    return Malformed();
  }
  return receipt;
}

// base64url without padding, as absl writes it.
std::string Base64Url(std::string_view bytes) {
  return absl::WebSafeBase64Escape(absl::string_view(bytes.data(), bytes.size()));
}

int Sextet(char c) {
  if (c >= 'A' && c <= 'Z') {
    return c - 'A';
  }
  if (c >= 'a' && c <= 'z') {
    return c - 'a' + 26;
  }
  if (c >= '0' && c <= '9') {
    return c - '0' + 52;
  }
  if (c == '-') {
    return 62;
  }
  if (c == '_') {
    return 63;
  }
  return -1;
}

// Whether `text` is base64url exactly as Base64Url writes it: its alphabet, no padding, a
// length that is not 1 mod 4, and zeros in the bits of the last character that carry no
// byte. Each byte string then has one spelling, so a token cannot be respelled into another
// that decodes alike (the signature covers the text, but the signature's own part would not
// be covered otherwise).
bool IsCanonicalBase64Url(std::string_view text) {
  if (text.size() % 4 == 1) {
    return false;
  }
  for (char c : text) {
    if (Sextet(c) < 0) {
      return false;
    }
  }
  const int unused_bits = text.size() % 4 == 2 ? 4 : text.size() % 4 == 3 ? 2 : 0;
  return text.empty() || (Sextet(text.back()) & ((1 << unused_bits) - 1)) == 0;
}

// REQUIRES: IsCanonicalBase64Url(text).
std::string DecodeBase64Url(std::string_view text) {
  std::string bytes;
  bytes.reserve(text.size() * 3 / 4);
  uint32_t bits = 0;
  int held = 0;
  for (char c : text) {
    bits = (bits << 6) | static_cast<uint32_t>(Sextet(c));
    held += 6;
    if (held >= 8) {
      held -= 8;
      bytes.push_back(static_cast<char>((bits >> held) & 0xff));
    }
  }
  return bytes;
}

std::array<unsigned char, kMacBytes> Mac(const std::string& secret, std::string_view signed_text) {
  std::array<unsigned char, kMacBytes> mac{};
  unsigned int size = 0;
  const unsigned char* done = HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
                                   reinterpret_cast<const unsigned char*>(signed_text.data()),
                                   signed_text.size(), mac.data(), &size);
  // HMAC-SHA-256 over memory fails only when OpenSSL itself is broken (no SHA-256, no memory):
  // nothing a receipt could be signed or checked with, and no answer to give but a wrong one.
  if (done == nullptr || size != kMacBytes) {
    std::abort();
  }
  return mac;
}

template <size_t N>
std::array<unsigned char, N> RandomBytes() {
  std::array<unsigned char, N> bytes{};
  // RAND_bytes fails only when the system's entropy source does: an id or a secret that is
  // not random would be guessable, which is worse than stopping.
  if (RAND_bytes(bytes.data(), static_cast<int>(N)) != 1) {
    std::abort();
  }
  return bytes;
}

}  // namespace

std::string NewReceiptId() {
  const auto bytes = RandomBytes<16>();
  return Base64Url(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

absl::StatusOr<ReceiptSigner> ReceiptSigner::Create(std::string secret) {
  if (secret.size() < kMinSecretBytes) {
    return absl::InvalidArgumentError(fmt::format(
        "the receipt secret is {} bytes; at least {} are needed", secret.size(), kMinSecretBytes));
  }
  return ReceiptSigner(std::move(secret));
}

absl::StatusOr<ReceiptSigner> ReceiptSigner::FromFile(const std::string& path) {
  absl::StatusOr<std::string> secret = ReadSecretFile("secret file", path);
  if (!secret.ok()) {
    return secret.status();
  }
  if (secret->size() < kMinSecretBytes) {
    return absl::InvalidArgumentError(
        fmt::format("secret file '{}' holds {} bytes (trailing whitespace trimmed); at least {} "
                    "are needed",
                    path, secret->size(), kMinSecretBytes));
  }
  return ReceiptSigner(*std::move(secret));
}

ReceiptSigner ReceiptSigner::Random() {
  const auto bytes = RandomBytes<32>();
  return ReceiptSigner(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

ReceiptSigner ReceiptSigner::ForStore(std::string_view store) const {
  const auto mac = Mac(secret_, store);
  return ReceiptSigner(std::string(reinterpret_cast<const char*>(mac.data()), mac.size()));
}

std::string ReceiptSigner::Sign(const Receipt& receipt) const {
  std::string token(kPrefix);
  token += Base64Url(Encode(receipt));
  const auto mac = Mac(secret_, token);
  token += '.';
  token += Base64Url(std::string_view(reinterpret_cast<const char*>(mac.data()), mac.size()));
  return token;
}

absl::StatusOr<Receipt> ReceiptSigner::Verify(std::string_view token, Timestamp now) const {
  if (token.empty()) {
    return absl::InvalidArgumentError("receipt is empty");
  }
  if (token.size() > kMaxReceiptBytes) {
    return absl::InvalidArgumentError(
        fmt::format("receipt is longer than {} bytes", kMaxReceiptBytes));
  }
  // The shape: "r1.", the payload, ".", the signature, and no other '.' (not in base64url).
  const size_t dot = token.rfind('.');
  if (!token.starts_with(kPrefix) || dot < kPrefix.size()) {
    return Malformed();
  }
  const std::string_view payload_text = token.substr(kPrefix.size(), dot - kPrefix.size());
  const std::string_view mac_text = token.substr(dot + 1);
  if (mac_text.size() != kMacChars || !IsCanonicalBase64Url(mac_text) || payload_text.empty() ||
      !IsCanonicalBase64Url(payload_text)) {
    return Malformed();
  }
  // The signature before any byte of the payload is believed, in constant time: a forger
  // learns nothing from how long a wrong guess took.
  const auto expected = Mac(secret_, token.substr(0, dot));
  const std::string presented = DecodeBase64Url(mac_text);
  if (CRYPTO_memcmp(expected.data(), presented.data(), kMacBytes) != 0) {
    return absl::InvalidArgumentError(
        "receipt's signature does not match (forged, changed, or signed with another secret)");
  }
  absl::StatusOr<Receipt> receipt = Decode(DecodeBase64Url(payload_text));
  if (!receipt.ok()) {
    return receipt.status();
  }
  if (now > receipt->expires) {
    // In 128 bits: a validly signed expiry may still be any 64-bit figure (a server's clock
    // gone wrong), and the difference must not overflow.
    const Int128 ago =
        Int128{now.time_since_epoch().count()} - receipt->expires.time_since_epoch().count();
    return absl::InvalidArgumentError(fmt::format(
        "receipt expired {} ago", FormatDuration(Micros(static_cast<int64_t>(std::min<Int128>(
                                      ago, std::numeric_limits<int64_t>::max()))))));
  }
  return receipt;
}

}  // namespace sluice::server
