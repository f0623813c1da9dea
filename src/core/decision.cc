#include "sluice/decision.h"

#include <algorithm>
#include <cassert>

namespace sluice {

Decision Combine(std::span<const Decision> each) {
  assert(!each.empty());
  Decision combined = each.front();
  for (const Decision& d : each.subspan(1)) {
    combined.allowed = combined.allowed && d.allowed;
    combined.remaining = std::min(combined.remaining, d.remaining);
    combined.reset_after = std::max(combined.reset_after, d.reset_after);
    combined.delay = std::max(combined.delay, d.delay);
    if (combined.never_allowed() || d.never_allowed()) {
      combined.retry_after = kNeverAllowed;
    } else {
      combined.retry_after = std::max(combined.retry_after, d.retry_after);
    }
  }
  if (!combined.allowed) {
    combined.delay = Micros{0};  // The spec: delay is 0 when denied.
  }
  return combined;
}

}  // namespace sluice
