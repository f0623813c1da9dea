#pragma once

// One way to replace a file whole, for every file sluice writes while others may read it (the
// memory store's snapshot, the limit history beside it, the TLS copy gRPC reads): the contents
// go to a new file beside it, made by mkstemp, flushed to disk, renamed over the old one, and
// the rename made durable. A reader sees the old contents or the new, never part of either;
// two writers to one path each write a file of their own, and the last rename wins.

#include <sys/types.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace sluice::internal {

// Replaces `path` with `contents`, the new file of mode `mode`. Unavailable naming the step
// that failed, the file and the system's reason; the new file is then removed and `path` is
// as it was.
absl::Status ReplaceFile(const std::string& path, std::string_view contents, mode_t mode);

}  // namespace sluice::internal
