// The shard table: TableOf, the Table of one algorithm's states in one encoding, and the
// choice between encodings that MakeTable makes. TableOf stays in this file's unnamed
// namespace, so the whole of a decision (probe, decide, reclaim) is compiled together.

#include "src/memory/table.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <type_traits>
#include <variant>

#include "absl/container/inlined_vector.h"

#include "src/core/tat.h"
#include "src/memory/compact_map.h"
#include "src/memory/compact_state.h"
#include "src/memory/divisors.h"
#include "src/memory/fingerprint_map.h"
#include "src/memory/inline_key.h"

namespace sluice::internal {
namespace {

// `MapOf`: CompactMap, keeping keys; or FingerprintMap, keeping fingerprints (compact keys).
template <typename State, typename Storage = AsIs<State>,
          template <typename> typename MapOf = CompactMap>
class TableOf final : public Table {
 public:
  using Table::Table;
  using Stored = typename Storage::Stored;

  Outcome Decide(std::string_view key, size_t hash, int64_t cost, Timestamp now, Decision& out,
                 Others others) override {
    Shard& shard = shards_[ShardOf(hash)];
    SpinLockHolder lock(shard.mu);
    if (retired()) [[unlikely]] {
      return Outcome::kRetired;
    }
    // The hot path: a stored key, decided in place, its decision written straight to `out`.
    if (Slot* slot = shard.states.Find(key, hash); slot != nullptr) [[likely]] {
      out = DecideStored(slot->value, now, cost);
      return Outcome::kDecided;
    }
    return DecideNew(shard, HashedKey{key, hash}, cost, now, others, out);
  }

  Decision DecideHeld(HashedKey key, int64_t cost, Timestamp now,
                      Mode mode) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // The caller holds the shard's lock; the analysis cannot follow a lock taken by address.
    return *DecideInShard(shards_[ShardOf(key.hash)], key, cost, now, mode, /*room_made=*/true,
                          Others{});
  }

  Room MakeRoomHeld(HashedKey key, Timestamp now, int64_t claimed,
                    Others others) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Shard& shard = shards_[ShardOf(key.hash)];
    if (shard.states.Find(key.key, key.hash) != nullptr) {
      return Room::kStored;
    }
    return MakeRoom(shard, now, others, claimed) ? Room::kMade : Room::kNone;
  }

