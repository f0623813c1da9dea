// The keyed hash of compact keys (src/memory/fingerprint.h) and the table of fingerprints
// (src/memory/fingerprint_map.h).

#include "src/memory/fingerprint.h"

#include <random>
#include <string>
#include <unordered_map>
#include <utility>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "src/memory/fingerprint_map.h"
#include "tests/testing/util.h"

namespace sluice::internal {
namespace {

// The SipHash paper's key (bytes 0 to 15) over its messages (bytes 0 to n-1); the values are
// those of the reference implementation (the paper's appendix; libsodium's crypto_shorthash).
TEST(FingerprintTest, IsSipHash24) {
  const Fingerprint f(0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL);
  std::string message;
  for (int i = 0; i < 64; ++i) {
    message.push_back(static_cast<char>(i));
  }
  const std::pair<size_t, uint64_t> vectors[] = {
      {0, 0x726fdb47dd0e0e31ULL},  {1, 0x74f839c593dc67fdULL},  {7, 0xab0200f58b01d137ULL},
      {8, 0x93f5f5799a932462ULL},  {15, 0xa129ca6149be45e5ULL}, {16, 0x3f2acc7f57c29bdbULL},
      {63, 0x958a324ceb064572ULL},
  };
  for (const auto& [length, expected] : vectors) {
    EXPECT_EQ(f.SipHash24(std::string_view(message).substr(0, length)), expected) << length;
  }
}

TEST(FingerprintTest, NeverMarksASlotEmptyOrErasedAndDependsOnTheSecret) {
  const Fingerprint a = Fingerprint::Random();
  const Fingerprint b = Fingerprint::Random();
  int same = 0;
  for (int k = 0; k < 10'000; ++k) {
    const std::string key = fmt::format("user:{}", k);
    ASSERT_GE(a.Of(key), Fingerprint::kFirstKey);
    same += a.Of(key) == b.Of(key) ? 1 : 0;
  }
  EXPECT_EQ(same, 0) << "two stores' secrets gave the same fingerprints";
}

using Map = FingerprintMap<int64_t>;

// Random inserts, updates and erases, checked against std::unordered_map after every step:
// through growth, erased marks, and rehashes that shrink the table again.
TEST(FingerprintMapTest, BehavesAsAMapThroughGrowthAndErasure) {
  std::mt19937_64 random(testing::Seed(11));
  const Fingerprint f = Fingerprint::Random();
  Map map;
  std::unordered_map<uint64_t, int64_t> reference;
  for (int step = 0; step < 200'000; ++step) {
    const bool erasing = (step / 50'000) % 2 == 1;
    const uint64_t hash = f.Of(fmt::format("key-{}", random() % 30'000));
    Map::Slot* found = map.Find({}, hash);
    const auto it = reference.find(hash);
    ASSERT_EQ(found != nullptr, it != reference.end()) << step;
    if (found != nullptr) {
      ASSERT_EQ(found->value, it->second);
    }
    const bool erase = erasing ? random() % 4 != 0 : random() % 4 == 0;
    if (found != nullptr && erase) {
      map.Erase(found);
      reference.erase(it);
    } else if (found != nullptr) {
      found->value += 1;
      it->second += 1;
    } else if (!erase) {
      map.Insert({}, hash, step);
      reference.emplace(hash, step);
    }
    ASSERT_EQ(map.size(), reference.size());
    ASSERT_LE(map.size() * 100, map.capacity() * 85);
  }
  size_t seen = 0;
  for (size_t i = 0; i < map.capacity(); ++i) {
    if (Map::Slot* slot = map.At(i); slot != nullptr) {
      ++seen;
      EXPECT_EQ(reference.at(slot->fingerprint), slot->value);
    }
  }
  EXPECT_EQ(seen, reference.size());
}

// 16-byte slots between 75% and 85% full: 18.8 to 21.3 bytes a key, under the 24 asked for.
TEST(FingerprintMapTest, StaysBetweenSeventyFiveAndEightyFivePercentFull) {
  static_assert(sizeof(Map::Slot) == 16);
  const Fingerprint f = Fingerprint::Random();
  Map map;
  for (int k = 0; k < 100'000; ++k) {
    map.Insert({}, f.Of(fmt::format("k{}", k)), k);
    if (map.size() > 1000) {
      const double load = static_cast<double>(map.size()) / static_cast<double>(map.capacity());
      ASSERT_GE(load, 0.74) << map.size();
      ASSERT_LE(load, 0.85) << map.size();
    }
  }
}

TEST(FingerprintMapTest, SlotsKeepTheirPlaceWhenOthersAreErased) {
  const Fingerprint f = Fingerprint::Random();
  auto key = [&](int k) { return f.Of(fmt::format("k{}", k)); };
  Map map;
  for (int k = 0; k < 1000; ++k) {
    map.Insert({}, key(k), k);
  }
  Map::Slot* const k501 = map.Find({}, key(501));
  for (int k = 0; k < 1000; k += 2) {
    map.Erase(map.Find({}, key(k)));
  }
  EXPECT_EQ(map.Find({}, key(501)), k501) << "erasing others moved it";
  EXPECT_EQ(k501->value, 501);
  EXPECT_EQ(map.Find({}, key(500)), nullptr);
  size_t at = 0;
  for (size_t i = 0; i < map.capacity(); ++i) {
    at += map.At(i) != nullptr ? 1 : 0;
  }
  EXPECT_EQ(at, 500u);
  // Erasing the rest leaves no erased mark behind: every probe path ends in an empty slot.
  for (int k = 1; k < 1000; k += 2) {
    map.Erase(map.Find({}, key(k)));
  }
  EXPECT_TRUE(map.empty());
  EXPECT_FALSE(map.NearingGrowth());
}

}  // namespace
}  // namespace sluice::internal
