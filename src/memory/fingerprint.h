#pragma once

// Fingerprint: the 64-bit keyed hash that stands for a key in the memory store's compact-keys
// mode (MemoryStoreOptions::compact_keys), where a table keeps a key's fingerprint instead of
// its text. SipHash-2-4 (Aumasson and Bernstein, 2012) under a 128-bit secret drawn per store:
// a pseudo-random function, so without the secret nobody can craft keys that share a
// fingerprint; keys meet only by chance, one pair in 2^64 (for a million keys in one table, a
// chance of about 3 in 10^8 that any two share one). Two keys that do share a fingerprint share
// one state, which can only deny more (see MemoryStoreOptions::compact_keys). A fixed hash
// (boost::hash) would let an attacker craft keys that share a victim's state and deny it.
//
// Own code rather than a package: libsodium (crypto_shorthash is SipHash-2-4) would make the
// library's consumers link it too, and its call cannot be inlined into the decision path; the
// function is thirty lines, checked against the reference vectors of the SipHash paper
// (tests/memory/fingerprint_test.cc).
//
// Values: thread-safe.

#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <string_view>

namespace sluice::internal {

class Fingerprint {
 public:
  // The fingerprints 0 and 1 mark empty and erased slots (src/memory/fingerprint_map.h); a key
  // whose SipHash is one of them takes 2 or 3 instead.
  static constexpr uint64_t kFirstKey = 2;

  Fingerprint(uint64_t k0, uint64_t k1) : k0_(k0), k1_(k1) {}
  // A fingerprint with a secret from the kernel's random source (getrandom: libstdc++'s default
  // random_device is the CPU's RDRAND, which some CPUs' firmware has broken).
  static Fingerprint Random() {
    std::random_device random("getentropy");
    auto word = [&] { return (uint64_t{random()} << 32) | random(); };
    const uint64_t k0 = word();
    return {k0, word()};
  }

  uint64_t Of(std::string_view key) const {
    const uint64_t h = SipHash24(key);
    return h < kFirstKey ? h + kFirstKey : h;
  }

  // SipHash-2-4 of `m` under this secret: 64 bits, as the reference implementation.
  uint64_t SipHash24(std::string_view m) const {
    uint64_t v0 = k0_ ^ 0x736f6d6570736575ULL;
    uint64_t v1 = k1_ ^ 0x646f72616e646f6dULL;
    uint64_t v2 = k0_ ^ 0x6c7967656e657261ULL;
    uint64_t v3 = k1_ ^ 0x7465646279746573ULL;
    auto round = [&] {
      v0 += v1;
      v1 = std::rotl(v1, 13);
      v1 ^= v0;
      v0 = std::rotl(v0, 32);  // NOLINT
      v2 += v3;
      v3 = std::rotl(v3, 16);
      v3 ^= v2;  // NOLINT
      v0 += v3;
      v3 = std::rotl(v3, 21);
      v3 ^= v0;  // NOLINT
      v2 += v1;
      v1 = std::rotl(v1, 17);
      v1 ^= v2;
      v2 = std::rotl(v2, 32);  // NOLINT
    };
    auto absorb = [&](uint64_t word) {
      v3 ^= word;
      round();
      round();
      v0 ^= word;
    };
    const size_t whole = m.size() / 8 * 8;
    for (size_t i = 0; i < whole; i += 8) {
      uint64_t word = 0;
      std::memcpy(&word, m.data() + i, 8);  // Little-endian, as x86 and the reference.
      absorb(word);
    }
    uint64_t last = static_cast<uint64_t>(m.size()) << 56;
    for (size_t i = whole; i < m.size(); ++i) {
      last |= static_cast<uint64_t>(static_cast<uint8_t>(m[i])) << (8 * (i - whole));
    }
    absorb(last);
    v2 ^= 0xff;
    for (int i = 0; i < 4; ++i) {
      round();
    }
    return v0 ^ v1 ^ v2 ^ v3;
  }

 private:
  uint64_t k0_;
  uint64_t k1_;
};

}  // namespace sluice::internal
