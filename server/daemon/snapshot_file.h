#pragma once

// The memory store's snapshot file (--snapshot) as sluiced starts: a path that cannot be
// written is refused now, not found at shutdown with every count in hand; a snapshot that
// cannot be loaded stops the start, as a bad RDB file stops redis-server, unless the operator
// says to set it aside (--snapshot-discard-corrupt). Either way the file is never overwritten
// unseen.

#include <string>

#include "absl/status/status.h"

#include "server/rules/rules.h"
#include "sluice/clock.h"
#include "sluice/memory_store.h"

namespace sluice::server {

// Checks that a snapshot can be written at `path` (a file created and removed beside it; the
// path not a directory), then loads it into `store` if there is one. A snapshot that cannot
// be loaded (corrupt, of another version, unreadable) is an error naming the file and what is
// wrong, or with `discard_corrupt`, renamed to `<path>.corrupt-<UTC time of now>` and logged.
// Errors (InvalidArgument) name the flag.
absl::Status OpenSnapshot(MemoryStore& store, const std::string& path, bool discard_corrupt,
                          Timestamp now);

// The limits of the rules in force when a snapshot is written, beside it in `<path>.limits`
// (replaced whole, as the snapshot is), so that rules changed while the server was down
// still carry the state the snapshot keeps under the figures they had (docs/server.md,
// "Changing a limit"). SaveLimitHistory's errors name the file. LoadLimitHistory returns what
// the file holds, or nothing when there is none; a file that cannot be read or parsed is
// logged and ignored: its limits then start afresh under changed figures, the worst a lost
// history can do.
absl::Status SaveLimitHistory(const std::string& snapshot_path, const LimitHistory& history);
LimitHistory LoadLimitHistory(const std::string& snapshot_path);

}  // namespace sluice::server
