#include "sluice/memory_store.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/escaping.h"
#include "fmt/format.h"

#include "sluice/algorithms.h"
#include "src/core/mutex.h"
#include "src/core/status.h"
#include "src/memory/batch.h"
#include "src/memory/eviction.h"
#include "src/memory/fingerprint.h"
#include "src/memory/leases.h"
#include "src/memory/registry.h"
#include "src/memory/shards.h"
#include "src/memory/snapshot.h"
#include "src/memory/table.h"

namespace sluice {

namespace {

using internal::Budget;
using internal::Fingerprint;
using internal::HashedKey;
using internal::Mode;
using internal::Mutex;
using internal::MutexLock;
using internal::Plausible;
using internal::Registry;
using internal::ShardOf;
using internal::SnapshotReader;
using internal::SnapshotWriter;
using internal::SpinLock;
using internal::Storable;
using internal::Table;

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

// A new key refused: see "Bounded memory" in MemoryStore's comment.
absl::Status StoreFull(size_t max_keys, const Limit& limit, std::string_view key) {
  return absl::ResourceExhaustedError(fmt::format(
      "the memory store is full ({} keys, --max-keys) and none has reset to make room for key "
      "'{}' of {}",
      max_keys, absl::CHexEscape(absl::string_view(key.data(), std::min<size_t>(key.size(), 64))),
      limit.ToString()));
}

// The fingerprint of compact keys, if asked for (MemoryStoreOptions).
std::optional<Fingerprint> CompactKeys(const MemoryStoreOptions& options) {
  if (!options.compact_keys) {
    return std::nullopt;
  }
  if (const uint64_t secret = options.compact_keys_secret_for_testing; secret != 0) {
    return Fingerprint(secret, ~secret);
  }
  return Fingerprint::Random();
}

// The store's parts: the key budget, the leases, and the registry of limit tables.
class MemoryStore::Tables {
 public:
  explicit Tables(MemoryStoreOptions options)
      : max_keys_(options.max_keys),
        compact_keys_(CompactKeys(options)),
        budget_(options.max_keys),
        leases_(options.max_leases),
        registry_(kMaxLimits, budget_, compact_keys_ ? &*compact_keys_ : nullptr) {}

  size_t max_keys() const { return max_keys_; }
  bool compact_keys() const { return compact_keys_.has_value(); }
  const Budget& budget() const { return budget_; }
  internal::LeaseTable& leases() { return leases_; }
  const internal::LeaseTable& leases() const { return leases_; }
  Registry& registry() { return registry_; }

  // The table of `limit` in `view`; or null once one has been made (pin again and look).
  absl::StatusOr<Table*> Find(const Registry::View& view, const Limit& limit, Timestamp now) {
    if (Table* table = view.Find(limit); table != nullptr) [[likely]] {
      return table;
    }
    if (absl::Status s = CheckMemoryLimit(limit); !s.ok()) {
      return s;  // Refused once, when its table would be made: no cost on the hot path.
    }
    if (absl::Status s = registry_.Insert(limit, now); !s.ok()) {
      return s;
    }
    return nullptr;
  }

  // DecideAll's tables, each with its key and shard lock, found in `view`. False when a table
  // had to be made (pin again); InvalidArgument when a limit and key appear twice.
  template <typename Targets, typename Locks>
  absl::StatusOr<bool> FindAll(const Registry::View& view, std::span<const LimitedKey> requests,
                               Timestamp now, Targets& targets, Locks& locks) {
    targets.clear();
    locks.clear();
    for (const LimitedKey& r : requests) {
      absl::StatusOr<Table*> table = Find(view, *r.limit, now);
      if (!table.ok()) {
        return table.status();
      }
      if (*table == nullptr) {
        return false;
      }
      const HashedKey key{r.key, (*table)->KeyHash(r.key)};
      for (size_t j = 0; j < targets.size(); ++j) {
        // Two keys with one fingerprint (compact keys) are one state too.
        if (targets[j].table == *table &&
            (requests[j].key == r.key ||
             ((*table)->fingerprinted() && targets[j].key.hash == key.hash))) {
          // Deciding one state twice in one all-or-nothing request cannot be undone half-way.
          return absl::InvalidArgumentError(
              requests[j].key == r.key
                  ? fmt::format("limit {} on key '{}' appears twice", r.limit->ToString(), r.key)
                  : fmt::format("limit {}: keys '{}' and '{}' share a fingerprint (compact "
                                "keys) and cannot be charged together",
                                r.limit->ToString(), requests[j].key, r.key));
        }
      }
      targets.push_back({*table, key});
      locks.push_back(&(*table)->ShardLock(ShardOf(key.hash)));
    }
    return true;
  }

