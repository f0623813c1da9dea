#include "sluice/memory_store.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "fmt/format.h"

#include "sluice/algorithms.h"
#include "src/memory/compact_map.h"
#include "src/memory/inline_key.h"
#include "src/memory/leases.h"
#include "src/core/mutex.h"
#include "src/memory/snapshot.h"
#include "src/core/status.h"

namespace sluice {

namespace {

using internal::InlineKey;
using internal::Mutex;
using internal::MutexLock;
using internal::SnapshotReader;
using internal::SnapshotWriter;
using internal::SpinLock;
using internal::SpinLockHolder;

constexpr size_t kShardBits = 6;
constexpr size_t kShards = size_t{1} << kShardBits;

// A key with its hash computed once: the shard is chosen by it, and the shard's map finds
// the key by it without hashing again.
struct HashedKey {
  std::string_view key;
  size_t hash;
};

size_t HashOf(std::string_view key) { return internal::KeyHashOf(key); }

// How a table stores a key's state. By default as the algorithm's own struct; the bucket
// algorithms' 128-bit numbers in 64 bits when the limit keeps them there (see Compact*).
template <typename State>
struct AsIs {
  using Stored = State;
  static bool Fits(const State&) { return true; }
  static State Unpack(const Stored& s) { return s; }
  static Stored Pack(const State& s) { return s; }
};

// TAT x N' of gcra and leaky_bucket never exceeds t*N' + B*P' (a larger backlog is denied). It
// fits in an int64 for every t the store accepts (up to MemoryStore::kLatest) when that bound
// does: 8 bytes per key.
constexpr int64_t kCompactUntil = MemoryStore::kLatest.time_since_epoch().count();
constexpr int64_t kNoCompactTat = std::numeric_limits<int64_t>::min();

bool TatFitsCompact(const Limit& limit) {
  const Int128 largest =
      Int128{kCompactUntil} * limit.rate_units() + Int128{limit.burst()} * limit.rate_period_us();
  return largest <= std::numeric_limits<int64_t>::max();
}

template <typename State>  // GcraState or LeakyBucketState
struct CompactTat {
  using Stored = int64_t;
  static bool Fits(const State& s) {
    return s.tat == kNoTat ||
           (s.tat > kNoCompactTat && s.tat <= std::numeric_limits<int64_t>::max());
  }
  static State Unpack(Stored s) { return {.tat = s == kNoCompactTat ? kNoTat : Int128{s}}; }
  static Stored Pack(const State& s) {
    assert(s.tat == kNoTat || s.tat <= std::numeric_limits<int64_t>::max());
    return s.tat == kNoTat ? kNoCompactTat : static_cast<int64_t>(s.tat);
  }
};

// token_bucket's level never exceeds B*P': 16 bytes per key when that fits in an int64.
bool LevelFitsCompact(const Limit& limit) {
  return Int128{limit.burst()} * limit.rate_period_us() <= std::numeric_limits<int64_t>::max();
}

struct CompactTokenBucket {
  struct Stored {
    int64_t level;
    int64_t last;
  };
  static bool Fits(const TokenBucketState& s) {
    return s.level <= std::numeric_limits<int64_t>::max();
  }
  static TokenBucketState Unpack(const Stored& s) { return {.level = s.level, .last = s.last}; }
  static Stored Pack(const TokenBucketState& s) {
    return {.level = static_cast<int64_t>(s.level), .last = s.last};
  }
};

// The shard is the top bits of a multiplicative remix of the hash; the map mixes the hash its
// own way to place the key, so the keys of one shard still spread over the whole of its map.
size_t ShardOf(size_t hash) { return (hash * 0x9E3779B97F4A7C15ULL) >> (64 - kShardBits); }

enum class Mode { kApply, kDryRun };

// The store's key count and its bound, kept in one stripe per shard index (shard i of every
// table counts in stripe i), each on a cache line of its own: keys are created and dropped all
// the time (a key that resets between its requests is reclaimed and created again), and one
// counter shared by all threads would bounce between their cores on every one. Each stripe
// holds max_keys / kShards keys, rounded up; keys spread evenly over them by hash.
class Table;

class Budget {
 public:
  struct alignas(64) Stripe {
    std::atomic<int64_t> keys{0};
    std::atomic<uint64_t> reclaimed{0};
    std::atomic<uint64_t> evicted{0};
  };

