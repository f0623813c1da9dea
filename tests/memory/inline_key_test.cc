#include "src/memory/inline_key.h"

#include <string>
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

}  // namespace
}  // namespace sluice::internal
