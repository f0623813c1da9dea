#pragma once

// InlineKey: a string in 24 bytes, for the memory store's tables. Keys of up to 23 characters
// (an IPv6 address's /64 prefix, "user:1234567890", an API key id) live inside it; longer ones
// on the heap. std::string holds only 15 inline in 32 bytes, so a 16-character key would cost
// 32 bytes in the table plus a heap block.

#include <cstdint>
#include <cstring>
#include <string_view>

namespace sluice::internal {

class InlineKey {
 public:
  static constexpr size_t kInlineCapacity = 23;

  explicit InlineKey(std::string_view key) {
    if (key.size() <= kInlineCapacity) {
      if (!key.empty()) {  // An empty view's data() may be null, which memcpy must not get.
        std::memcpy(bytes_, key.data(), key.size());
      }
      tag_ = static_cast<uint8_t>(key.size());
    } else {
      char* heap = new char[key.size()];
      std::memcpy(heap, key.data(), key.size());
      const uint64_t size = key.size();
      std::memcpy(bytes_, &heap, sizeof(heap));
      std::memcpy(bytes_ + 8, &size, sizeof(size));
      tag_ = kOnHeap;
    }
  }
  InlineKey(const InlineKey& other) : InlineKey(other.view()) {}
  InlineKey(InlineKey&& other) noexcept : tag_(other.tag_) {
    std::memcpy(bytes_, other.bytes_, sizeof(bytes_));
    other.tag_ = 0;  // The heap block, if any, is ours now.
  }
  InlineKey& operator=(InlineKey other) noexcept {
    std::swap(bytes_, other.bytes_);
    std::swap(tag_, other.tag_);
    return *this;
  }
  ~InlineKey() {
    if (on_heap()) {
      delete[] heap();
    }
  }

  // Whether this is `key`: view() == key, without a call to memcmp for an inline key (the
  // hot path compares one key per request, most of them short).
  [[gnu::always_inline]] bool Equals(std::string_view key) const {
    if (key.size() > kInlineCapacity) {
      return on_heap() && view() == key;
    }
    return static_cast<size_t>(tag_ & kLengthMask) == key.size() &&
           ShortEqual(bytes_, key.data(), key.size());
  }

  std::string_view view() const {
    if (on_heap()) {
      uint64_t size = 0;
      std::memcpy(&size, bytes_ + 8, sizeof(size));
      return {heap(), size};
    }
    return {bytes_, static_cast<size_t>(tag_ & kLengthMask)};
  }

 private:
  // tag_: the length (0 to 23) or kOnHeap.
  static constexpr uint8_t kLengthMask = 0x7F;
  static constexpr uint8_t kOnHeap = 0x7F;

  // Whether the n <= 23 bytes at a and b are equal: two or three overlapping words read
  // inside [0, n) of each, as memcmp's own short paths do.
  static bool ShortEqual(const char* a, const char* b, size_t n) {
    if (n >= 8) {
      const bool middle = n <= 16 || Word<uint64_t>(a + 8) == Word<uint64_t>(b + 8);
      return Word<uint64_t>(a) == Word<uint64_t>(b) &&
             Word<uint64_t>(a + n - 8) == Word<uint64_t>(b + n - 8) && middle;
    }
    if (n >= 4) {
      return Word<uint32_t>(a) == Word<uint32_t>(b) &&
             Word<uint32_t>(a + n - 4) == Word<uint32_t>(b + n - 4);
    }
    return n == 0 || (a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1]);
  }
  template <typename W>
  static W Word(const char* p) {
    W w;
    std::memcpy(&w, p, sizeof(w));
    return w;
  }

  bool on_heap() const { return (tag_ & kLengthMask) == kOnHeap; }
  char* heap() const {
    char* p = nullptr;
    std::memcpy(&p, bytes_, sizeof(p));
    return p;
  }

  alignas(8) char bytes_[kInlineCapacity] = {};
  uint8_t tag_ = 0;
};

static_assert(sizeof(InlineKey) == 24);

}  // namespace sluice::internal
