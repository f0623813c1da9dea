#include "sluice/store.h"

#include "fmt/format.h"

namespace sluice {

absl::Status internal::InvalidRequest(size_t limit_count, int64_t cost) {
  if (cost < 0) {
    return absl::InvalidArgumentError(fmt::format("cost must be >= 0, not {}", cost));
  }
  if (limit_count == 0) {
    return absl::InvalidArgumentError("a request needs at least one limit");
  }
  return absl::OkStatus();
}

}  // namespace sluice