  explicit Budget(size_t max_keys)
      : max_per_stripe_(static_cast<int64_t>((max_keys + kShards - 1) / kShards)) {}

  Stripe& stripe(size_t shard) { return stripes_[shard]; }
  bool Full(size_t shard) const {
    return max_per_stripe_ > 0 &&
           stripes_[shard].keys.load(std::memory_order_relaxed) >= max_per_stripe_;
  }
  // Every table of the store, in the order they were made, for eviction to choose among.
  void AddTable(Table* table) {  // Callers are serialised (the store's insert lock).
    const size_t n = table_count_.load(std::memory_order_relaxed);
    tables_[n].store(table, std::memory_order_relaxed);
    table_count_.store(n + 1, std::memory_order_release);  // Publishes tables_[n].
  }
  size_t table_count() const { return table_count_.load(std::memory_order_acquire); }
  Table* table(size_t i) const { return tables_[i].load(std::memory_order_relaxed); }

  MemoryStoreStats Stats() const {
    MemoryStoreStats stats;
    for (const Stripe& s : stripes_) {
      stats.keys += static_cast<size_t>(s.keys.load(std::memory_order_relaxed));
      stats.reclaimed += s.reclaimed.load(std::memory_order_relaxed);
      stats.evicted += s.evicted.load(std::memory_order_relaxed);
    }
    return stats;
  }

 private:
  const int64_t max_per_stripe_;  // 0: no bound.
  std::array<Stripe, kShards> stripes_;
  std::array<std::atomic<Table*>, MemoryStore::kMaxLimits> tables_{};
  std::atomic<size_t> table_count_{0};
};

// A key some table offers for eviction, and what eviction weighs. The slot is the table's own.
struct Nominee {
  Table* table = nullptr;
  void* slot = nullptr;
  bool denied = false;
  int64_t remaining = 0;
  int64_t capacity = 1;  // The limit's burst: remaining is compared as a fraction of it.
  Micros reset_after{0};
};

// Whether `a` is the better key to evict: never denied before denied; then the furthest from
// its limit (the most remaining, as a fraction of capacity); then the closest to resetting.
bool BetterVictim(const Nominee& a, const Nominee& b) {
  if (a.denied != b.denied) {
    return !a.denied;
  }
  const Int128 left_a = Int128{a.remaining} * b.capacity;
  const Int128 left_b = Int128{b.remaining} * a.capacity;
  if (!a.denied && left_a != left_b) {
    return left_a > left_b;
  }
  return a.reset_after < b.reset_after;
}

constexpr size_t kOtherTablesAsked = 3;  // Tables besides its own a new key may evict from.

constexpr int kReclaimPerInsert = 2;  // Keys looked at, per new key, for a reset state.
constexpr int kEvictionSample = 8;    // Keys compared to choose one to evict.

// The states of one Limit's keys.
class Table {
 public:
  Table(const Limit& limit, Budget& budget) : limit_(limit), budget_(budget) {}
  virtual ~Table() = default;

  const Limit& limit() const { return limit_; }
  Budget& budget() const { return budget_; }

  // Decides under the shard's lock.
  virtual Decision Decide(HashedKey key, int64_t cost, Timestamp now) = 0;
  // DecideAll's steps: the caller holds ShardLock(ShardOf(key.hash)) for the whole of them.
  // `keep`: the request's other keys, which making room for this one must not evict.
  virtual Decision DecideHeld(HashedKey key, int64_t cost, Timestamp now, Mode mode,
                              std::span<const HashedKey> keep) = 0;
  // Marks a key as denied (if it is stored) after DecideAll denied it. Lock held as above.
  virtual void MarkDeniedHeld(HashedKey key) = 0;
  virtual size_t KeyCount() = 0;

  // The lock of shard `index`, for those that take it from outside: DecideAll (for
  // ShardOf(key.hash)) and eviction across tables.
  virtual SpinLock& ShardLock(size_t index) = 0;
  // Eviction across tables. REQUIRES for both: the caller holds ShardLock(index).
  // The best victim among keys sampled from shard `index`, or none if it holds no key.
  virtual std::optional<Nominee> Nominate(size_t index, Timestamp now,
                                          std::span<const HashedKey> keep) = 0;
  // Drops a key Nominate offered, counting it as evicted.
  virtual void Evict(size_t index, void* slot) = 0;

