#pragma once

// How the memory store's tables hold a key's state: as the algorithm's own struct (AsIs), or,
// for the bucket algorithms, their 128-bit numbers in 64 bits when the limit's bounds prove
// they fit (CompactTat: 8 bytes per key; CompactTokenBucket: 16). The proofs sit beside the
// encodings they allow; MakeTable (src/memory/table.h) picks an encoding per limit by them.
//
// Each encoding is a set of static functions over values: thread-safe.

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <limits>

#include "sluice/algorithms.h"
#include "sluice/limit.h"
#include "sluice/memory_store.h"
#include "sluice/settle.h"

namespace sluice::internal {

// How a table stores a key's state. By default as the algorithm's own struct; the bucket
// algorithms' 128-bit numbers in 64 bits when the limit keeps them there (see Compact*).
template <typename State>
struct AsIs {
  using Stored = State;
  static bool Fits(const State&) { return true; }
  static State Unpack(const Stored& s) { return s; }
  static Stored Pack(const State& s) { return s; }
};

// TAT x N' of gcra and leaky_bucket never exceeds t*N' + B*P' (a larger backlog is denied). It
// fits in an int64 for every t the store accepts (up to MemoryStore::kLatest) when that bound
// does: 8 bytes per key.
inline constexpr int64_t kCompactUntil = MemoryStore::kLatest.time_since_epoch().count();
inline constexpr int64_t kNoCompactTat = std::numeric_limits<int64_t>::min();

inline bool TatFitsCompact(const Limit& limit) {
  const Int128 largest =
      Int128{kCompactUntil} * limit.rate_units() + Int128{limit.burst()} * limit.rate_period_us();
  return largest <= std::numeric_limits<int64_t>::max();
}

template <typename State>  // GcraState or LeakyBucketState
struct CompactTat {
  using Stored = int64_t;
  static bool Fits(const State& s) {
    return s.tat == kNoTat ||
           (s.tat > kNoCompactTat && s.tat <= std::numeric_limits<int64_t>::max());
  }
  static State Unpack(Stored s) { return {.tat = s == kNoCompactTat ? kNoTat : Int128{s}}; }
  static Stored Pack(const State& s) {
    assert(s.tat == kNoTat || s.tat <= std::numeric_limits<int64_t>::max());
    return s.tat == kNoTat ? kNoCompactTat : static_cast<int64_t>(s.tat);
  }
};

// token_bucket's level never exceeds B*P': 16 bytes per key when that fits in an int64.
inline bool LevelFitsCompact(const Limit& limit) {
  return Int128{limit.burst()} * limit.rate_period_us() <= std::numeric_limits<int64_t>::max();
}

struct CompactTokenBucket {
  struct Stored {
    int64_t level;
    int64_t last;
  };
  static bool Fits(const TokenBucketState& s) {
    return s.level >= std::numeric_limits<int64_t>::min() &&
           s.level <= std::numeric_limits<int64_t>::max();
  }
  static TokenBucketState Unpack(const Stored& s) { return {.level = s.level, .last = s.last}; }
  static Stored Pack(const TokenBucketState& s) {
    return {.level = static_cast<int64_t>(s.level), .last = s.last};
  }
};

// Debts (sluice/settle.h): a settle may charge a key past its limit by up to max_debt D, so a
// state holds a usage up to N + D (B + D for the buckets): a count up to N + D, a token_bucket
// level down to -D*P', a TAT up to t*N' + (B + D)*P'. The largest D the store takes for
// `limit` is the one whose states still fit what the table holds exactly:
//   sliding_log: N + D <= MemoryStore::kMaxSlidingLogLimit (the bound on a key's log);
//   token_bucket with a compact level: D*P' <= 2^63 - 1, so -D*P' is an int64;
//   gcra, leaky_bucket with a compact TAT: kLatest*N' + (B + D)*P' <= 2^63 - 1, TatFitsCompact's
//     proof with B + D for B;
//   the rest: kMaxDebt (counts up to N + D <= 2 * 10^15 and 128-bit numbers fit with room).
inline int64_t MaxDebt(const Limit& limit) {
  constexpr Int128 kMax64 = std::numeric_limits<int64_t>::max();
  const Int128 p = limit.rate_period_us();
  Int128 debt = kMaxDebt;
  switch (limit.algorithm()) {
    case Algorithm::kSlidingLog:
      debt = MemoryStore::kMaxSlidingLogLimit - limit.limit();
      break;
    case Algorithm::kTokenBucket:
      if (LevelFitsCompact(limit)) {
        debt = kMax64 / p;
      }
      break;
    case Algorithm::kGcra:
    case Algorithm::kLeakyBucket:
      if (TatFitsCompact(limit)) {
        debt = (kMax64 - Int128{kCompactUntil} * limit.rate_units()) / p - limit.burst();
      }
      break;
    default:
      break;
  }
  return static_cast<int64_t>(std::clamp<Int128>(debt, 0, kMaxDebt));
}

}  // namespace sluice::internal
