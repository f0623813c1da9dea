#include "src/memory/batch.h"

#include <algorithm>
#include <array>

#include "absl/container/inlined_vector.h"

#include "sluice/store.h"
#include "src/memory/shards.h"

namespace sluice::internal {

size_t DecideBatchIn(Table& table, Others others, std::span<const KeyCost> requests, Timestamp now,
                     std::span<absl::StatusOr<Decision>> out,
                     absl::FunctionRef<absl::Status(std::string_view key)> full) {
  const size_t n = requests.size();
  // Hashed a window at a time, so that a large batch needs no large buffer.
  constexpr size_t kWindow = 64;
  std::array<size_t, kWindow> hashes;
  auto hashed = [&](size_t i) { return HashedKey{requests[i].key, hashes[i % kWindow]}; };
  const size_t first = std::min(n, kWindow);
  for (size_t i = 0; i < first; ++i) {
    hashes[i] = table.KeyHash(requests[i].key);
  }
  for (size_t i = 0; i < std::min(n, kPrefetchAhead); ++i) {
    table.Prefetch(hashed(i), 0);
  }
  for (size_t i = 0; i < std::min(n, kPrefetchAhead1); ++i) {
    table.Prefetch(hashed(i), 1);
  }
  for (size_t i = 0; i < n; ++i) {
    // The hash of request i + kWindow - 1 takes the place of request i - 1's, decided.
    if (const size_t next = i + kWindow - 1; i > 0 && next < n) {
      hashes[next % kWindow] = table.KeyHash(requests[next].key);
    }
    if (i + kPrefetchAhead < n) {
      table.Prefetch(hashed(i + kPrefetchAhead), 0);
    }
    if (i + kPrefetchAhead1 < n) {
      table.Prefetch(hashed(i + kPrefetchAhead1), 1);
    }
    const int64_t cost = requests[i].cost;
    if (absl::Status s = ValidateRequest(1, cost); !s.ok()) [[unlikely]] {
      out[i] = std::move(s);
      continue;
    }
    Decision decision;
    switch (table.Decide(requests[i].key, hashes[i % kWindow], cost, now, decision, others)) {
      case Table::Outcome::kDecided:
        out[i] = decision;
        break;
      case Table::Outcome::kFull:
        out[i] = full(requests[i].key);
        break;
      case Table::Outcome::kRetired:
        return i;
    }
  }
  return n;
}

}  // namespace sluice::internal