  // Snapshots: writes every key as (u8 1, u32 length, key, state); see src/memory/snapshot.h.
  virtual void Save(SnapshotWriter& w) = 0;
  // Stores `state` for `key`. REQUIRES: the state's alternative is this table's algorithm and
  // Storable(limit(), state).
  virtual void Put(std::string_view key, const AnyState& state) = 0;

 private:
  const Limit limit_;
  Budget& budget_;  // The store's; outlives the table.
};

template <typename State, typename Storage = AsIs<State>>
class TableOf final : public Table {
 public:
  using Table::Table;
  using Stored = typename Storage::Stored;

  Decision Decide(HashedKey key, int64_t cost, Timestamp now) override {
    Shard& shard = shards_[ShardOf(key.hash)];
    SpinLockHolder lock(shard.mu);
    return DecideInShard(shard, key, cost, now, Mode::kApply, {});
  }

  Decision DecideHeld(HashedKey key, int64_t cost, Timestamp now, Mode mode,
                      std::span<const HashedKey> keep) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // The caller holds the shard's lock; the analysis cannot follow a lock taken by address.
    return DecideInShard(shards_[ShardOf(key.hash)], key, cost, now, mode, keep);
  }

  void MarkDeniedHeld(HashedKey key) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Shard& shard = shards_[ShardOf(key.hash)];
    if (Slot* slot = shard.states.Find(key.key, key.hash); slot != nullptr) {
      slot->key.mark_denied();
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

  void Save(SnapshotWriter& w) override {
    for (Shard& shard : shards_) {
      SpinLockHolder lock(shard.mu);
      shard.states.ForEach([&](const Slot& slot) {
        w.U8(1);
        w.U32(static_cast<uint32_t>(slot.key.view().size()));
        w.Bytes(slot.key.view());
        Encode(Storage::Unpack(slot.value), w);
      });
    }
  }

  void Put(std::string_view key, const AnyState& state) override {
    const auto& s = std::get<State>(state);
    assert(Storage::Fits(s));
    const size_t hash = HashOf(key);
    Shard& shard = shards_[ShardOf(hash)];
    SpinLockHolder lock(shard.mu);
    if (Slot* slot = shard.states.Find(key, hash); slot != nullptr) {
      slot->value = Storage::Pack(s);
    } else {
      shard.states.Insert(InlineKey(key), hash, Storage::Pack(s));
      StripeOf(shard).keys.fetch_add(1, std::memory_order_relaxed);
    }
  }

  static bool Fits(const State& s) { return Storage::Fits(s); }

 private:
  using Map = internal::CompactMap<Stored>;
  using Slot = typename Map::Slot;

  struct alignas(64) Shard {  // A cache line each, so that two shards' locks never share one.
    SpinLock mu;
    Map states ABSL_GUARDED_BY(mu);
    size_t cursor ABSL_GUARDED_BY(mu) = 0;  // The slot where the walk of MakeRoom resumes.
  };

  Decision DecideInShard(Shard& shard, HashedKey key, int64_t cost, Timestamp now, Mode mode,
                         std::span<const HashedKey> keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    if (Slot* slot = shard.states.Find(key.key, key.hash); slot != nullptr) {
      Decision d;
      if constexpr (std::is_same_v<Stored, State>) {
        if (mode == Mode::kApply) {  // In place: a sliding log is not copied per request.
          d = sluice::Decide(limit(), slot->value, now, cost);
        }
      }
      if (!std::is_same_v<Stored, State> || mode == Mode::kDryRun) {
        State state = Storage::Unpack(slot->value);
        d = sluice::Decide(limit(), state, now, cost);
        if (mode == Mode::kApply && d.allowed && cost > 0) {
          slot->value = Storage::Pack(state);
        }
      }
      if (mode == Mode::kApply && !d.allowed) {
        slot->key.mark_denied();  // Its owner is being limited: evict it last.
      }
      return d;
    }
    // A key is created only by an admission that changes its state.
    State fresh;
    const Decision d = sluice::Decide(limit(), fresh, now, cost);
    if (mode == Mode::kApply && d.allowed && cost > 0) {
      MakeRoom(shard, now, keep);
      shard.states.Insert(InlineKey(key.key), key.hash, Storage::Pack(fresh));
      StripeOf(shard).keys.fetch_add(1, std::memory_order_relaxed);
    }
    return d;
  }

  // The figures a cost-0 query would get for a stored state: what eviction weighs. A cost-0
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

  void Drop(Shard& shard, Slot* slot, std::atomic<uint64_t>& counter)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    shard.states.Erase(slot);
    StripeOf(shard).keys.fetch_sub(1, std::memory_order_relaxed);
    counter.fetch_add(1, std::memory_order_relaxed);
  }

