#include "sluice/failure_policy.h"

#include "fmt/format.h"

namespace sluice {

std::string_view FailurePolicyName(FailurePolicy policy) {
  switch (policy) {
    case FailurePolicy::kAllow:
      return "allow";
    case FailurePolicy::kDeny:
      return "deny";
    case FailurePolicy::kLocal:
      return "local";
  }
  return "?";
}

absl::StatusOr<FailurePolicy> ParseFailurePolicy(std::string_view name) {
  for (FailurePolicy p : {FailurePolicy::kAllow, FailurePolicy::kDeny, FailurePolicy::kLocal}) {
    if (name == FailurePolicyName(p)) {
      return p;
    }
  }
  return absl::InvalidArgumentError(
      fmt::format("unknown failure policy '{}': use allow, deny or local", name));
}

}  // namespace sluice
