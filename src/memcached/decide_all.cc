#include "src/memcached/decide_all.h"

#include <algorithm>
#include <cassert>
#include <utility>

#include "absl/container/inlined_vector.h"

namespace sluice::internal {
namespace {

// A cost-0 query on a state already read: the figures of a limit that is not charged.
Decision Query(const ItemTarget& target, const ReadItem& read, Timestamp now) {
  AnyState state = read.state;
  return Decide(*target.limit, state, now, 0);
}

// Gives back charges[0, end) (best effort: one that fails leaves its units charged).
void GiveBackBefore(MemcachedConnection& connection, std::span<const ItemTarget> targets,
                    std::span<const Charge> charges, size_t end, Timestamp now,
                    const CasSettings& settings, GiveBackCounters& give_backs) {
  for (size_t i = 0; i < end; ++i) {
    if (charges[i].units == 0) {
      continue;
    }
    give_backs.given.fetch_add(1, std::memory_order_relaxed);
    if (!GiveBackState(connection, targets[i], charges[i], now, settings).ok()) {
      give_backs.failed.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace

absl::StatusOr<Decision> DecideTargets(MemcachedConnection& connection,
                                       std::span<const ItemTarget> targets, int64_t cost,
                                       Timestamp now, std::span<Decision> each,
                                       std::span<Charge> charges, const CasSettings& settings,
                                       GiveBackCounters& give_backs) {
  assert(each.size() == targets.size());
  assert(charges.empty() || charges.size() == targets.size());
  std::fill(charges.begin(), charges.end(), Charge{});
  absl::InlinedVector<ReadItem, 4> reads;
  bool all_allowed = true;
  for (size_t i = 0; i < targets.size(); ++i) {
    absl::StatusOr<ReadItem> read = ReadAdopting(connection, targets[i], now, settings);
    if (!read.ok()) {
      return read.status();
    }
    AnyState state = read->state;
    each[i] = Decide(*targets[i].limit, state, now, cost);
    all_allowed = all_allowed && each[i].allowed;
    reads.push_back(*std::move(read));
  }
  if (!all_allowed || cost == 0) {
    for (size_t i = 0; i < targets.size(); ++i) {
      if (!all_allowed && each[i].allowed) {
        each[i] = Query(targets[i], reads[i], now);  // Nothing recorded: as a cost-0 query.
      }
    }
    return Combine(each);
  }
  absl::InlinedVector<Charge, 4> made(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    absl::StatusOr<Decision> charged =
        ChargeState(connection, targets[i], cost, now, reads[i], settings, made[i]);
    if (charged.ok() && charged->allowed) {
      each[i] = *charged;
      continue;
    }
    // Another writer came between the dry run and this charge (or the charge failed): the
    // request is not admitted, and what it charged before this limit goes back.
    GiveBackBefore(connection, targets, made, i, now, settings, give_backs);
    if (!charged.ok()) {
      return charged.status();
    }
    each[i] = *charged;
    for (size_t j = 0; j < targets.size(); ++j) {
      if (j == i) {
        continue;
      }
      absl::StatusOr<ReadItem> read = j < i ? ReadState(connection, targets[j]) : reads[j];
      // A limit that cannot be read again reports what the dry run saw.
      each[j] = Query(targets[j], read.ok() ? *read : reads[j], now);
    }
    return Combine(each);
  }
  if (!charges.empty()) {
    std::copy(made.begin(), made.end(), charges.begin());
  }
  return Combine(each);
}

}  // namespace sluice::internal
