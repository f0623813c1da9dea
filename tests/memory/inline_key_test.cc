#include "src/memory/inline_key.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace sluice::internal {
namespace {

TEST(InlineKeyTest, KeepsEveryLengthExactly) {
  for (size_t n : {0, 1, 15, 16, 22, 23, 24, 25, 100, 1000}) {
    std::string text(n, 'x');
    for (size_t i = 0; i < n; ++i) {
      text[i] = static_cast<char>('a' + i % 26);
    }
    if (n > 3) {
      text[2] = '\0';  // Keys are bytes, not C strings.
    }
    const InlineKey key(text);
    EXPECT_EQ(key.view(), text) << n;
    InlineKey copy = key;
    EXPECT_EQ(copy.view(), text) << n;
    InlineKey moved = std::move(copy);
    EXPECT_EQ(moved.view(), text) << n;
    InlineKey assigned("short");
    assigned = moved;
    EXPECT_EQ(assigned.view(), text) << n;
  }
}

TEST(InlineKeyTest, SurvivesAVectorsReallocations) {
  std::vector<InlineKey> keys;
  for (int i = 0; i < 1000; ++i) {
    keys.emplace_back(std::string(static_cast<size_t>(i % 40), static_cast<char>('A' + i % 26)));
  }
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(keys[i].view(),
              std::string(static_cast<size_t>(i % 40), static_cast<char>('A' + i % 26)));
  }
}

// Equals reads the key in overlapping words: every length, each byte changed in turn (one
// missed would make two keys one), and every other length, must answer as view() == does.
TEST(InlineKeyTest, EqualsTellsEveryByteOfEveryLengthApart) {
  for (size_t n = 0; n <= 40; ++n) {
    std::string text(n, 'k');
    for (size_t i = 0; i < n; ++i) {
      text[i] = static_cast<char>('a' + (i * 7) % 26);
    }
    const InlineKey key(text);
    EXPECT_TRUE(key.Equals(text)) << n;
    for (size_t i = 0; i < n; ++i) {
      std::string other = text;
      other[i] = static_cast<char>(other[i] ^ 0x01);
      EXPECT_FALSE(key.Equals(other)) << n << " at " << i;
      other[i] = '\0';
      EXPECT_FALSE(key.Equals(other)) << n << " at " << i;
    }
    // Shorter (a prefix) and longer (zero bytes after it, as the inline form pads) keys.
    for (size_t m = 0; m < n; ++m) {
      EXPECT_FALSE(key.Equals(std::string_view(text).substr(0, m))) << n << " " << m;
    }
    for (size_t m = n + 1; m <= 40; ++m) {
      EXPECT_FALSE(key.Equals(text + std::string(m - n, '\0'))) << n << " " << m;
    }
  }
}

}  // namespace
}  // namespace sluice::internal