  std::optional<AnyState> StateHeld(HashedKey key) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Shard& shard = shards_[ShardOf(key.hash)];
    if (Slot* slot = shard.states.Find(key.key, key.hash); slot != nullptr) {
      return AnyState{Storage::Unpack(slot->value)};
    }
    return std::nullopt;
  }

  void PutHeld(HashedKey key, const AnyState& state) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const auto& s = std::get<State>(state);
    assert(Storage::Fits(s));
    Shard& shard = shards_[ShardOf(key.hash)];
    if (Slot* slot = shard.states.Find(key.key, key.hash); slot != nullptr) {
      slot->value = Storage::Pack(s);
    } else {
      Insert(shard, key.key, key.hash, Storage::Pack(s));
      StripeOf(shard).keys.fetch_add(1, std::memory_order_relaxed);
    }
  }

  void EraseHeld(HashedKey key) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Shard& shard = shards_[ShardOf(key.hash)];
    if (Slot* slot = shard.states.Find(key.key, key.hash); slot != nullptr) {
      shard.states.Erase(slot);
      StripeOf(shard).keys.fetch_sub(1, std::memory_order_relaxed);
    }
  }

  size_t KeyCount() override {
    size_t n = 0;
    for (Shard& shard : shards_) {
      SpinLockHolder lock(shard.mu);
      n += shard.states.size();
    }
    return n;
  }

  void Prefetch(HashedKey key, int stage) override {
    if (!Map::kKeepsKeys && stage == 1) {
      return;  // A fingerprint's slot is its whole entry: stage 0 fetched it.
    }
    Shard& shard = shards_[ShardOf(key.hash)];
    if (!shard.mu.TryLock()) {
      return;
    }
    shard.states.Prefetch(key.hash, stage);
    shard.mu.Unlock();
  }

  void Save(SnapshotWriter& w) override {
    if constexpr (Map::kKeepsKeys) {
      for (Shard& shard : shards_) {
        SpinLockHolder lock(shard.mu);
        shard.states.ForEach([&](const Slot& slot) {
          w.U8(1);
          w.U32(static_cast<uint32_t>(slot.key.view().size()));
          w.Bytes(slot.key.view());
          Encode(Storage::Unpack(slot.value), w);
        });
      }
    } else {
      assert(false && "a table of fingerprints has no keys to save");
    }
  }

  bool Put(std::string_view key, const AnyState& state) override {
    const auto& s = std::get<State>(state);
    assert(Storage::Fits(s));
    const size_t hash = KeyHash(key);
    Shard& shard = shards_[ShardOf(hash)];
    SpinLockHolder lock(shard.mu);
    if (retired()) {
      return false;
    }
    if (Slot* slot = shard.states.Find(key, hash); slot != nullptr) {
      slot->value = Storage::Pack(s);
    } else {
      Insert(shard, key, hash, Storage::Pack(s));
      StripeOf(shard).keys.fetch_add(1, std::memory_order_relaxed);
    }
    return true;
  }

  bool DropReset(Timestamp now) override {
    for (Shard& shard : shards_) {
      SpinLockHolder lock(shard.mu);
      for (size_t i = 0; i < shard.states.capacity(); ++i) {
        if (Slot* slot = shard.states.At(i); slot != nullptr && HasReset(slot->value, now)) {
          Drop(shard, slot);  // Erasing leaves the other slots where they are.
        }
      }
      if (!shard.states.empty()) {
        return false;
      }
    }
    return true;
  }

  bool RetireIfEmpty(absl::FunctionRef<void()> unpublish) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (Shard& shard : shards_) {  // In address order: no deadlock with DecideAll's Held.
      shard.mu.Lock();
    }
    const bool empty = std::all_of(
        shards_.begin(), shards_.end(),
        [](Shard& shard) ABSL_NO_THREAD_SAFETY_ANALYSIS { return shard.states.empty(); });
    if (empty) {
      MarkRetired();
      unpublish();
    }
    for (Shard& shard : shards_) {
      shard.mu.Unlock();
    }
    return empty;
  }

  static bool Fits(const State& s) { return Storage::Fits(s); }

 private:
  using Map = MapOf<Stored>;
  using Slot = typename Map::Slot;

  struct alignas(64) Shard {  // A cache line each, so that two shards' locks never share one.
    SpinLock mu;
    Map states ABSL_GUARDED_BY(mu);
    size_t cursor ABSL_GUARDED_BY(mu) = 0;  // The slot where the walk of MakeRoom resumes.
  };

  void Insert(Shard& shard, std::string_view key, size_t hash, Stored stored)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    if constexpr (Map::kKeepsKeys) {
      shard.states.Insert(InlineKey(key), hash, std::move(stored));
    } else {
      shard.states.Insert(key, hash, std::move(stored));
    }
  }

  // `room_made`: MakeRoomHeld has made room for a new key (or the mode is a dry run).
  std::optional<Decision> DecideInShard(Shard& shard, HashedKey key, int64_t cost, Timestamp now,
                                        Mode mode, bool room_made, Others others)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    if (Slot* slot = shard.states.Find(key.key, key.hash); slot != nullptr) {
      if (mode == Mode::kApply) {  // In place: a sliding log is not copied per request.
        return DecideStored(slot->value, now, cost);
      }
      Stored copy = slot->value;
      return DecideStored(copy, now, cost);
    }
    return DecideFresh(shard, key, cost, now, mode, room_made, others);
  }

  // Decide's path for a key not stored: out of line, so that the hot path stays small.
  [[gnu::noinline]] Outcome DecideNew(Shard& shard, HashedKey key, int64_t cost, Timestamp now,
                                      Others others, Decision& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    std::optional<Decision> d =
        DecideFresh(shard, key, cost, now, Mode::kApply, /*room_made=*/false, others);
    if (!d) [[unlikely]] {
      return Outcome::kFull;
    }
    out = *d;
    return Outcome::kDecided;
  }

  // A key not stored: decided from a fresh state, and created only by an admission that
  // changes it. Empty when there is no room for it.
  std::optional<Decision> DecideFresh(Shard& shard, HashedKey key, int64_t cost, Timestamp now,
                                      Mode mode, bool room_made, Others others)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    State fresh;
    const Decision d = sluice::Decide(limit(), fresh, now, cost);
    if (mode == Mode::kApply && d.allowed && cost > 0) {
      if (!room_made && !MakeRoom(shard, now, others)) [[unlikely]] {
        return std::nullopt;
      }
      Insert(shard, key.key, key.hash, Storage::Pack(fresh));
      StripeOf(shard).keys.fetch_add(1, std::memory_order_relaxed);
    }
    return d;
  }

  // Decides on a stored state in place, changing it only when the request is admitted with a
  // cost. A state stored as is goes to its algorithm's Decide (a sliding log is not copied); a
  // compact TAT is decided by the inline arithmetic of src/core/tat.h, the very code that
  // gcra's and leaky_bucket's Decide run, so the decision compiles into the probe.
  [[gnu::always_inline]] Decision DecideStored(Stored& stored, Timestamp now, int64_t cost) {
    if constexpr (std::is_same_v<Stored, State>) {
      return sluice::Decide(limit(), stored, now, cost);
    } else if constexpr (std::is_same_v<Storage, CompactTat<State>>) {
      State state = Storage::Unpack(stored);
      const Decision d = NarrowWide(DecideTat(limit(), state.tat, now, cost,
                                              std::is_same_v<State, LeakyBucketState>, divisors_));
      if (d.allowed && cost > 0) {
        stored = Storage::Pack(state);
      }
      return d;
    } else {
      State state = Storage::Unpack(stored);
      const Decision d = sluice::Decide(limit(), state, now, cost);
      if (d.allowed && cost > 0) {
        stored = Storage::Pack(state);
      }
      return d;
    }
  }

  // The figures a cost-0 query would get for a stored state: whether it has reset. A cost-0
  // decision changes nothing, so a state stored as is is decided on in place, not copied (a
  // sliding log can be large).
  Decision Probe(Stored& stored, Timestamp now) {
    if constexpr (std::is_same_v<Stored, State>) {
      return sluice::Decide(limit(), stored, now, 0);
    } else {
      State state = Storage::Unpack(stored);
      return sluice::Decide(limit(), state, now, 0);
    }
  }

  Budget::Stripe& StripeOf(const Shard& shard) { return budget().stripe(&shard - shards_.data()); }

  // Drops a key whose state has reset: it decides as a new key does, so nothing is lost.
  void Drop(Shard& shard, Slot* slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    shard.states.Erase(slot);
    Budget::Stripe& stripe = StripeOf(shard);
    stripe.keys.fetch_sub(1, std::memory_order_relaxed);
    stripe.reclaimed.fetch_add(1, std::memory_order_relaxed);
  }

  bool HasReset(Stored& stored, Timestamp now) {
    return Probe(stored, now).reset_after == Micros{0};
  }

  // The next `n` keys of the shard's walk round its slots (fewer if it holds fewer). Erasing
  // one of them leaves the others where they are.
  absl::InlinedVector<Slot*, kFullSearch> Walk(Shard& shard, int n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    Map& map = shard.states;
    absl::InlinedVector<Slot*, kFullSearch> walked;
    const size_t capacity = map.capacity();
    const size_t wanted = std::min(static_cast<size_t>(n), map.size());
    size_t i = shard.cursor < capacity ? shard.cursor : 0;
    for (size_t looked = 0; walked.size() < wanted && looked < capacity; ++looked) {
      if (Slot* slot = map.At(i); slot != nullptr) {
        walked.push_back(slot);
      }
      i = i + 1 == capacity ? 0 : i + 1;
    }
    shard.cursor = i;
    return walked;
  }

  // Before a new key goes in: when the shard's map nears the point where it would grow, or
  // the store is full, drop reset keys met on the walk; when the store is still full, look for
  // one in other tables (see MemoryStore's comment for the policy). Whether there is room now.
  // Reclaiming only under pressure matters: a key requested less often than it resets would
  // otherwise be dropped and made again each time.
  // `claimed`: new keys of the same request already given room in this shard index and not
  // yet inserted (DecideAll), so that one request cannot pass the bound by its own size.
  bool MakeRoom(Shard& shard, Timestamp now, Others others, int64_t claimed = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    const auto index = static_cast<size_t>(&shard - shards_.data());
    const bool full = budget().Full(index, claimed);
    if (!full && !shard.states.NearingGrowth()) {
      return true;
    }
    for (Slot* slot : Walk(shard, full ? kFullSearch : kReclaimPerInsert)) {
      if (HasReset(slot->value, now)) {
        Drop(shard, slot);
      }
    }
    // Each key found elsewhere makes room for one: at most `claimed` + 1 searches.
    while (budget().Full(index, claimed)) {
      if (!ReclaimElsewhere(index, now, others)) {
        StripeOf(shard).refused.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
    }
    return true;
  }

  // Drops one reset key of shard `index` in up to kOtherTablesAsked of `others` (they count
  // against the same stripe); whether it found one. Their locks are only tried, never waited
  // for: two new keys searching each other's tables cannot deadlock, a busy shard is simply
  // not asked this time, and a shard this request holds cannot be try-locked.
  bool ReclaimElsewhere(size_t index, Timestamp now, Others others) {
    const size_t tables = others.size();
    size_t t = round_robin_.fetch_add(1, std::memory_order_relaxed);
    for (size_t k = 0; k < std::min(kOtherTablesAsked, tables); ++k) {
      Table* other = others[t++ % tables];
      if (other == this) {
        continue;
      }
      SpinLock& lock = other->ShardLock(index);
      if (!lock.TryLock()) {
        continue;
      }
      const bool found = other->ReclaimOne(index, now);
      lock.Unlock();
      if (found) {
        return true;
      }
    }
    return false;
  }

 public:
  SpinLock& ShardLock(size_t index) override { return shards_[index].mu; }

  bool ReclaimOne(size_t index, Timestamp now) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Shard& shard = shards_[index];  // The caller holds its lock (by index).
    for (Slot* slot : Walk(shard, kFullSearch)) {
      if (HasReset(slot->value, now)) {
        Drop(shard, slot);
        return true;
      }
    }
    return false;
  }

 private:
  const LimitDivisors divisors_{limit()};  // For the compact TAT's decisions.
  std::array<Shard, kShards> shards_;
  std::atomic<size_t> round_robin_{0};  // Where the search of other tables starts.
};

