#pragma once

// The note under each lane's title in `sluice simulate --svg`: how much the lane's algorithm can
// let through in one period, so that a line above the limit reads as what the algorithm
// promises (a burst allowance, a window edge) rather than as a bug.

#include <cstdint>
#include <string>

#include "sluice/limit.h"

namespace sluice::tools {

// One line of plain text, for `limit`, whose lane admitted at most `most` units for one key
// in any period.
std::string LaneNote(const Limit& limit, int64_t most);

}  // namespace sluice::tools