  // The next `n` keys of the shard's walk round its slots (fewer if it holds fewer). Erasing
  // one of them leaves the others where they are.
  absl::InlinedVector<Slot*, kEvictionSample> Walk(Shard& shard, int n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    Map& map = shard.states;
    absl::InlinedVector<Slot*, kEvictionSample> walked;
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
  // the store is full, drop reset keys met on the walk; when the store is full, also evict one
  // (see MemoryStore's comment for the policy). Reclaiming only under pressure matters: a key
  // requested less often than it resets would otherwise be dropped and made again each time.
  void MakeRoom(Shard& shard, Timestamp now, std::span<const HashedKey> keep)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu) {
    const auto index = static_cast<size_t>(&shard - shards_.data());
    const bool full = budget().Full(index);
    const bool nearing_growth = shard.states.NearingGrowth();
    if (!full && !nearing_growth) {
      return;
    }
    for (Slot* slot : Walk(shard, kReclaimPerInsert)) {
      if (Probe(slot->value, now).reset_after == Micros{0}) {
        Drop(shard, slot, StripeOf(shard).reclaimed);
      }
    }
    if (!budget().Full(index)) {
      return;
    }
    EvictOne(index, now, keep);
  }

  // Evicts the best victim among this table's keys in shard `index` and those of a few other
  // tables' shards of the same index (they count against the same stripe). Their locks are
  // only tried, never waited for: two new keys evicting across each other's tables cannot
  // deadlock, and a busy shard is simply not asked this time. REQUIRES: the caller holds this
  // table's lock of shard `index`. The analysis cannot follow locks taken in a loop and held
  // across its iterations, hence the exemption.
  void EvictOne(size_t index, Timestamp now,
                std::span<const HashedKey> keep) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    std::optional<Nominee> best = Nominate(index, now, keep);
    SpinLock* other_lock = nullptr;  // Held while `best` is another table's.
    const size_t tables = budget().table_count();
    size_t t = round_robin_.fetch_add(1, std::memory_order_relaxed);
    for (size_t k = 0; k < std::min(kOtherTablesAsked, tables); ++k) {
      Table* other = budget().table(t++ % tables);
      if (other == this) {
        continue;
      }
      SpinLock& lock = other->ShardLock(index);
      if (!lock.TryLock()) {
        continue;
      }
      // Another table's shard that this request holds cannot be try-locked: its keys are safe.
      std::optional<Nominee> nominee = other->Nominate(index, now, {});
      if (nominee && (!best || BetterVictim(*nominee, *best))) {
        if (other_lock != nullptr) {
          other_lock->Unlock();
        }
        other_lock = &lock;
        best = nominee;
      } else {
        lock.Unlock();
      }
    }
    if (best) {
      best->table->Evict(index, best->slot);
    }
    if (other_lock != nullptr) {
      other_lock->Unlock();
    }
  }

 public:
  SpinLock& ShardLock(size_t index) override { return shards_[index].mu; }

  std::optional<Nominee> Nominate(size_t index, Timestamp now, std::span<const HashedKey> keep)
      override ABSL_NO_THREAD_SAFETY_ANALYSIS {  // The caller holds the shard's lock (by index).
    std::optional<Nominee> best;
    for (Slot* slot : Walk(shards_[index], kEvictionSample)) {
      if (std::any_of(keep.begin(), keep.end(),
                      [&](const HashedKey& k) { return k.key == slot->key.view(); })) {
        continue;
      }
      const Decision figures = Probe(slot->value, now);
      const Nominee n{.table = this,
                      .slot = slot,
                      .denied = slot->key.denied(),
                      .remaining = figures.remaining,
                      .capacity = limit().burst(),
                      .reset_after = figures.reset_after};
      if (!best || BetterVictim(n, *best)) {
        best = n;
      }
    }
    return best;
  }

