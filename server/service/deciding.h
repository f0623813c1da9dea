#pragma once

// RateLimitService::Decide's steps (decide.cc, blocks.cc): the state one decision shares
// between them, and the steps in the order they run. Private to the service.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

#include "server/service/blocks.h"
#include "server/service/receipt.h"
#include "server/service/service_internal.h"

namespace sluice::server {

// Decide's state, shared by its steps: the limits planned, an outcome for each, and whether
// the request is admitted so far. Lives in Decide's frame, so the steps' awaits may use it.
struct RateLimitService::Deciding {
  // One outcome per planned limit, in order, and which store call decides it: the
  // enforced limits' or the shadow limits' (unlimited rules and limits that allow nothing
  // need none; a repeat takes its first's). A limit that allows nothing admits a cost of 0.
  void Classify(int64_t cost);
  // The Envoy API's counted limits: every hit counted on their counters, each compared with
  // its limit (EnvoySettings::count_over_limit).
  internal::Task<absl::Status> DecideCounting(int64_t cost);
  // After the store refused DecideCounting's keys for want of room (ResourceExhausted: a new
  // key in a full store), from what a query found (`known`, per key; `slot`, each counted
  // limit's key): whether a counter already known is over with this request's hits. Then the
  // outcomes say so, and the request is over as it would have been had it been charged.
  bool OverWhenFull(const std::vector<Decision>& known, const std::vector<size_t>& slot,
                    int64_t cost);
  // Blocks and pauses (blocks.cc; a rule's `block`, a partner's pause, feedback.h), before the
  // enforced limits are charged: whether one runs on the key of any of them. When one does the
  // request is denied, each blocked or paused limit says until when, and the enforced limits
  // are only asked how they stand.
  internal::Task<absl::Status> CheckBlocks();
  // After the limits were asked: each limit a running block or pause denies says so, and
  // until when; and each adaptive limit its pace denied.
  void ApplyBlocks();
  // Adaptive limits running below their rate (feedback.h): each charges its pace key, before
  // the limits are; one that denies denies the request, which then charges nothing else.
  internal::Task<absl::Status> Pace(int64_t cost);
  // A request the limits denied after its paces admitted it: their charges given back.
  internal::Task<absl::Status> Unpace();
  // The enforced limits (hard, soft, elastic), charged together.
  internal::Task<absl::Status> DecideEnforced(int64_t cost);
  // Elastic mode, after the enforced limits denied.
  internal::Task<absl::Status> BorrowFromPools(int64_t cost);
  // After a denial: starts the block of each blocking limit that denied the request.
  internal::Task<absl::Status> StartBlocks(int64_t cost);
  // Shadow mode: decided, reported, never denying.
  internal::Task<absl::Status> DecideShadow(int64_t cost);
  // Each repeat reported as the limit it repeats.
  void CopyRepeats();
  // Soft mode: the client is told of the nominal limit, not the larger one stored.
  void ApplySoft();
  // The request's answer (the Combine of what clients are told) and each limit's counters;
  // counted in /metrics when `count`.
  void Summarise(bool count);
  // Counts each rule limit's key in its top offenders (metrics' TopOffenders), when they are on.
  void RecordOffenders() const;

  // The store call for `group` (indices into `planned`) and the elastic `pools` charged with it.
  auto StoreCall(const std::vector<size_t>& group, int64_t group_cost,
                 const std::vector<const Pool*>& pools);
  // Whether the store call admitted the request, counting the store's failures.
  absl::StatusOr<bool> AdmittedBy(const absl::StatusOr<Decision>& combined);
  // After a store call that charged: what its limits (the first `outcomes.size()` of `keys`,
  // then `pools`' keys) charged, kept for the receipt.
  void Keep(const std::vector<size_t>& outcomes, const std::vector<const Pool*>& pools);

  RateLimitService& service;
  std::vector<Planned>& planned;
  const Timestamp now;
  CheckResult result;
  std::vector<size_t> enforced;
  std::vector<size_t> shadow;
  std::vector<size_t> counting;
  bool counted_over = false;  // A counted limit outside shadow mode is over.
  // A limit on a key that an earlier entry already has (a descriptor given twice) is decided
  // once, and reported as that earlier entry.
  std::vector<std::pair<size_t, size_t>> repeats;
  bool always_denied = false;
  bool admitted = false;
  // A store call's keys (a pool's key held in pool_keys) and each key's decision.
  std::vector<LimitedKey> keys;
  std::vector<std::string> pool_keys;
  std::vector<Decision> each;
  // CheckRequest::receipt: every store call charges (ChargeAllAsync), and what the calls that
  // admitted charged is kept for the receipt.
  bool receipt = false;
  std::vector<Charge> charges;
  std::vector<ReceiptLimit> receipt_limits;
  // The enforced limits with a `block` or `feedback`, and the keys their blocks and pauses are
  // kept under.
  std::vector<size_t> blocking;
  std::vector<std::string> block_keys;
  std::vector<Micros> block_left;  // The time left of each one's block (0: none runs).
  std::vector<Micros> pause_left;  // And of its pause.
  std::vector<Micros> slow_left;   // And of its adaptive slowdown.
  // The paces charged (Pace), each an index into `blocking` with its key and charge.
  struct Paced {
    size_t j = 0;
    std::string key;
    Decision decision;
    Charge charge;
  };
  std::vector<Paced> paced;
  bool blocked = false;  // A block or pause runs on one of them: denied, nothing charged.
};

}  // namespace sluice::server
