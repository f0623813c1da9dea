// The tables' division by a limit's N' and P' (libdivide): the CPU's quotient for every
// numerator the decisions can make (0 to INT64_MAX), at the edges where a multiply-and-shift
// division goes wrong if its magic number is off by one (multiples of the divisor and the
// numbers either side, powers of two, the largest numerators) and on random ones.

#include "src/memory/divisors.h"

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

#include "tests/testing/util.h"

namespace sluice::internal {
namespace {

using sluice::testing::MustLimit;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// A gcra limit whose rate in lowest terms is n per p µs (n and p coprime, or p = 1).
Limit Rate(int64_t n, int64_t p) {
  return MustLimit({.algorithm = Algorithm::kGcra, .limit = n, .period = Micros(p)});
}

std::vector<int64_t> Numerators(int64_t d, std::mt19937_64& gen) {
  std::vector<int64_t> out = {0, 1, 2, kMax, kMax - 1, kMax / 2, kMax / 3};
  for (int shift = 0; shift < 63; ++shift) {
    const int64_t two = int64_t{1} << shift;
    out.insert(out.end(), {two - 1, two, two + 1});
  }
  for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{1000}, kMax / d - 1, kMax / d}) {
    const auto m = static_cast<__int128>(k) * d;
    if (k > 0 && m + 1 <= kMax) {
      out.insert(out.end(), {static_cast<int64_t>(m - 1), static_cast<int64_t>(m),
                             static_cast<int64_t>(m + 1)});
    }
  }
  for (int i = 0; i < 2000; ++i) {
    out.push_back(static_cast<int64_t>(gen() >> 1));
    out.push_back(static_cast<int64_t>(gen() >> (1 + gen() % 62)));
  }
  return out;
}

TEST(LimitDivisorsTest, GiveTheCpusQuotientForEveryNumerator) {
  std::mt19937_64 gen(sluice::testing::Seed(23));
  std::vector<int64_t> divisors = {1,
                                   2,
                                   3,
                                   5,
                                   7,
                                   10,
                                   1000,
                                   1'000'000,
                                   3'600'000,
                                   35'490'773,
                                   1270,
                                   1'000'001,
                                   86'400'000'000,
                                   Limit::kMaxCount,
                                   (int64_t{1} << 40) - 1,
                                   int64_t{1} << 40,
                                   (int64_t{1} << 40) + 1};
  for (int i = 0; i < 50; ++i) {
    divisors.push_back(1 + static_cast<int64_t>(gen() % Limit::kMaxCount));
  }
  for (const int64_t d : divisors) {
    // As N' (over a 1 µs period, N' = N) and as P' (one per P µs: P' = P).
    const LimitDivisors as_n(Rate(d, 1));
    const LimitDivisors as_p(Rate(1, std::min<int64_t>(d, Limit::kMaxPeriod.count())));
    const int64_t p = std::min<int64_t>(d, Limit::kMaxPeriod.count());
    for (const int64_t a : Numerators(d, gen)) {
      ASSERT_EQ(as_n.ByN(a), a / d) << a << " / " << d;
      ASSERT_EQ(as_p.ByP(a), a / p) << a << " / " << p;
    }
  }
}

}  // namespace
}  // namespace sluice::internal