  size_t KeyCount() {
    size_t n = 0;
    ForEach([&](Table& table) { n += table.KeyCount(); });
    return n;
  }

  template <typename F>
  void ForEach(F f) {
    const std::shared_ptr<const Registry::View> view = registry_.Current();
    for (Table* table : view->tables) {
      f(*table);
    }
  }

 private:
  const size_t max_keys_;
  const std::optional<Fingerprint> compact_keys_;  // Set: compact keys (MemoryStoreOptions).
  Budget budget_;
  internal::LeaseTable leases_;
  Registry registry_;
};

namespace {

// A store call looks its tables up again when one it found was retired meanwhile, or it made
// one; each time another thread must have retired or made a table. Past this many tries (a
// table made and retired over and over at once), the call gives up.
constexpr int kMaxLookups = 64;

absl::Status Churning(const Limit& limit) {
  return absl::UnavailableError(
      fmt::format("the memory store's table for {} was retired {} times in a row; try again",
                  limit.ToString(), kMaxLookups));
}

}  // namespace

MemoryStore::MemoryStore(MemoryStoreOptions options) : tables_(std::make_unique<Tables>(options)) {}
MemoryStore::~MemoryStore() = default;

absl::StatusOr<Decision> MemoryStore::Decide(const Limit& limit, std::string_view key, int64_t cost,
                                             Timestamp now) {
  // Every path returns `result`, which the table decides into: the Decision is not copied.
  absl::StatusOr<Decision> result(Decision{});
  if (absl::Status s = ValidateRequest(1, cost); !s.ok()) {
    result = std::move(s);
    return result;
  }
  if (absl::Status s = CheckTime(now); !s.ok()) {
    result = std::move(s);
    return result;
  }
  for (int lookup = 0; lookup < kMaxLookups; ++lookup) {
    const Registry::View& view = tables_->registry().Pin();
    absl::StatusOr<Table*> table = tables_->Find(view, limit, now);
    if (!table.ok()) {
      result = table.status();
      return result;
    }
    if (*table == nullptr) {
      continue;  // Made: pin the View that holds it.
    }
    switch ((*table)->Decide(key, (*table)->KeyHash(key), cost, now, *result, view.tables)) {
      case Table::Outcome::kDecided:
        return result;
      case Table::Outcome::kFull:
        result = StoreFull(tables_->max_keys(), limit, key);
        return result;
      case Table::Outcome::kRetired:
        break;  // Look again.
    }
  }
  result = Churning(limit);
  return result;
}

void MemoryStore::DecideBatch(const Limit& limit, std::span<const KeyCost> requests, Timestamp now,
                              std::span<absl::StatusOr<Decision>> out) {
  if (out.size() != requests.size()) [[unlikely]] {
    for (absl::StatusOr<Decision>& o : out) {
      o = absl::InvalidArgumentError(fmt::format(
          "DecideBatch: {} requests and {} places for answers", requests.size(), out.size()));
    }
    return;
  }
  size_t done = 0;
  // A batch none of whose costs is valid makes no table, as Decide does not.
  const bool any_valid = std::any_of(requests.begin(), requests.end(), [](const KeyCost& r) {
    return ValidateRequest(1, r.cost).ok();
  });
  if (any_valid && CheckTime(now).ok()) [[likely]] {
    for (int lookup = 0; lookup < kMaxLookups && done < requests.size(); ++lookup) {
      const Registry::View& view = tables_->registry().Pin();
      absl::StatusOr<Table*> table = tables_->Find(view, limit, now);
      if (!table.ok()) {
        break;  // Each request gets its error from Decide, below.
      }
      if (*table == nullptr) {
        continue;  // Made: pin the View that holds it.
      }
      done += internal::DecideBatchIn(
          **table, view.tables, requests.subspan(done), now, out.subspan(done),
          [&](std::string_view key) { return StoreFull(tables_->max_keys(), limit, key); });
    }
  }
  // What is left (a time out of range, a limit refused, a table retired over and over) is
  // rare: decided one by one, which gives each request Decide's answer by definition.
  for (size_t i = done; i < requests.size(); ++i) {
    out[i] = Decide(limit, requests[i].key, requests[i].cost, now);
  }
}

namespace {

// A request's key, with its limit's table.
struct Target {
  Table* table;
  HashedKey key;
};

// The shard locks of one DecideAll, held until the end of the call, however it ends.
class Held {
 public:
  // One global order (by address) for taking several shard locks, so two requests that share
  // shards can never wait on each other.
  explicit Held(absl::InlinedVector<SpinLock*, 4>& locks) ABSL_NO_THREAD_SAFETY_ANALYSIS
      : locks_(locks) {
    std::sort(locks_.begin(), locks_.end());
    locks_.erase(std::unique(locks_.begin(), locks_.end()), locks_.end());
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
};

// DecideAll's decisions, made while Held holds every target's shard: a dry run of each, then
// room made for the new keys, then the change on all of them if all are allowed and have room,
// or on none. Empty when a new key found no room: the index of its target in `full`.
std::optional<Decision> DecideHeldAll(std::span<const Target> targets, int64_t cost, Timestamp now,
                                      internal::Others others, std::span<Decision> each,
                                      size_t& full) {
  bool all_allowed = true;
  for (size_t i = 0; i < targets.size(); ++i) {
    each[i] = targets[i].table->DecideHeld(targets[i].key, cost, now, Mode::kDryRun);
    all_allowed = all_allowed && each[i].allowed;
  }
  // The shard index of each new key given room so far: they count against the bound together.
  absl::InlinedVector<size_t, 4> made;
  for (size_t i = 0; all_allowed && cost > 0 && i < targets.size(); ++i) {
    // Dropping a reset key changes no decision, even one of this request's own keys.
    const size_t index = ShardOf(targets[i].key.hash);
    const auto claimed = static_cast<int64_t>(std::count(made.begin(), made.end(), index));
    switch (targets[i].table->MakeRoomHeld(targets[i].key, now, claimed, others)) {
      case Table::Room::kStored:
        break;
      case Table::Room::kMade:
        made.push_back(index);
        break;
      case Table::Room::kNone:
        full = i;
        return std::nullopt;
    }
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    if (all_allowed) {
      each[i] = targets[i].table->DecideHeld(targets[i].key, cost, now, Mode::kApply);
    } else if (each[i].allowed) {
      // Nothing is recorded, so this limit's honest figures are those of a cost-0 query.
      each[i] = targets[i].table->DecideHeld(targets[i].key, 0, now, Mode::kDryRun);
    }
  }
  return Combine(each);
}

}  // namespace

absl::StatusOr<Decision> MemoryStore::DecideAll(std::span<const LimitedKey> requests, int64_t cost,
                                                Timestamp now, std::span<Decision> each) {
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
  absl::InlinedVector<Target, 4> targets;
  absl::InlinedVector<SpinLock*, 4> locks;
  for (int lookup = 0; lookup < kMaxLookups; ++lookup) {
    const Registry::View& view = tables_->registry().Pin();
    absl::StatusOr<bool> found = tables_->FindAll(view, requests, now, targets, locks);
    if (!found.ok()) {
      return found.status();
    }
    if (!*found) {
      continue;  // A table was made: pin the View that holds it.
    }
    const Held held(locks);
    if (std::any_of(targets.begin(), targets.end(),
                    [](const Target& t) { return t.table->retired(); })) [[unlikely]] {
      continue;  // Retired since it was found: look again.
    }
    size_t full = 0;
    if (std::optional<Decision> d = DecideHeldAll(targets, cost, now, view.tables, each, full))
        [[likely]] {
      return *d;
    }
    return StoreFull(tables_->max_keys(), *requests[full].limit, requests[full].key);
  }
  return Churning(*requests[0].limit);
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

bool MemoryStore::HoldsState(const Limit& limit, Timestamp now) {
  Table* table = tables_->registry().Pin().Find(limit);
  return table != nullptr && !table->DropReset(now);  // A retired table holds no key.
}

absl::Status MemoryStore::Supports(const Limit& limit) { return CheckMemoryLimit(limit); }

size_t MemoryStore::KeyCount() const { return tables_->KeyCount(); }

MemoryStoreStats MemoryStore::Stats() const {
  MemoryStoreStats stats = tables_->budget().Stats();
  stats.leases = tables_->leases().Count();
  stats.leases_refused = tables_->leases().refused();
  stats.limits = tables_->registry().size();
  stats.limits_retired = tables_->registry().retired();
  return stats;
}

// Snapshots and compact keys: see MemoryStoreOptions::compact_keys.
absl::Status NoSnapshotsOfFingerprints(const std::string& path) {
  return absl::FailedPreconditionError(
      fmt::format("snapshot {}: this memory store keeps fingerprints of its keys, not the keys "
                  "(compact keys), so it neither saves nor loads snapshots",
                  path));
}

absl::Status MemoryStore::SaveSnapshot(const std::string& path) const {
  if (tables_->compact_keys()) {
    return NoSnapshotsOfFingerprints(path);
  }
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

// Stores a loaded key in `table`, or, if it was retired since it was found (another thread's
// time is past its period), in the table `find` gives now.
absl::Status Put(Table* table, absl::FunctionRef<absl::StatusOr<Table*>(const Limit&)> find,
                 const Limit& limit, std::string_view key, const AnyState& state) {
  if (table->Put(key, state)) {
    return absl::OkStatus();
  }
  absl::StatusOr<Table*> again = find(limit);
  if (!again.ok()) {
    return again.status();
  }
  return (*again)->Put(key, state) ? absl::OkStatus() : Churning(limit);
}

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
        if (absl::Status s = Put(table, find, *limit, key, state); !s.ok()) {
          return s;
        }
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
  if (tables_->compact_keys()) {
    return NoSnapshotsOfFingerprints(path);
  }
  const absl::StatusOr<std::string> body = internal::ReadSnapshotFile(path);
  if (!body.ok()) {
    return body.status();
  }
  // The tables found, held alive for the load (it is not the hot path).
  std::vector<std::shared_ptr<const Registry::View>> held;
  auto find = [&](const Limit& limit) -> absl::StatusOr<Table*> {
    for (int lookup = 0; lookup < kMaxLookups; ++lookup) {
      held.push_back(tables_->registry().Current());
      absl::StatusOr<Table*> table = tables_->Find(*held.back(), limit, now);
      if (!table.ok() || *table != nullptr) {
        return table;
      }
    }
    return Churning(limit);
  };
  // Check the whole body before storing anything: a snapshot loads whole or not at all.
  if (absl::StatusOr<size_t> checked = ReadSnapshotBody(*body, path, now, find, Pass::kCheck);
      !checked.ok()) {
    return checked.status();
  }
  return ReadSnapshotBody(*body, path, now, find, Pass::kLoad);
}

}  // namespace sluice