  void Evict(size_t index, void* slot) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Shard& shard = shards_[index];
    Drop(shard, static_cast<Slot*>(slot), StripeOf(shard).evicted);
  }

 private:
  std::array<Shard, kShards> shards_;
  std::atomic<size_t> round_robin_{0};  // Where eviction starts asking other tables.
};

// Whether a state read from a snapshot could have been made by this store under `limit`:
// counts within the limit, times within the store's range, log entries no newer than the
// last admission. A file can pass its checksum and still be crafted; the algorithms assume
// these bounds (sums within int64, products within 128 bits), so a state outside them is
// refused rather than decided on.
bool InRange(int64_t last) { return last == kNoTime || (last >= 0 && last < kCompactUntil); }
bool Plausible(const Limit& l, const FixedWindowState& s) {
  return InRange(s.last) && s.count >= 0 && s.count <= l.limit();
}
bool Plausible(const Limit& l, const SlidingWindowState& s) {
  return InRange(s.last) && s.cur >= 0 && s.cur <= l.limit() && s.prev >= 0 && s.prev <= l.limit();
}
bool PlausibleQueue(const Limit& l, int64_t last, const CountQueue& q, int64_t width) {
  if (!InRange(last) || (last == kNoTime && !q.empty())) {
    return false;
  }
  int64_t total = 0;
  for (const CountQueue::Entry& e : q.entries()) {
    if (e.index < 0 || e.index > last / width || e.count > l.limit() - total) {
      return false;
    }
    total += e.count;
  }
  return true;
}
bool Plausible(const Limit& l, const SlidingLogState& s) {
  return PlausibleQueue(l, s.last, s.log, 1);
}
bool Plausible(const Limit& l, const SlidingBucketsState& s) {
  return PlausibleQueue(l, s.last, s.buckets, l.period().count() / l.buckets());
}
bool Plausible(const Limit& l, const TokenBucketState& s) {
  return InRange(s.last) && s.level >= 0 && s.level <= Int128{l.burst()} * l.rate_period_us();
}
bool PlausibleTat(const Limit& l, Int128 tat) {
  return tat == kNoTat || (tat >= 0 && tat <= Int128{kCompactUntil} * l.rate_units() +
                                                  Int128{l.burst()} * l.rate_period_us());
}
bool Plausible(const Limit& l, const GcraState& s) { return PlausibleTat(l, s.tat); }
bool Plausible(const Limit& l, const LeakyBucketState& s) { return PlausibleTat(l, s.tat); }

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

std::unique_ptr<Table> MakeTable(const Limit& limit, Budget& budget) {
  switch (limit.algorithm()) {
    case Algorithm::kFixedWindow:
      return std::make_unique<TableOf<FixedWindowState>>(limit, budget);
    case Algorithm::kSlidingLog:
      return std::make_unique<TableOf<SlidingLogState>>(limit, budget);
    case Algorithm::kSlidingWindow:
      return std::make_unique<TableOf<SlidingWindowState>>(limit, budget);
    case Algorithm::kSlidingBuckets:
      return std::make_unique<TableOf<SlidingBucketsState>>(limit, budget);
    case Algorithm::kTokenBucket:
      if (LevelFitsCompact(limit)) {
        return std::make_unique<TableOf<TokenBucketState, CompactTokenBucket>>(limit, budget);
      }
      return std::make_unique<TableOf<TokenBucketState>>(limit, budget);
    case Algorithm::kGcra:
      if (TatFitsCompact(limit)) {
        return std::make_unique<TableOf<GcraState, CompactTat<GcraState>>>(limit, budget);
      }
      return std::make_unique<TableOf<GcraState>>(limit, budget);
    case Algorithm::kLeakyBucket:
      if (TatFitsCompact(limit)) {
        return std::make_unique<TableOf<LeakyBucketState, CompactTat<LeakyBucketState>>>(limit,
                                                                                         budget);
      }
      return std::make_unique<TableOf<LeakyBucketState>>(limit, budget);
  }
  return nullptr;  // Unreachable: the switch covers every enumerator.
}

}  // namespace

absl::Status CheckTime(Timestamp now) {
  if (now < MemoryStore::kEarliest || now >= MemoryStore::kLatest) [[unlikely]] {
    return absl::InvalidArgumentError(
        fmt::format("time {}us is outside the memory store's range, 1970 to 2200",
                    now.time_since_epoch().count()));
  }
  return absl::OkStatus();
}

