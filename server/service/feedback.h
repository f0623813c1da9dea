#pragma once

// Feedback: what a partner (the third-party API a fleet's workers call, paced by a limit with
// `feedback` in its rule) answered, told to sluiced so that the whole fleet acts on it
// (POST /v1/feedback, RateLimitService::FeedbackAsync):
//
//   a pause     a 429 (or a 503) with a time to wait, or an answer with nothing remaining
//               until a reset: every request on the limit's key is denied until then,
//               fleet-wide, with retry_after at the pause's end. A 429 that names no time
//               pauses for the policy's `pause`. Every time is bounded by `max_pause`.
//   after it    a bucket (token_bucket, gcra, leaky_bucket) is left empty at the pause's end:
//               it then admits one request per emission interval, so the acquires that
//               waited are released spaced at the limit's rate, not at once. A window is left
//               as it is (filling it would outlast the pause).
//   lower       a partner's `remaining` below ours (and above 0) brings ours down to it (never
//               up: our own limit still holds), where our window's end or the bucket's refill
//               restores ours within max_pause.
//   adapt       with `adaptive`, a 429 also cuts the limit's rate (once per cooldown), which
//               then climbs back linearly: AIMD, enforced by a pace key charged per request.
//
// Both live in the store beside the limit, so that every sluiced of a fleet sees them:
//
//   The pause is kept under the key's pause key (PauseKey), as a gcra limit of 1 per
//   millisecond with a burst of 1 (PauseLimit): its backlog is the pause's time left, which a
//   cost-0 query reads as reset_after. A pause of d is a settle of ceil(d / 1 ms) units past
//   that limit with max_debt d - 1 ms (sluice/settle.h): it charges only what takes the backlog
//   up to d, so that a pause already longer stays as it is and two workers telling of one 429
//   pause once: pauses combine as a maximum, in one store call, atomically.
//   Lowering is a settle with a negative max_debt: usage brought up to capacity - remaining,
//   and no further, again a maximum and atomic.
//
// The rules and their proofs are docs/algorithms.md's "A partner's feedback" and "Adaptive
// rate".

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/rules/rules.h"
#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/limit.h"
#include "sluice/settle.h"

namespace sluice::server {

// What the partner said, as server/http/partner_headers.h reads it from its status and
// headers. Times are from when sluiced read them.
struct PartnerAnswer {
  int status = 0;                     // Its HTTP status; 0 when not told.
  std::optional<Micros> retry_after;  // When to call again (Retry-After, retry-after-ms).
  std::optional<int64_t> remaining;   // Calls left ...
  std::optional<Micros> reset;        // ... until this long from now.
  // Its stated policy (RateLimit-Policy, X-RateLimit-Limit): `quota` calls per `window`.
  std::optional<int64_t> quota;
  std::optional<Micros> window;
  // Each header or value that was ignored or bounded, and why, for the answer.
  std::vector<std::string> notes;
};

// The longest time a partner's header is read as, before any policy bounds it: longer values
// are read as this (and noted), so that no arithmetic on them overflows.
inline constexpr Micros kMaxPartnerTime = std::chrono::hours(24 * 366);

// What the feedback did on one limit.
struct FeedbackLimit {
  std::string name;
  // The pause the answer asked for, bounded by max_pause (0: none), and the pause the key has
  // after the call (longer when another's was).
  Micros pause{0};
  Micros pause_left{0};
  bool paused = false;  // This answer started or lengthened the pause.
  int64_t lowered = 0;  // Units charged to bring ours down to the partner's remaining.
  // An adaptive limit: the rate in force after the answer (per the limit's period; 0 for
  // others), and whether this answer cut it.
  int64_t rate = 0;
  bool cut = false;
  Decision after;  // The limit as a cost-0 query finds it after.
  std::vector<std::string> notes;
};

struct FeedbackResult {
  std::vector<FeedbackLimit> limits;
  // The answer's notes (headers ignored or bounded), and the limits that take no feedback.
  std::vector<std::string> notes;
  bool unmatched = false;  // No rule matched: nothing was changed.
};

// One limit a feedback acts on (RateLimitService::FeedbackAsync): its limit and key, and what
// it is named and counted by.
struct FeedbackTarget {
  const RuleLimit* rule_limit = nullptr;  // Null for an ad hoc limit.
  std::string name;
  const Limit* limit = nullptr;  // Owned by the rules (or the request) the feedback holds.
  std::string key;
  FeedbackPolicy policy;
  int64_t soft_extra = 0;  // Soft mode's enlargement of the stored limit (RuleLimit).
  RuleCounters* counters = nullptr;
};

// The key a pause on `key` is kept under: `key` and a suffix that starts with a control byte,
// which no limit's key holds (as BlockKey); every limit of that key shares it. An adaptive
// limit's slowdown (under PauseLimit, its backlog the slowdown left), pacing (under
// RuleLimit::pacing) and cut claim (under RuleLimit::cut_claim) are kept likewise, per limit
// (`limit`, its name).
std::string PauseKey(std::string_view key);
std::string SlowKey(std::string_view key, std::string_view limit);
std::string PaceKey(std::string_view key, std::string_view limit);
std::string CutKey(std::string_view key, std::string_view limit);

// Adaptive rates (docs/algorithms.md, "Adaptive rate"). A limit of `n` per period with
// `slow` of slowdown left runs at AdaptiveRate: n less (n - floor) * slow / recover, rounded
// up, and never below the floor; the slowdown runs out with time, so the rate climbs back
// linearly to n. SlowdownFor is its inverse (the least slowdown that runs it at `rate`), and
// CutRate the rate a 429 leaves: cut * rate, rounded down, never below the floor.
int64_t AdaptiveRate(const AdaptivePolicy& policy, int64_t n, Micros slow);
Micros SlowdownFor(const AdaptivePolicy& policy, int64_t n, int64_t rate);
int64_t CutRate(const AdaptivePolicy& policy, int64_t rate);
// What a request of `cost` is charged on the pacing limit (a gcra of a unit per microsecond
// with a burst of B requests at the full rate) of a limit of `period` running at `rate` per
// period: the microseconds of its period that `cost` takes at that rate, rounded up.
int64_t PacingCost(int64_t cost, Micros period, int64_t rate);

// The pause `answer` asks of a limit with `policy`, bounded by its max_pause, and the note
// that says so when bounded; 0 for none. Pauses: a 429 (its retry time, else its reset when
// nothing remains, else policy.pause); a 503 with a retry time; any answer that says nothing
// remains until a reset.
Micros PauseAsked(const PartnerAnswer& answer, const FeedbackPolicy& policy, std::string* note);

// The settlement on `limit` (its stored capacity `capacity`: N, or B for the buckets) for a
// pause of `pause` (a bucket left empty at its end; a window is left as it is, the pause key
// alone holding it back) or, without one, for the partner's `remaining` above 0 (a lowering,
// made only where it lasts no longer than `max_pause`: a window no longer than it, a bucket
// whose burst refills within it); nullopt when the answer asks nothing of it. `*note` says
// why a drain or a lowering was cut short or left out.
std::optional<Settlement> LimitSettlement(const Limit& limit, int64_t capacity, Micros pause,
                                          std::optional<int64_t> remaining, Micros max_pause,
                                          std::string* note);

// The settlement on a pause key for a pause of `pause` (units 0: a query).
Settlement PauseSettlement(Micros pause);

}  // namespace sluice::server
