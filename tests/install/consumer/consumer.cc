// A user's program: a limiter on the memory store and a direct limiter, with a manual clock, in
// the documented designated-initializer style. Exits 0 when the decisions are those of the spec.

#include <chrono>
#include <cstdio>
#include <memory>

#include "sluice/algorithms.h"
#include "sluice/direct_limiter.h"
#include "sluice/duration.h"
#include "sluice/give_back.h"
#include "sluice/limiter.h"
#include "sluice/memory_store.h"

using namespace std::chrono_literals;

namespace {

int failures = 0;

void Expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "consumer: expected %s\n", what);
    ++failures;
  }
}

}  // namespace

int main() {
  absl::StatusOr<sluice::Limit> limit = sluice::Limit::Create(
      {.algorithm = sluice::Algorithm::kFixedWindow, .limit = 3, .period = 1s});
  absl::StatusOr<sluice::Limit> burst = sluice::Limit::Create(
      {.algorithm = sluice::Algorithm::kGcra, .limit = 10, .period = 1s, .burst = 20});
  if (!limit.ok() || !burst.ok()) {
    std::fprintf(stderr, "consumer: Limit::Create failed\n");
    return 1;
  }
  sluice::MemoryStore store({.max_keys = 1000});
  sluice::ManualClock clock(sluice::Timestamp{1'700'000'000s});
  sluice::Limiter limiter(*limit, store, clock);

  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<sluice::Decision> d = limiter.Check("alice");
    Expect(d.ok() && d->allowed && d->remaining == 2 - i, "the first three allowed");
  }
  absl::StatusOr<sluice::Decision> denied = limiter.Check("alice");
  Expect(denied.ok() && !denied->allowed && denied->retry_after == 1s, "the fourth denied for 1s");
  clock.Advance(1s);
  absl::StatusOr<sluice::Decision> again = limiter.Check("alice");
  Expect(again.ok() && again->allowed, "allowed again in the next window");
  Expect(store.Stats().keys == 1, "one key held");

  sluice::Limiter bursty(*burst, store, clock);
  absl::StatusOr<sluice::Decision> big = bursty.Check("bob", 20);
  Expect(big.ok() && big->allowed, "a burst of 20 allowed");
  absl::StatusOr<sluice::Micros> period = sluice::ParseDuration("250ms");
  Expect(period.ok() && *period == 250ms, "ParseDuration(\"250ms\") == 250ms");

  absl::StatusOr<std::unique_ptr<sluice::DirectLimiter>> direct =
      sluice::DirectLimiter::Create(*burst, clock);
  Expect(direct.ok() && (*direct)->Check(20)->allowed && !(*direct)->Check()->allowed,
         "a direct limiter allows its burst of 20 and no more");

  if (failures != 0) return 1;
  std::printf("consumer: ok\n");
  return 0;
}