// The memory store's own bound on what a limit may ask of it; see kMaxSlidingLogLimit.
absl::Status CheckMemoryLimit(const Limit& limit) {
  if (limit.algorithm() == Algorithm::kSlidingLog &&
      limit.limit() > MemoryStore::kMaxSlidingLogLimit) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: the memory store keeps sliding_log limits of at most {} (a log entry per admitted "
        "timestamp per key); use sliding_buckets for a sliding window over more",
        limit.ToString(), MemoryStore::kMaxSlidingLogLimit));
  }
  return absl::OkStatus();
}

// Finds a Limit's table without a lock: an open-addressed array of pointers that only ever go
// from null to a table, so a reader that meets null knows the limit was absent when it
// looked, and the writer, under its lock, looks again before it inserts.
class MemoryStore::Tables {
 public:
  explicit Tables(size_t max_keys) : budget_(max_keys) {}

  const Budget& budget() const { return budget_; }
  internal::LeaseTable& leases() { return leases_; }

  absl::StatusOr<Table*> Find(const Limit& limit) {
    const size_t start = SlotOf(limit);
    for (size_t i = 0; i < kMaxLimits; ++i) {
      // Acquire: the table a non-null pointer leads to was fully built before it was published.
      Table* table = slots_[(start + i) % kMaxLimits].load(std::memory_order_acquire);
      if (table == nullptr) {
        return Insert(limit, start);
      }
      if (table->limit() == limit) {
        return table;
      }
    }
    return Full(limit);
  }

  size_t KeyCount() {
    size_t n = 0;
    ForEach([&](Table& table) { n += table.KeyCount(); });
    return n;
  }

  template <typename F>
  void ForEach(F f) {
    for (auto& slot : slots_) {
      if (Table* table = slot.load(std::memory_order_acquire); table != nullptr) {
        f(*table);
      }
    }
  }

 private:
  absl::StatusOr<Table*> Insert(const Limit& limit, size_t start) {
    if (absl::Status s = CheckMemoryLimit(limit); !s.ok()) {
      return s;  // Refused once, when its table would be made: no cost on the hot path.
    }
    MutexLock lock(insert_mu_);
    for (size_t i = 0; i < kMaxLimits; ++i) {
      std::atomic<Table*>& slot = slots_[(start + i) % kMaxLimits];
      Table* table = slot.load(std::memory_order_relaxed);  // Writers are serialised by the lock.
      if (table == nullptr) {
        owned_.push_back(MakeTable(limit, budget_));
        budget_.AddTable(owned_.back().get());
        slot.store(owned_.back().get(), std::memory_order_release);
        return owned_.back().get();
      }
      if (table->limit() == limit) {
        return table;
      }
    }
    return Full(limit);
  }

  // Where a limit's probe starts: a cheap mix of its numbers, since this runs on every request.
  static size_t SlotOf(const Limit& limit) {
    uint64_t h = static_cast<uint64_t>(limit.limit()) * 0x9E3779B97F4A7C15ULL;
    h ^= static_cast<uint64_t>(limit.period().count()) * 0xC2B2AE3D27D4EB4FULL;
    h ^= static_cast<uint64_t>(limit.burst()) * 0x165667B19E3779F9ULL;
    h ^= static_cast<uint64_t>(limit.buckets()) * 0x27D4EB2F165667C5ULL;
    h ^= static_cast<uint64_t>(limit.algorithm());
    return static_cast<size_t>(h ^ (h >> 29));
  }

  static absl::Status Full(const Limit& limit) {
    return absl::ResourceExhaustedError(
        fmt::format("the memory store already holds {} distinct limits; refusing {}", kMaxLimits,
                    limit.ToString()));
  }

  Budget budget_;
  internal::LeaseTable leases_;
  std::array<std::atomic<Table*>, kMaxLimits> slots_{};
  Mutex insert_mu_;
  std::vector<std::unique_ptr<Table>> owned_ ABSL_GUARDED_BY(insert_mu_);
};

MemoryStore::MemoryStore(MemoryStoreOptions options)
    : tables_(std::make_unique<Tables>(options.max_keys)) {}
MemoryStore::~MemoryStore() = default;

absl::StatusOr<Decision> MemoryStore::Decide(const Limit& limit, std::string_view key, int64_t cost,
                                             Timestamp now) {
  if (absl::Status s = ValidateRequest(1, cost); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckTime(now); !s.ok()) {
    return s;
  }
  absl::StatusOr<Table*> table = tables_->Find(limit);
  if (!table.ok()) {
    return table.status();
  }
  return (*table)->Decide({key, HashOf(key)}, cost, now);
}

