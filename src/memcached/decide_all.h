#pragma once

// One request over several limits on Memcached, all or nothing without a multi-key
// transaction (include/sluice/memcached_store.h, "Several limits in one request"): a dry run
// of every limit; when all allow and the cost is not 0, a charge on each in turn; when a charge
// is denied or fails, a give-back of the charges before it.
//
// Thread-compatible, as the MemcachedConnection it is given.

#include <atomic>
#include <cstdint>
#include <span>

#include "absl/status/statusor.h"

#include "sluice/decision.h"
#include "src/memcached/cas_loop.h"
#include "src/memcached/connection.h"

namespace sluice::internal {

struct GiveBackCounters {
  std::atomic<uint64_t> given{0};   // Charges given back.
  std::atomic<uint64_t> failed{0};  // Of those, not written: their units stay charged.
};

// Decides `cost` on every target at `now`, writing each limit's decision to `each` and
// returning their Combine, as Store::DecideAll says, and to `charges` (when not empty) what
// each limit charged, as Store::ChargeAllAsync says (units 0 on every limit unless the
// request was admitted with a cost). Errors: the first a read or charge returned (the charges
// before it given back).
// REQUIRES: each.size() == targets.size(); charges empty or of that size; no target twice.
absl::StatusOr<Decision> DecideTargets(MemcachedConnection& connection,
                                       std::span<const ItemTarget> targets, int64_t cost,
                                       Timestamp now, std::span<Decision> each,
                                       std::span<Charge> charges, const CasSettings& settings,
                                       GiveBackCounters& give_backs);

}  // namespace sluice::internal
