#pragma once

// Debian's Abseil has a string_view of its own (absl::string_view is not std::string_view),
// which neither fmt nor std::string_view parameters accept. Message() bridges the two.

#include <string_view>

#include "absl/status/status.h"

namespace sluice::internal {

inline std::string_view Message(const absl::Status& status) {
  const auto message = status.message();
  return {message.data(), message.size()};
}

}  // namespace sluice::internal
