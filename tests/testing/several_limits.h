#pragma once

// A differential check the shared stores' tests share: random sets of 2 to 4 limits on one
// key, decided all or nothing by a store and by a fresh MemoryStore each round, figure for
// figure, and the refusals every store makes (a limit and key twice, a negative cost).

#include <algorithm>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "gtest/gtest.h"

#include "sluice/memory_store.h"
#include "sluice/store.h"
#include "tests/testing/random.h"
#include "tests/testing/util.h"

namespace sluice::testing {

// `rounds` rounds of `steps` requests; `fresh_key(round)` empties what the store held (or
// names a key no round used) and returns the round's key.
inline void ExpectSeveralLimitsAsTheMemoryStore(Store& store, Random& rnd, int rounds, int steps,
                                                absl::FunctionRef<std::string(int)> fresh_key) {
  for (int round = 0; round < rounds; ++round) {
    MemoryStore memory;
    std::vector<Limit> limits;
    const int count = static_cast<int>(rnd.Between(2, 4));
    while (static_cast<int>(limits.size()) < count) {
      const Limit l = rnd.LimitFor(
          store, static_cast<Algorithm>(rnd.Between(0, static_cast<int>(Algorithm::kLeakyBucket))));
      if (std::find(limits.begin(), limits.end(), l) == limits.end()) {
        limits.push_back(l);
      }
    }
    const std::string key = fresh_key(round);
    std::vector<LimitedKey> requests;
    for (const Limit& l : limits) {
      requests.push_back({&l, key});
    }
    int64_t t = kEpoch;
    for (int i = 0; i < steps; ++i) {
      t += rnd.Gap(limits[static_cast<size_t>(rnd.Between(0, count - 1))]);
      const int64_t cost = rnd.Cost(limits[0]);
      std::vector<Decision> got_each(limits.size());
      std::vector<Decision> want_each(limits.size());
      absl::StatusOr<Decision> got = store.DecideAll(requests, cost, At(t), got_each);
      absl::StatusOr<Decision> want = memory.DecideAll(requests, cost, At(t), want_each);
      ASSERT_TRUE(got.ok() && want.ok()) << got.status() << want.status();
      ASSERT_EQ(*got, *want) << "round " << round << " step " << i;
      ASSERT_EQ(got_each, want_each) << "round " << round << " step " << i;
    }
  }
  // The same limit on the same key twice cannot be decided all or nothing.
  const Limit l = MustLimit({.limit = 1, .period = std::chrono::seconds(1)});
  const LimitedKey twice[] = {{&l, "k"}, {&l, "k"}};
  Decision each[2];
  EXPECT_TRUE(absl::IsInvalidArgument(store.DecideAll(twice, 1, At(kEpoch), each).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(store.Decide(l, "k", -1, At(kEpoch)).status()));
}

}  // namespace sluice::testing
