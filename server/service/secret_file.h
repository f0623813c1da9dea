#pragma once

// The small files of secrets sluiced reads at start (--secret-file, --admin-token-file): read
// whole, bounded, and never quoted in a message.

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace sluice::server {

// The longest secret file read: a secret is tens of bytes, so a bigger file is a wrong path
// (a log, a binary) rather than a secret.
inline constexpr size_t kMaxSecretFileBytes = 4096;

// The contents of the file at `path` with trailing whitespace (space, tab, CR, LF, VT, FF)
// trimmed: an editor's final newline is not part of the secret. InvalidArgument, naming
// `what` ("secret file") and the path but nothing of the contents, when the file cannot be
// read or is longer than kMaxSecretFileBytes.
absl::StatusOr<std::string> ReadSecretFile(std::string_view what, const std::string& path);

}  // namespace sluice::server