absl::StatusOr<Decision> MemoryStore::DecideAll(std::span<const LimitedKey> requests, int64_t cost,
                                                Timestamp now,
                                                std::span<Decision> each)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // Locks a runtime set of shard mutexes, in address order.
  assert(each.size() == requests.size());
  if (requests.size() == 1) {
    // One limit is all or nothing by itself: decided in one pass, as Decide does, rather than
    // a dry run and then the change (the server's usual request has one limit).
    absl::StatusOr<Decision> decision = Decide(*requests[0].limit, requests[0].key, cost, now);
    if (decision.ok()) {
      each[0] = *decision;
    }
    return decision;
  }
  if (absl::Status s = ValidateRequest(requests.size(), cost); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckTime(now); !s.ok()) {
    return s;
  }
  struct Target {
    Table* table;
    HashedKey key;
  };
  absl::InlinedVector<Target, 4> targets;
  absl::InlinedVector<SpinLock*, 4> locks;
  for (const LimitedKey& r : requests) {
    absl::StatusOr<Table*> table = tables_->Find(*r.limit);
    if (!table.ok()) {
      return table.status();
    }
    const HashedKey key{r.key, HashOf(r.key)};
    for (size_t j = 0; j < targets.size(); ++j) {
      if (targets[j].table == *table && requests[j].key == r.key) {
        // Deciding one state twice in one all-or-nothing request cannot be undone half-way.
        return absl::InvalidArgumentError(
            fmt::format("limit {} on key '{}' appears twice", r.limit->ToString(), r.key));
      }
    }
    targets.push_back({*table, key});
    locks.push_back(&(*table)->ShardLock(ShardOf(key.hash)));
  }
  // One global order (by address) for taking several shard locks, so two requests that share
  // shards can never wait on each other.
  std::sort(locks.begin(), locks.end());
  locks.erase(std::unique(locks.begin(), locks.end()), locks.end());
  // Held until the end of the call, however it ends.
  class Held {
   public:
    explicit Held(absl::InlinedVector<SpinLock*, 4>& locks) ABSL_NO_THREAD_SAFETY_ANALYSIS
        : locks_(locks) {
      for (SpinLock* lock : locks_) {
        lock->Lock();
      }
    }
    ~Held() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      for (SpinLock* lock : locks_) {
        lock->Unlock();
      }
    }
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;

   private:
    absl::InlinedVector<SpinLock*, 4>& locks_;
  } held(locks);
  absl::InlinedVector<HashedKey, 4> keys;
  for (const Target& target : targets) {
    keys.push_back(target.key);
  }
  bool all_allowed = true;
  for (size_t i = 0; i < requests.size(); ++i) {
    each[i] = targets[i].table->DecideHeld(targets[i].key, cost, now, Mode::kDryRun, {});
    all_allowed = all_allowed && each[i].allowed;
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (all_allowed) {
      each[i] = targets[i].table->DecideHeld(targets[i].key, cost, now, Mode::kApply, keys);
    } else if (each[i].allowed) {
      // Nothing is recorded, so this limit's honest figures are those of a cost-0 query.
      each[i] = targets[i].table->DecideHeld(targets[i].key, 0, now, Mode::kDryRun, {});
    } else {
      targets[i].table->MarkDeniedHeld(targets[i].key);
    }
  }
  return Combine(each);
}

absl::StatusOr<Decision> MemoryStore::LeaseAll(LeaseOp op, std::span<const LeasedKey> keys,
                                               std::string_view id, Micros ttl, Timestamp now,
                                               std::span<Decision> each) {
  assert(each.size() == keys.size());
  if (absl::Status s = ValidateLeases(op, keys, id, ttl); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckTime(now); !s.ok()) {
    return s;
  }
  return tables_->leases().LeaseAll(op, keys, id, ttl, now, each);
}

size_t MemoryStore::LeasedKeyCount() const { return tables_->leases().KeyCount(); }

absl::Status MemoryStore::CheckLimit(const Limit& limit) const { return CheckMemoryLimit(limit); }

size_t MemoryStore::KeyCount() const { return tables_->KeyCount(); }

