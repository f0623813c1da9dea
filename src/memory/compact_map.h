#pragma once

// CompactMap: the hash table of one memory-store shard. It is an open-addressing table of
// (InlineKey, Stored) slots with a control byte per slot, probed sixteen at a time with SSE2
// (as Abseil's and Boost's flat tables are). Why not boost::unordered_flat_map: that table
// doubles, so right after it grows it is 44% full, and a million 32-byte slots then cost 75
// bytes each. CompactMap grows by a fifth: it stays between 72% and 87.5% full, so a slot of
// 32 bytes (and its control byte) costs 38 to 46 bytes of memory. It also gives a stable slot
// index, which the store's reclaiming walk uses as its cursor.
//
// Not thread-safe: the shard's lock guards it. Pointers to slots stay valid until the next
// Insert (which may grow the table); Erase leaves other slots where they are.

#include <emmintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string_view>
#include <utility>

#include "boost/container_hash/hash.hpp"

#include "src/memory/inline_key.h"

namespace sluice::internal {

// The hash of a key, everywhere in the memory store. boost::hash is header-only, so it
// inlines (Debian's absl::Hash is a call into a shared library); CompactMap remixes it.
inline size_t KeyHashOf(std::string_view key) { return boost::hash<std::string_view>{}(key); }

template <typename Stored>
class CompactMap {
 public:
  struct Slot {
    InlineKey key;
    Stored value;
  };
  static constexpr bool kKeepsKeys = true;  // Slots hold the key's text (a FingerprintMap's not).

