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
      std::memcpy(bytes_, key.data(), key.size());
      bytes_[kTag] = static_cast<char>(key.size());
    } else {
      char* heap = new char[key.size()];
      std::memcpy(heap, key.data(), key.size());
      const uint64_t size = key.size();
      std::memcpy(bytes_, &heap, sizeof(heap));
      std::memcpy(bytes_ + 8, &size, sizeof(size));
      bytes_[kTag] = kOnHeap;
    }
  }
  InlineKey(const InlineKey& other) : InlineKey(other.view()) {}
  InlineKey(InlineKey&& other) noexcept {
    std::memcpy(bytes_, other.bytes_, sizeof(bytes_));
    other.bytes_[kTag] = 0;  // The heap block, if any, is ours now.
  }
  InlineKey& operator=(InlineKey other) noexcept {
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  ~InlineKey() {
    if (on_heap()) {
      delete[] heap();
    }
  }

  std::string_view view() const {
    if (on_heap()) {
      uint64_t size = 0;
      std::memcpy(&size, bytes_ + 8, sizeof(size));
      return {heap(), size};
    }
    return {bytes_, static_cast<size_t>(bytes_[kTag])};
  }

 private:
  static constexpr size_t kTag = 23;  // Length when inline; kOnHeap otherwise.
  static constexpr char kOnHeap = static_cast<char>(0xFF);

  bool on_heap() const { return bytes_[kTag] == kOnHeap; }
  char* heap() const {
    char* p = nullptr;
    std::memcpy(&p, bytes_, sizeof(p));
    return p;
  }

  alignas(8) char bytes_[24] = {};
};

static_assert(sizeof(InlineKey) == 24);

}  // namespace sluice::internal