// gcra's or leaky_bucket's table: its TAT in 64 bits when the limit allows, under fingerprints
// too when asked (compact keys); else as is.
template <typename State>
std::unique_ptr<Table> MakeTatTable(const Limit& limit, Budget& budget, Timestamp created,
                                    const Fingerprint* compact_keys) {
  if (!TatFitsCompact(limit)) {
    return std::make_unique<TableOf<State>>(limit, budget, created, nullptr);
  }
  if (compact_keys != nullptr) {
    return std::make_unique<TableOf<State, CompactTat<State>, FingerprintMap>>(
        limit, budget, created, compact_keys);
  }
  return std::make_unique<TableOf<State, CompactTat<State>>>(limit, budget, created, nullptr);
}

}  // namespace

// Whether a table for `limit` can hold `state`: a compact table only what fits its 64 bits
// (a state written by this store always does; a crafted snapshot might not).
bool Storable(const Limit& limit, const AnyState& state) {
  switch (limit.algorithm()) {
    case Algorithm::kTokenBucket:
      return !LevelFitsCompact(limit) ||
             CompactTokenBucket::Fits(std::get<TokenBucketState>(state));
    case Algorithm::kGcra:
      return !TatFitsCompact(limit) || CompactTat<GcraState>::Fits(std::get<GcraState>(state));
    case Algorithm::kLeakyBucket:
      return !TatFitsCompact(limit) ||
             CompactTat<LeakyBucketState>::Fits(std::get<LeakyBucketState>(state));
    default:
      return true;
  }
}