MemoryStoreStats MemoryStore::Stats() const { return tables_->budget().Stats(); }

absl::Status MemoryStore::SaveSnapshot(const std::string& path) const {
  SnapshotWriter w;
  tables_->ForEach([&](Table& table) {
    const Limit& limit = table.limit();
    w.U8(1);
    w.U8(static_cast<uint8_t>(limit.algorithm()));
    w.I64(limit.limit());
    w.I64(limit.period().count());
    w.I64(limit.burst());
    w.I64(limit.buckets());
    table.Save(w);
    w.U8(0);
  });
  w.U8(0);
  return internal::WriteSnapshotFile(path, w.data());
}

namespace {

enum class Pass { kCheck, kLoad };

// One pass over a snapshot's body: kCheck only checks that every part is well-formed; kLoad
// also stores, in the table `find` gives, each key that still carries information at `now`.
// Returns the number of such keys.
absl::StatusOr<size_t> ReadSnapshotBody(
    std::string_view body, const std::string& path, Timestamp now,
    absl::FunctionRef<absl::StatusOr<Table*>(const Limit&)> find, Pass pass) {
  SnapshotReader r(body);
  auto corrupt = [&](std::string_view why) {
    return absl::DataLossError(
        fmt::format("snapshot {} is unusable at byte {} of its body: {}", path, r.offset(), why));
  };
  size_t kept = 0;
  while (true) {
    uint8_t more = 0;
    if (!r.U8(more) || more > 1) {
      return corrupt("expected a table or the end");
    }
    if (more == 0) {
      break;
    }
    uint8_t algorithm = 0;
    LimitSpec spec;
    int64_t period = 0;
    int64_t burst = 0;
    int64_t buckets = 0;
    if (!r.U8(algorithm) || algorithm > static_cast<uint8_t>(Algorithm::kLeakyBucket) ||
        !r.I64(spec.limit) || !r.I64(period) || !r.I64(burst) || !r.I64(buckets)) {
      return corrupt("a table's limit is malformed");
    }
    spec.algorithm = static_cast<Algorithm>(algorithm);
    spec.period = Micros(period);
    spec.burst = burst;
    spec.buckets = buckets;
    const absl::StatusOr<Limit> limit = Limit::Create(spec);
    if (!limit.ok()) {
      return corrupt(internal::Message(limit.status()));
    }
    // Found (made, if need be) in the check pass too, so that a limit the store refuses is
    // refused before any key is stored.
    absl::StatusOr<Table*> found = find(*limit);
    if (!found.ok()) {
      return found.status();
    }
    Table* const table = *found;
    while (true) {
      uint8_t entry = 0;
      if (!r.U8(entry) || entry > 1) {
        return corrupt("expected a key or the end of a table");
      }
      if (entry == 0) {
        break;
      }
      uint32_t length = 0;
      std::string_view key;
      AnyState state = InitialState(limit->algorithm());
      const bool decoded = r.U32(length) && r.Bytes(length, key) &&
                           std::visit([&](auto& s) { return internal::Decode(r, s); }, state);
      if (!decoded || !std::visit([&](const auto& st) { return Plausible(*limit, st); }, state) ||
          !Storable(*limit, state)) {
        return corrupt("a key's state is malformed");
      }
      // A state that has fully reset decides as a new key does: it carries nothing.
      AnyState probe = state;
      if (Decide(*limit, probe, now, 0).reset_after == Micros{0}) {
        continue;
      }
      ++kept;
      if (pass == Pass::kLoad) {
        table->Put(key, state);
      }
    }
  }
  if (!r.at_end()) {
    return corrupt("bytes after the end");
  }
  return kept;
}

}  // namespace

absl::StatusOr<size_t> MemoryStore::LoadSnapshot(const std::string& path, Timestamp now) {
  const absl::StatusOr<std::string> body = internal::ReadSnapshotFile(path);
  if (!body.ok()) {
    return body.status();
  }
  auto find = [this](const Limit& limit) { return tables_->Find(limit); };
  // Check the whole body before storing anything: a snapshot loads whole or not at all.
  if (absl::StatusOr<size_t> checked = ReadSnapshotBody(*body, path, now, find, Pass::kCheck);
      !checked.ok()) {
    return checked.status();
  }
  return ReadSnapshotBody(*body, path, now, find, Pass::kLoad);
}

}  // namespace sluice