  CompactMap() = default;
  CompactMap(const CompactMap&) = delete;
  CompactMap& operator=(const CompactMap&) = delete;
  ~CompactMap() { Destroy(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return capacity_; }

  // Whether the table is past 80% full, most of the way from its last growth to its next.
  bool NearingGrowth() const { return (size_ + deleted_) * 10 >= capacity_ * 8; }

  // The slot holding `key`, or null. `hash` must be the key's hash as given to Insert.
  [[gnu::always_inline]] Slot* Find(std::string_view key, size_t hash) {
    if (capacity_ == 0) {
      return nullptr;
    }
    const size_t groups = capacity_ / kGroup;
    size_t g = GroupOf(hash, groups);
    const __m128i fragment = _mm_set1_epi8(static_cast<char>(FragmentOf(hash)));
    const __m128i empty = _mm_set1_epi8(static_cast<char>(kEmpty));
    for (size_t probed = 0; probed < groups; ++probed) {
      const __m128i ctrl =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(ctrl_.get() + g * kGroup));
      auto matches = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(ctrl, fragment)));
      while (matches != 0) {
        const size_t i = g * kGroup + static_cast<size_t>(__builtin_ctz(matches));
        if (slots_[i].key.Equals(key)) {
          return &slots_[i];
        }
        matches &= matches - 1;
      }
      if (_mm_movemask_epi8(_mm_cmpeq_epi8(ctrl, empty)) != 0) {
        return nullptr;  // A probe sequence ends at the first group with an empty slot.
      }
      g = g + 1 == groups ? 0 : g + 1;
    }
    return nullptr;
  }

  // Prefetching, for a caller that will Find `hash` soon (MemoryStore::DecideBatch): stage 0
  // asks for the control group Find reads first; stage 1, once that has arrived, for the slots
  // whose fragment matches. Changes nothing.
  void Prefetch(size_t hash, int stage) const {
    if (capacity_ == 0) {
      return;
    }
    const size_t g = GroupOf(hash, capacity_ / kGroup);
    if (stage == 0) {
      __builtin_prefetch(ctrl_.get() + g * kGroup);
      return;
    }
    const __m128i ctrl =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(ctrl_.get() + g * kGroup));
    auto matches = static_cast<uint32_t>(_mm_movemask_epi8(
        _mm_cmpeq_epi8(ctrl, _mm_set1_epi8(static_cast<char>(FragmentOf(hash))))));
    for (; matches != 0; matches &= matches - 1) {
      // A slot may straddle two cache lines (the array is aligned to 16 bytes): both.
      const Slot* slot = &slots_[g * kGroup + static_cast<size_t>(__builtin_ctz(matches))];
      __builtin_prefetch(slot);
      __builtin_prefetch(reinterpret_cast<const char*>(slot) + sizeof(Slot) - 1);
    }
  }

  // Stores a new key. REQUIRES: Find(key, hash) is null.
  Slot* Insert(InlineKey key, size_t hash, Stored value) {
    if (capacity_ == 0 || (size_ + deleted_ + 1) * 8 > capacity_ * 7) {
      Rehash(size_ + 1);
    }
    const size_t i = FreeSlotFor(hash);
    if (ctrl_[i] == kDeleted) {
      --deleted_;
    }
    ctrl_[i] = FragmentOf(hash);
    new (&slots_[i]) Slot{std::move(key), std::move(value)};
    ++size_;
    return &slots_[i];
  }

  // Removes the key in `slot`. REQUIRES: slot came from this map and holds a key.
  void Erase(Slot* slot) {
    const auto i = static_cast<size_t>(slot - slots_.get());
    slot->~Slot();
    // A slot whose group still has an empty one can become empty itself: no probe sequence
    // passes through a group with an empty slot, so none needs to step over this one.
    const size_t g = i / kGroup * kGroup;
    bool group_has_empty = false;
    for (size_t j = g; j < g + kGroup; ++j) {
      group_has_empty = group_has_empty || ctrl_[j] == kEmpty;
    }
    ctrl_[i] = group_has_empty ? kEmpty : kDeleted;
    deleted_ += group_has_empty ? 0 : 1;
    --size_;
  }

  // The slot at index i (0 <= i < capacity()), or null when it holds no key.
  Slot* At(size_t i) { return IsFull(ctrl_[i]) ? &slots_[i] : nullptr; }

  template <typename F>
  void ForEach(F f) {
    for (size_t i = 0; i < capacity_; ++i) {
      if (IsFull(ctrl_[i])) {
        f(slots_[i]);
      }
    }
  }

 private:
  static constexpr size_t kGroup = 16;
  static constexpr uint8_t kEmpty = 0x80;
  static constexpr uint8_t kDeleted = 0xFE;
  static bool IsFull(uint8_t c) { return c < 0x80; }

  // The store picks the shard from the top bits of a remix of the hash; the group comes from
  // the bits below those, and the 7-bit fragment from the bottom.
  static uint64_t Mix(size_t hash) { return static_cast<uint64_t>(hash) * 0x9E3779B97F4A7C15ULL; }
  static size_t GroupOf(size_t hash, size_t groups) {
    return static_cast<size_t>((static_cast<unsigned __int128>(Mix(hash) << 8) * groups) >> 64);
  }
  static uint8_t FragmentOf(size_t hash) { return static_cast<uint8_t>(Mix(hash) & 0x7F); }

  size_t FreeSlotFor(size_t hash) const {
    const size_t groups = capacity_ / kGroup;
    size_t g = GroupOf(hash, groups);
    while (true) {
      for (size_t j = g * kGroup; j < (g + 1) * kGroup; ++j) {
        if (!IsFull(ctrl_[j])) {
          return j;
        }
      }
      g = g + 1 == groups ? 0 : g + 1;
    }
  }

  // Moves every key into a table sized so that `live` keys fill it to 72%: it then grows by a
  // fifth each time, at 87.5% full.
  void Rehash(size_t live) {
    const size_t wanted = (live * 100 + 71) / 72;
    const size_t capacity = std::max<size_t>(kGroup, (wanted + kGroup - 1) / kGroup * kGroup);
    auto ctrl = std::make_unique<uint8_t[]>(capacity);
    std::memset(ctrl.get(), kEmpty, capacity);
    std::unique_ptr<Slot[], Free> slots(static_cast<Slot*>(
        ::operator new[](capacity * sizeof(Slot), std::align_val_t{alignof(Slot)})));
    std::swap(ctrl, ctrl_);
    std::swap(slots, slots_);
    const size_t old_capacity = capacity_;
    capacity_ = capacity;
    size_ = 0;
    deleted_ = 0;
    for (size_t i = 0; i < old_capacity; ++i) {
      if (IsFull(ctrl[i])) {
        Slot& old = slots[i];
        const size_t hash = KeyHashOf(old.key.view());
        const size_t j = FreeSlotFor(hash);
        ctrl_[j] = FragmentOf(hash);
        new (&slots_[j]) Slot{std::move(old)};
        old.~Slot();  // NOLINT(bugprone-use-after-move): a moved-from slot is still destroyed.
        ++size_;
      }
    }
  }

  void Destroy() {
    for (size_t i = 0; i < capacity_; ++i) {
      if (IsFull(ctrl_[i])) {
        slots_[i].~Slot();
      }
    }
  }

  struct Free {
    void operator()(Slot* p) const { ::operator delete[](p, std::align_val_t{alignof(Slot)}); }
  };

  std::unique_ptr<uint8_t[]> ctrl_;
  std::unique_ptr<Slot[], Free> slots_;
  size_t capacity_ = 0;
  size_t size_ = 0;
  size_t deleted_ = 0;
};

}  // namespace sluice::internal
