#pragma once

// A key's state carried across a change of its limit's figures (docs/algorithms.md, "A change
// of limit"): when a rule's limit is lowered, raised, or given another period or algorithm,
// what its keys have used stays used, rather than every key starting again with a full budget.
//
//   - Same shape (same algorithm, period and buckets; N or B changed): the state is carried as
//     it is, the windows' counts and log entries unchanged, the buckets' used units converted
//     to the new rate's units (rounded up). A lowered limit leaves a key in debt until time
//     pays it off; a raised one gives it only the difference.
//   - Another shape: the usage is carried as one lump v charged at t, the key's first time
//     under the new figures, with v = min(ceiling, max(used, F - allow)): `used` what the old
//     limit counts at t, `F` what the new one admits from nothing in its first window, `allow`
//     a bound on what the old one would still admit by the end of that window. So in that
//     window the new limit admits at most min(F - used, allow): never more than the stricter
//     of the two. From its end on, the new limit runs alone.
//
// A state that has fully reset under the old figures converts to a new key's state.
//
// Pure functions over values: thread-safe.

#include <cstdint>

#include "sluice/algorithms.h"
#include "sluice/clock.h"
#include "sluice/limit.h"

namespace sluice {

// Whether a state of `from` carries to `to` as it is (see above): same algorithm, period and
// buckets.
bool SameShape(const Limit& from, const Limit& to);

// The state under `to` of a key whose state under `from` is `state`, at `now`. Its usage is
// capped at what `to` can hold, its capacity (N, or B for the buckets) plus `max_debt`, the
// debt a store keeps for it (sluice/settle.h): a cap that still denies every request while
// the usage is above it.
// REQUIRES: state.index() == from.algorithm(); 0 <= max_debt <= kMaxDebt.
AnyState ConvertState(const Limit& from, const AnyState& state, const Limit& to, Timestamp now,
                      int64_t max_debt);

}  // namespace sluice
