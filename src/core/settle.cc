#include "sluice/settle.h"

#include "fmt/format.h"

namespace sluice {

absl::Status ValidateSettlement(const Settlement& settlement) {
  if (settlement.units < 0 || settlement.units > Limit::kMaxCount) {
    return absl::InvalidArgumentError(
        fmt::format("cost must be 0 to {}, not {}", Limit::kMaxCount, settlement.units));
  }
  if (settlement.max_debt < 0 || settlement.max_debt > kMaxDebt) {
    return absl::InvalidArgumentError(
        fmt::format("max_debt must be 0 to {}, not {}", kMaxDebt, settlement.max_debt));
  }
  if (settlement.charge.units < 0) {
    return absl::InvalidArgumentError(
        fmt::format("a charge's units must be >= 0, not {}", settlement.charge.units));
  }
  return absl::OkStatus();
}

}  // namespace sluice
