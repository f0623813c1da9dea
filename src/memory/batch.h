#pragma once

// The pipeline of MemoryStore::DecideBatch over one table: every key hashed first, each key's
// slot asked of the memory a few requests ahead (Table::Prefetch, in two stages), then the
// requests decided one by one in their order, each by Table::Decide under its shard's lock as
// a single Decide is. So the decisions are those of single calls in that order; only the time
// the memory takes to answer overlaps between requests.
//
// Thread-safe as Table::Decide.

#include <cstddef>
#include <span>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "sluice/decision.h"
#include "sluice/memory_store.h"
#include "src/memory/table.h"

namespace sluice::internal {

// How many requests ahead stage 0 and stage 1 of the prefetch run (measured on
// BM_MillionKeysBatch: a DRAM miss takes about as long as deciding two to four requests).
inline constexpr size_t kPrefetchAhead = 8;
inline constexpr size_t kPrefetchAhead1 = 4;

// Decides requests[i] for i from 0 in `table` (found in the View `others` comes from), writing
// out[i], until the table turns out retired: returns the index of the first request not
// decided (requests.size() when all were). `full(key)` gives the error of a new key refused
// for want of room. REQUIRES: out.size() == requests.size(); `now` in the store's range.
size_t DecideBatchIn(Table& table, Others others, std::span<const KeyCost> requests, Timestamp now,
                     std::span<absl::StatusOr<Decision>> out,
                     absl::FunctionRef<absl::Status(std::string_view key)> full);

}  // namespace sluice::internal
