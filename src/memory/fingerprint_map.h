#pragma once

// FingerprintMap: the hash table of one memory-store shard in compact-keys mode
// (MemoryStoreOptions::compact_keys). It keeps, per key, its 64-bit keyed fingerprint
// (src/memory/fingerprint.h) and its state, not its text: for gcra's 8-byte TAT a slot is 16
// bytes, four to a cache line, and the fingerprint is the slot's own mark (0 empty, 1 erased),
// so there is no control array and a lookup of a stored key usually touches one cache line
// (CompactMap touches two: its control group, then the slot); a miss probes on to an empty
// slot, several lines at 85% full. Linear probing; the table is rebuilt at 85% full to 75% full,
// so a key costs 16 / 0.85 to 16 / 0.75 bytes: 18.8 to 21.3.
//
// It has CompactMap's interface, so the shard table (src/memory/table.cc) runs over either:
// Find, Insert, Erase, At, capacity, NearingGrowth, Prefetch. The key text passed to Find and
// Insert is ignored: `hash` must be the key's fingerprint (at least Fingerprint::kFirstKey).
//
// Not thread-safe: the shard's lock guards it. Pointers to slots stay valid until the next
// Insert (which may grow the table); Erase leaves other slots where they are.

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string_view>
#include <type_traits>
#include <utility>

#include "src/memory/fingerprint.h"

namespace sluice::internal {

template <typename Stored>
class FingerprintMap {
 public:
  struct Slot {
    uint64_t fingerprint;
    Stored value;
  };
  static constexpr bool kKeepsKeys = false;

  FingerprintMap() = default;
  FingerprintMap(const FingerprintMap&) = delete;
  FingerprintMap& operator=(const FingerprintMap&) = delete;

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return capacity_; }

  // Whether the table is past 82% full, most of the way from its last growth to its next.
  bool NearingGrowth() const { return (size_ + deleted_) * 100 >= capacity_ * 82; }

  Slot* Find(std::string_view /*key*/, size_t hash) {
    assert(hash >= Fingerprint::kFirstKey);
    if (capacity_ == 0) {
      return nullptr;
    }
    size_t i = HomeOf(hash);
    for (size_t probed = 0; probed < capacity_; ++probed) {
      const uint64_t f = slots_[i].fingerprint;
      if (f == hash) {
        return &slots_[i];
      }
      if (f == kEmpty) {
        return nullptr;  // A probe sequence ends at the first empty slot.
      }
      i = i + 1 == capacity_ ? 0 : i + 1;
    }
    return nullptr;
  }

  // Asks for the cache line Find reads first (stage 0; stage 1 has nothing more to ask).
  void Prefetch(size_t hash, int stage) const {
    if (capacity_ != 0 && stage == 0) {
      __builtin_prefetch(&slots_[HomeOf(hash)]);
    }
  }

  // Stores a new key. REQUIRES: Find(key, hash) is null.
  Slot* Insert(std::string_view /*key*/, size_t hash, Stored value) {
    assert(hash >= Fingerprint::kFirstKey);
    if (capacity_ == 0 || (size_ + deleted_ + 1) * 100 > capacity_ * 85) {
      Rehash(size_ + 1);
    }
    const size_t i = FreeSlotFor(hash);
    if (slots_[i].fingerprint == kErased) {
      --deleted_;
    }
    slots_[i] = Slot{hash, value};
    ++size_;
    return &slots_[i];
  }

  // Removes the key in `slot`. REQUIRES: slot came from this map and holds a key.
  void Erase(Slot* slot) {
    size_t i = static_cast<size_t>(slot - slots_.get());
    const size_t next = i + 1 == capacity_ ? 0 : i + 1;
    --size_;
    if (slots_[next].fingerprint != kEmpty) {
      slots_[i].fingerprint = kErased;  // A probe may pass through: leave a mark.
      ++deleted_;
      return;
    }
    // Followed by an empty slot, no probe needs to pass through it, nor through the erased
    // marks just before it: they become empty too. No key moves.
    slots_[i].fingerprint = kEmpty;
    for (size_t n = 1; n < capacity_; ++n) {
      i = i == 0 ? capacity_ - 1 : i - 1;
      if (slots_[i].fingerprint != kErased) {
        break;
      }
      slots_[i].fingerprint = kEmpty;
      --deleted_;
    }
  }

  // The slot at index i (0 <= i < capacity()), or null when it holds no key.
  Slot* At(size_t i) {
    return slots_[i].fingerprint >= Fingerprint::kFirstKey ? &slots_[i] : nullptr;
  }

 private:
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kErased = 1;
  static constexpr size_t kLine = 64 / sizeof(Slot) > 0 ? 64 / sizeof(Slot) : 1;

  // The store picks the shard from the top bits of a remix of the hash (ShardOf); the home slot
  // comes from the bits below those.
  size_t HomeOf(size_t hash) const {
    const uint64_t mixed = static_cast<uint64_t>(hash) * 0x9E3779B97F4A7C15ULL;
    return static_cast<size_t>((static_cast<unsigned __int128>(mixed << 8) * capacity_) >> 64);
  }

  size_t FreeSlotFor(size_t hash) const {
    size_t i = HomeOf(hash);
    while (slots_[i].fingerprint >= Fingerprint::kFirstKey) {
      i = i + 1 == capacity_ ? 0 : i + 1;
    }
    return i;
  }

  // Moves every key into a table sized so that `live` keys fill it to 75%, in whole lines.
  void Rehash(size_t live) {
    const size_t wanted = (live * 100 + 74) / 75;
    const size_t capacity = std::max(kLine, (wanted + kLine - 1) / kLine * kLine);
    std::unique_ptr<Slot[], Free> slots(
        static_cast<Slot*>(::operator new[](capacity * sizeof(Slot), std::align_val_t{kAlign})));
    std::fill_n(slots.get(), capacity, Slot{kEmpty, Stored{}});
    const std::unique_ptr<Slot[], Free> old = std::exchange(slots_, std::move(slots));
    const size_t old_capacity = std::exchange(capacity_, capacity);
    deleted_ = 0;  // size_ stays: every key moves over.
    for (size_t i = 0; i < old_capacity; ++i) {
      if (old[i].fingerprint >= Fingerprint::kFirstKey) {
        slots_[FreeSlotFor(old[i].fingerprint)] = old[i];
      }
    }
  }

  static constexpr size_t kAlign = std::max<size_t>(64, alignof(Slot));
  struct Free {
    void operator()(Slot* p) const { ::operator delete[](p, std::align_val_t{kAlign}); }
  };
  static_assert(std::is_trivially_copyable_v<Stored>, "slots are copied as bytes");

  std::unique_ptr<Slot[], Free> slots_;
  size_t capacity_ = 0;
  size_t size_ = 0;
  size_t deleted_ = 0;
};

}  // namespace sluice::internal
