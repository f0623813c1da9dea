#pragma once

// The seven algorithms of docs/algorithms.md as pure functions over small state structs.
// They read no clock and take no lock: the caller passes the time and owns the state. The
// memory store, `sluice simulate` and the tests of the Redis scripts all run this one code.
//
// Every Decide overload:
//   - computes in integers only, widening to 128 bits where a product can exceed 64;
//   - returns figures exact to the microsecond, saturated at Micros::max() (see WideDecision);
//   - changes `state` only when the request is allowed with cost > 0 (a denied request and a
//     cost-0 query change nothing);
//   - treats a time earlier than the key's last state change as that time, for the states
//     that record one (all but gcra and leaky_bucket, whose single number records no time:
//     for them an earlier time is evaluated as given, which can only deny more, never less).
// REQUIRES: cost >= 0, and the state type matches limit.algorithm().
// Thread-compatible: a state must not be decided on from two threads at once.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <variant>
#include <vector>

#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/limit.h"

namespace sluice {

// __extension__: a GCC and clang builtin type, which -Wpedantic would otherwise name in users'
// builds.
__extension__ using Int128 = __int128;

// The `last` of a state that has never changed: earlier than every time.
inline constexpr int64_t kNoTime = std::numeric_limits<int64_t>::min();

struct FixedWindowState {
  int64_t last = kNoTime;  // Time of the last admission; its window is floor(last / P).
  int64_t count = 0;       // Units admitted in that window.
  friend bool operator==(const FixedWindowState&, const FixedWindowState&) = default;
};

struct SlidingWindowState {
  int64_t last = kNoTime;  // Time of the last admission; the current window is floor(last / P).
  int64_t cur = 0;         // Units admitted in the current window.
  int64_t prev = 0;        // Units admitted in the window before it.
  friend bool operator==(const SlidingWindowState&, const SlidingWindowState&) = default;
};

// A queue of counts, oldest first, one entry per distinct index (a timestamp for sliding_log,
// a bucket number for sliding_buckets). Entries are consumed from the front without moving
// the rest; the vector is compacted when the consumed part is the larger half.
class CountQueue {
 public:
  struct Entry {
    int64_t index = 0;
    int64_t count = 0;
    friend bool operator==(const Entry&, const Entry&) = default;
  };

  std::span<const Entry> entries() const {
    return {entries_.data() + head_, entries_.size() - head_};
  }
  bool empty() const { return head_ == entries_.size(); }
  int64_t total() const { return total_; }

  // Adds `count` at `index`, merging with the newest entry when it has the same index.
  // REQUIRES: count > 0; index >= the newest entry's index.
  void Add(int64_t index, int64_t count);
  // Drops every entry whose index is <= `index`.
  void DropThrough(int64_t index);
  // Takes up to `count` off the entry at `index`, dropping the entry when nothing is left of
  // it; nothing when there is none (a give-back, sluice/give_back.h). REQUIRES: count >= 0.
  void Subtract(int64_t index, int64_t count);

  // Equal when the live entries are (however the vector is laid out).
  friend bool operator==(const CountQueue& a, const CountQueue& b) {
    return a.total_ == b.total_ && std::ranges::equal(a.entries(), b.entries());
  }

 private:
  std::vector<Entry> entries_;
  size_t head_ = 0;
  int64_t total_ = 0;  // Sum of the counts of the live entries.
};

struct SlidingLogState {
  int64_t last = kNoTime;
  CountQueue log = {};  // (timestamp, units admitted at it)
  friend bool operator==(const SlidingLogState&, const SlidingLogState&) = default;
};

struct SlidingBucketsState {
  int64_t last = kNoTime;
  CountQueue buckets = {};  // (bucket number floor(t / (P/K)), units admitted in it)
  friend bool operator==(const SlidingBucketsState&, const SlidingBucketsState&) = default;
};

// token_bucket, gcra and leaky_bucket keep their numbers in the units of the limit's rate in
// lowest terms (Limit::rate_units() per Limit::rate_period_us()): the spec's L = tokens x P and
// TAT = time x N, with N and P divided by gcd(N, P). The decisions are the same.

struct TokenBucketState {
  Int128 level = 0;        // Tokens x P'. Meaningless while last == kNoTime (a full bucket).
  int64_t last = kNoTime;  // Time of the last admission.
  friend bool operator==(const TokenBucketState&, const TokenBucketState&) = default;
};

// Theoretical arrival time x N'. A new key's is "long ago", so max(TAT, t*N') = t*N'.
inline constexpr Int128 kNoTat = -(Int128{1} << 126);

struct GcraState {
  Int128 tat = kNoTat;
  friend bool operator==(const GcraState&, const GcraState&) = default;
};

struct LeakyBucketState {
  Int128 tat = kNoTat;
  friend bool operator==(const LeakyBucketState&, const LeakyBucketState&) = default;
};

Decision Decide(const Limit& limit, FixedWindowState& state, Timestamp now, int64_t cost);
Decision Decide(const Limit& limit, SlidingLogState& state, Timestamp now, int64_t cost);
Decision Decide(const Limit& limit, SlidingWindowState& state, Timestamp now, int64_t cost);
Decision Decide(const Limit& limit, SlidingBucketsState& state, Timestamp now, int64_t cost);
Decision Decide(const Limit& limit, TokenBucketState& state, Timestamp now, int64_t cost);
Decision Decide(const Limit& limit, GcraState& state, Timestamp now, int64_t cost);
Decision Decide(const Limit& limit, LeakyBucketState& state, Timestamp now, int64_t cost);

// A decision with its figures in 128 bits. The bucket algorithms' reset_after, retry_after
// and delay reach B*P/N, which for absurd but valid limits (a burst of 10^9 refilled at 3 per
// 13 hours: 500,000 years) exceeds the 2^63-1 us a Decision holds. `sluice simulate` prints
// these exact figures; Decide saturates them at Micros::max().
struct WideDecision {
  bool allowed = false;
  Int128 remaining = 0;
  Int128 reset_after_us = 0;
  Int128 retry_after_us = 0;  // -1: never allowed.
  Int128 delay_us = 0;
  friend bool operator==(const WideDecision&, const WideDecision&) = default;
};

// `wide` with its times saturated at Micros::max() (292,000 years).
Decision Narrow(const WideDecision& wide);

// Any algorithm's state; alternative i belongs to Algorithm(i).
using AnyState = std::variant<FixedWindowState, SlidingLogState, SlidingWindowState,
                              SlidingBucketsState, TokenBucketState, GcraState, LeakyBucketState>;

// The state of a key never seen, for `algorithm`.
AnyState InitialState(Algorithm algorithm);

// Dispatches to the overload for the state's alternative.
// REQUIRES: state.index() == static_cast<size_t>(limit.algorithm()).
Decision Decide(const Limit& limit, AnyState& state, Timestamp now, int64_t cost);

// As Decide, with the exact 128-bit figures.
WideDecision DecideWide(const Limit& limit, AnyState& state, Timestamp now, int64_t cost);

}  // namespace sluice
