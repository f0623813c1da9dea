#pragma once

// What each figure of a decision promises (docs/algorithms.md, "Inputs and answers"), checked
// by probing copies of the state: shared by the property tests of the algorithms and of the
// settles that put a key in debt.

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

#include "sluice/algorithms.h"
#include "tests/testing/util.h"

namespace sluice::testing {

// Whether t + d is a time the clock can show (past 2^63 - 1 us it cannot: year 294,247).
inline bool Representable(int64_t t, Int128 d) {
  return t + d <= std::numeric_limits<int64_t>::max();
}

// Checks what each figure of `d`, decided on `before` at `t`, promises. Figures are the exact
// 128-bit ones; a promise about a time too far away to represent is not checked.
inline void ExpectFiguresHold(const Limit& limit, const AnyState& before, const AnyState& after,
                              int64_t t, int64_t cost, const WideDecision& d) {
  const int64_t capacity = limit.burst();
  if (!d.allowed) {
    EXPECT_TRUE(before == after) << "a denied request changed the state";
    EXPECT_TRUE(d.delay_us == 0);
    EXPECT_EQ(d.retry_after_us == -1, cost > capacity);
    if (d.retry_after_us != -1 && Representable(t, d.retry_after_us)) {
      ASSERT_TRUE(d.retry_after_us >= 1);
      const auto retry = static_cast<int64_t>(d.retry_after_us);
      AnyState probe = before;
      EXPECT_TRUE(Decide(limit, probe, At(t + retry), cost).allowed)
          << "not allowed at retry_after";
      if (retry > 1) {
        probe = before;
        EXPECT_FALSE(Decide(limit, probe, At(t + retry - 1), cost).allowed)
            << "already allowed 1us before retry_after " << retry;
      }
    }
  } else {
    EXPECT_TRUE(d.retry_after_us == 0);
  }
  // `remaining` cost-1 requests fit at this instant, and not one more.
  ASSERT_TRUE(d.remaining >= 0);
  if (d.remaining <= 200) {
    AnyState probe = after;
    for (Int128 i = 0; i < d.remaining; ++i) {
      ASSERT_TRUE(Decide(limit, probe, At(t), 1).allowed) << "fewer fit than remaining";
    }
    EXPECT_FALSE(Decide(limit, probe, At(t), 1).allowed) << "more fit than remaining";
  }
  // After reset_after the key holds no trace: a query sees a full, untouched limit.
  if (Representable(t, d.reset_after_us)) {
    AnyState probe = after;
    const WideDecision later =
        DecideWide(limit, probe, At(t + static_cast<int64_t>(d.reset_after_us)), 0);
    EXPECT_TRUE(later.reset_after_us == 0);
    EXPECT_TRUE(later.remaining == capacity);
  }
}

}  // namespace sluice::testing
