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
#include "src/memory/store_parts.h"
#include "src/memory/table.h"

namespace sluice {

namespace {

using internal::Budget;
using internal::Fingerprint;
using internal::HashedKey;
using internal::kCalendarTable;
using internal::kNoMoreTables;
using internal::kTable;
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

absl::StatusOr<Decision> MemoryStore::DecideAll(std::span<const LimitedKey> requests, int64_t cost,
                                                Timestamp now, std::span<Decision> each) {
  assert(each.size() == requests.size());
  if (AnyEarlier(requests)) [[unlikely]] {
    if (absl::Status s = CheckTime(now); !s.ok()) {
      return s;
    }
    if (absl::Status s = tables_->AdoptEarlier(requests, now); !s.ok()) {
      return s;
    }
  }
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
    w.U8(limit.calendar() ? kCalendarTable : kTable);
    w.U8(static_cast<uint8_t>(limit.algorithm()));
    w.I64(limit.limit());
    w.I64(limit.calendar() ? 0 : limit.period().count());
    w.I64(limit.burst());
    w.I64(limit.buckets());
    if (limit.calendar()) {
      const std::string& zone = limit.time_zone().name();
      w.U8(static_cast<uint8_t>(*limit.calendar()));
      w.U32(static_cast<uint32_t>(zone.size()));
      w.Bytes(zone);
    }
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
// A table's limit as SaveSnapshot writes it (snapshot.h), a calendar quota's with its
// unit and zone; nullopt when the bytes are not one.
std::optional<LimitSpec> ReadTableLimit(SnapshotReader& r, bool calendar) {
  uint8_t algorithm = 0;
  LimitSpec spec;
  int64_t period = 0;
  int64_t burst = 0;
  int64_t buckets = 0;
  if (!r.U8(algorithm) || algorithm > static_cast<uint8_t>(Algorithm::kLeakyBucket) ||
      !r.I64(spec.limit) || !r.I64(period) || !r.I64(burst) || !r.I64(buckets)) {
    return std::nullopt;
  }
  spec.algorithm = static_cast<Algorithm>(algorithm);
  spec.period = Micros(period);
  spec.burst = burst;
  spec.buckets = buckets;
  if (calendar) {
    uint8_t unit = 0;
    uint32_t zone_size = 0;
    std::string_view zone;
    if (!r.U8(unit) || unit > static_cast<uint8_t>(CalendarUnit::kYear) || !r.U32(zone_size) ||
        zone_size > 64 || !r.Bytes(zone_size, zone)) {
      return std::nullopt;
    }
    spec.calendar = Calendar{static_cast<CalendarUnit>(unit), std::string(zone)};
  }
  return spec;
}

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
    if (!r.U8(more) || more > kCalendarTable) {
      return corrupt("expected a table or the end");
    }
    if (more == kNoMoreTables) {
      break;
    }
    const std::optional<LimitSpec> spec = ReadTableLimit(r, more == kCalendarTable);
    if (!spec) {
      return corrupt("a table's limit is malformed");
    }
    const absl::StatusOr<Limit> limit = Limit::Create(*spec);
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
