#pragma once

// OnceClaims: the `once` ids of MemoryStore's settles (Store::SettleAllAsync), each kept until
// its own expiry, so that a receipt settles once. Bounded: at most kMaxOnceClaims live claims.
// An expired claim is dropped as new ones come (the claims are ordered by expiry, and each
// claim first drops those whose time has passed), so the bound is on what is live, not on
// what has been seen; when that many are live, a new claim is refused and the settle with it.
//
// Thread-safe: one mutex (a claim is a small fraction of a settle, which already serialises
// on its keys' shard locks).

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

#include "sluice/clock.h"
#include "src/core/mutex.h"

namespace sluice::internal {

// A million live claims: with ids at their longest (kMaxOnceBytes, 64 bytes) a claim costs
// about 160 bytes in the two containers, so the claims take at most some 160 MB, however
// many receipts a flood settles; a server settling 10,000 receipts a second for receipts that
// live 100 s holds a million at once, the most a busy single store sees.
inline constexpr size_t kMaxOnceClaims = 1'000'000;

class OnceClaims {
 public:
  explicit OnceClaims(size_t max = kMaxOnceClaims) : max_(max) {}

  // Claims `id` until `until` at `now`: OK; AlreadyExists when a claim of `id` is live
  // (now < its expiry); ResourceExhausted when `max` claims are live. Changes nothing but on
  // success (besides dropping expired claims).
  absl::Status Claim(std::string_view id, Timestamp until, Timestamp now);
  // Takes back a claim Claim just made, when what it guarded failed: the settle may be tried
  // again.
  void Release(std::string_view id);

  size_t size() const;

 private:
  void DropExpired(Timestamp now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, Timestamp> until_ ABSL_GUARDED_BY(mu_);
  std::multimap<Timestamp, std::string> by_expiry_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::internal