std::unique_ptr<Table> MakeTable(const Limit& limit, Budget& budget, Timestamp created,
                                 const Fingerprint* compact_keys) {
  switch (limit.algorithm()) {
    case Algorithm::kFixedWindow:
      return std::make_unique<TableOf<FixedWindowState>>(limit, budget, created, nullptr);
    case Algorithm::kSlidingLog:
      return std::make_unique<TableOf<SlidingLogState>>(limit, budget, created, nullptr);
    case Algorithm::kSlidingWindow:
      return std::make_unique<TableOf<SlidingWindowState>>(limit, budget, created, nullptr);
    case Algorithm::kSlidingBuckets:
      return std::make_unique<TableOf<SlidingBucketsState>>(limit, budget, created, nullptr);
    case Algorithm::kTokenBucket:
      if (LevelFitsCompact(limit)) {
        return std::make_unique<TableOf<TokenBucketState, CompactTokenBucket>>(limit, budget,
                                                                               created, nullptr);
      }
      return std::make_unique<TableOf<TokenBucketState>>(limit, budget, created, nullptr);
    case Algorithm::kGcra:
      return MakeTatTable<GcraState>(limit, budget, created, compact_keys);
    case Algorithm::kLeakyBucket:
      return MakeTatTable<LeakyBucketState>(limit, budget, created, compact_keys);
  }
  return nullptr;  // Unreachable: the switch covers every enumerator.
}

}  // namespace sluice::internal
