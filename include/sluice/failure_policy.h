#pragma once

// FailurePolicy: what a shared store (RedisStore, MemcachedStore) answers when its servers
// cannot decide a call (unreachable in time, refusing to decide now). Each store's header says
// which of its errors the policy applies to; any other error is the call's own.
//
// Pure values and functions: thread-safe.

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace sluice {

enum class FailurePolicy : uint8_t {
  kAllow,  // Fail open: allowed, with every figure 0 (nothing is known).
  kDeny,   // Fail closed: the call returns the error (Unavailable, DeadlineExceeded).
  kLocal,  // Decide in a MemoryStore inside this process, with the same limits, until the
           // servers are back.
};

std::string_view FailurePolicyName(FailurePolicy policy);  // "allow", "deny", "local"
// The inverse of FailurePolicyName; InvalidArgument naming the text and the valid names.
absl::StatusOr<FailurePolicy> ParseFailurePolicy(std::string_view name);

}  // namespace sluice
