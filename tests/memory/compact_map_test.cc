#include "src/memory/compact_map.h"

#include <random>
#include <string>
#include <unordered_map>

#include "fmt/format.h"
#include "gtest/gtest.h"

#include "tests/testing/util.h"

namespace sluice::internal {
namespace {

using Map = CompactMap<int64_t>;

int64_t* Lookup(Map& map, const std::string& key) {
  Map::Slot* slot = map.Find(key, KeyHashOf(key));
  return slot == nullptr ? nullptr : &slot->value;
}

// Random inserts, updates and erases, checked against std::unordered_map after every step:
// through growth, tombstones, and rehashes that shrink the table again.
TEST(CompactMapTest, BehavesAsAMapThroughGrowthAndErasure) {
  std::mt19937_64 random(testing::Seed(7));
  Map map;
  std::unordered_map<std::string, int64_t> reference;
  for (int step = 0; step < 200'000; ++step) {
    // Phases: mostly inserting, then mostly erasing, so the table grows and then empties.
    const bool erasing = (step / 50'000) % 2 == 1;
    const std::string key = fmt::format("key-{}", random() % 30'000);
    int64_t* found = Lookup(map, key);
    const auto it = reference.find(key);
    ASSERT_EQ(found != nullptr, it != reference.end()) << key;
    if (found != nullptr) {
      ASSERT_EQ(*found, it->second);
    }
    const bool erase = erasing ? random() % 4 != 0 : random() % 4 == 0;
    if (found != nullptr && erase) {
      map.Erase(map.Find(key, KeyHashOf(key)));
      reference.erase(it);
    } else if (found != nullptr) {
      *found += 1;
      it->second += 1;
    } else if (!erase) {
      map.Insert(InlineKey(key), KeyHashOf(key), step);
      reference.emplace(key, step);
    }
    ASSERT_EQ(map.size(), reference.size());
    ASSERT_LE(map.size() * 8, map.capacity() * 7);
  }
  size_t seen = 0;
  map.ForEach([&](const Map::Slot& slot) {
    ++seen;
    EXPECT_EQ(reference.at(std::string(slot.key.view())), slot.value);
  });
  EXPECT_EQ(seen, reference.size());
}

TEST(CompactMapTest, StaysBetweenSeventyTwoAndEightySevenPercentFull) {
  Map map;
  for (int k = 0; k < 100'000; ++k) {
    const std::string key = fmt::format("k{}", k);
    map.Insert(InlineKey(key), KeyHashOf(key), k);
    if (map.size() > 1000) {
      const double load = static_cast<double>(map.size()) / static_cast<double>(map.capacity());
      ASSERT_GE(load, 0.70) << map.size();
      ASSERT_LE(load, 0.875) << map.size();
    }
  }
}

TEST(CompactMapTest, SlotsKeepTheirPlaceWhenOthersAreErased) {
  Map map;
  for (int k = 0; k < 1000; ++k) {
    const std::string key = fmt::format("k{}", k);
    map.Insert(InlineKey(key), KeyHashOf(key), k);
  }
  Map::Slot* const k501 = map.Find("k501", KeyHashOf("k501"));
  for (int k = 0; k < 1000; k += 2) {
    const std::string key = fmt::format("k{}", k);
    map.Erase(map.Find(key, KeyHashOf(key)));
  }
  EXPECT_EQ(map.Find("k501", KeyHashOf("k501")), k501) << "erasing others moved it";
  EXPECT_EQ(k501->value, 501);
  EXPECT_EQ(map.Find("k500", KeyHashOf("k500")), nullptr);
  size_t at = 0;
  for (size_t i = 0; i < map.capacity(); ++i) {
    at += map.At(i) != nullptr ? 1 : 0;
  }
  EXPECT_EQ(at, 500u);
}

}  // namespace
}  // namespace sluice::internal
