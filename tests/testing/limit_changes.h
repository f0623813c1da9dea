#pragma once

// What the tests of a change of limit (LimitedKey::before) share, whatever the store: taking
// single units until denied, and random traces of changes of small limits of every algorithm.

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

#include "sluice/store.h"
#include "tests/testing/random.h"
#include "tests/testing/util.h"

namespace sluice::testing {

// How many of `most` single units `limit` (with its earlier figures `before`) admits on `key`
// at `t`, one DecideAll each.
inline int64_t Admit(Store& store, const Limit& limit, std::span<const Limit> before,
                     std::string_view key, int64_t t, int64_t most) {
  const LimitedKey request{.limit = &limit, .key = key, .before = before};
  int64_t admitted = 0;
  Decision each[1];
  while (admitted < most) {
    const absl::StatusOr<Decision> d = store.DecideAll({&request, 1}, 1, At(t), each);
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok() || !d->allowed) {
      break;
    }
    ++admitted;
  }
  return admitted;
}

// A limit of a random algorithm with figures small enough that a short trace fills and drains
// it: 1 to 6 units per 1 to 6 ms, a burst of 1 to 6, 2 buckets.
inline Limit RandomSmallLimit(Random& random) {
  return MustLimit({.algorithm = static_cast<Algorithm>(random.Between(0, 6)),
                    .limit = random.Between(1, 6),
                    .period = Micros{random.Between(1, 6) * 1000},
                    .burst = random.Between(1, 6),
                    .buckets = 2});
}

// The earlier figures a limit changed to `limit` names, from `history` (the figures it had,
// newest first), as the rules' lineage gives them: distinct, not `limit`, at most four.
inline std::vector<Limit> EarlierFigures(const std::vector<Limit>& history, const Limit& limit) {
  std::vector<Limit> before;
  for (const Limit& l : history) {
    if (l != limit && before.size() < 4 &&
        std::find(before.begin(), before.end(), l) == before.end()) {
      before.push_back(l);
    }
  }
  return before;
}

}  // namespace sluice::testing
