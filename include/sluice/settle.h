#pragma once

// Settling a charge: once a request's real cost M is known (an LLM call's tokens, a login that
// turned out to succeed), what its decision charged (a Charge, sluice/give_back.h) is
// corrected on each of its limits:
//
//   M < charged  the difference is given back, with GiveBack's bounds: exact for the windows
//                while the charged window, bucket or timestamp still counts; for the buckets
//                at most the part of the charge still ahead of the clock.
//   M > charged  the extra is charged past the limit: the key goes into debt, and its next
//                requests are denied until time has paid the debt off. The debt is bounded:
//                the key's usage after the charge is at most N + max_debt (B + max_debt for
//                the buckets), and what did not fit is not charged (Settled::charged says
//                what was).
//   M = charged  nothing changes.
//
// The exact rules, per algorithm, and their proofs are docs/algorithms.md's "Settling".
// Pure functions over the states of sluice/algorithms.h; thread-compatible as they are.

#include <cstdint>

#include "absl/status/status.h"

#include "sluice/algorithms.h"
#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/give_back.h"
#include "sluice/limit.h"

namespace sluice {

// One limit's part of a settle.
struct Settlement {
  Charge charge;      // What the decision charged there (units 0: nothing to give back).
  int64_t units = 0;  // M, the request's real cost: 0 is a refund.
  // D: how far past the limit (the burst) an extra may take the key. Below 0, a ceiling under
  // the limit: the key's usage is brought up to at most N + D (B + D), and no further (what a
  // partner's lower `remaining` does, server/service/feedback.h).
  int64_t max_debt = 0;
  friend bool operator==(const Settlement&, const Settlement&) = default;
};

// What a settle did on one limit.
struct Settled {
  int64_t given_back = 0;  // Units returned: at most charge.units - M (fewer: GiveBack's bound).
  int64_t charged = 0;     // Extra units charged: at most M - charge.units (fewer: the debt bound).
  Decision after;          // What a cost-0 query answers just after.
  friend bool operator==(const Settled&, const Settled&) = default;
};

// The largest max_debt accepted, as the largest limit, and the smallest.
inline constexpr int64_t kMaxDebt = Limit::kMaxCount;
inline constexpr int64_t kMinDebt = -Limit::kMaxCount;

// OK, or InvalidArgument naming the field: units or max_debt negative or above their bounds.
absl::Status ValidateSettlement(const Settlement& settlement);

// Charges up to `units` on `state` at `now` whatever the limit says, as many as keep the key's
// usage at most N + max_debt (B + max_debt), and returns how many it charged (0 when the key
// is that far in debt already). REQUIRES: units >= 0, kMinDebt <= max_debt <= kMaxDebt, and the
// state matches limit.algorithm().
int64_t ChargePast(const Limit& limit, AnyState& state, Timestamp now, int64_t units,
                   int64_t max_debt);

// Applies `settlement` to `state` at `now`: GiveBack of the difference, or ChargePast of the
// extra, then a cost-0 decision for Settled::after. REQUIRES: ValidateSettlement is OK; the
// charge was made on this limit and key.
Settled Settle(const Limit& limit, AnyState& state, Timestamp now, const Settlement& settlement);

// The time after which settling `charge` can give nothing back on `limit` any more: the end
// of the window (sliding_window: of the next one), bucket or timestamp's period it was charged
// to; for the buckets, when the clock reaches the theoretical arrival time the charge left.
Timestamp GiveBackHorizon(const Limit& limit, const Charge& charge);

}  // namespace sluice
