#pragma once

// A request whose keys lie in several Redis Cluster slots. One script call may touch one slot
// only, so RedisStore splits such a request into one part per slot (the limits of one slot
// stay one atomic script call) and decides it part by part, in ascending slot order:
//   - each part is charged in turn while every part so far allowed;
//   - when a part denies (or fails), the parts charged before it are given back, and the
//     parts after it are asked a dry run, all at once, before the request is answered;
//   - a request that charges nothing (cost 0, a lease query or release) asks every part at
//     once.
// The steps themselves are RedisStore::Impl's (multislot.cc), since they make calls; this
// header holds what they share: the request, kept for the calls made after its caller has
// returned, and the parts with what each answered.
//
// Thread-compatible: a Split is built on its caller's thread and then touched only from the
// completions of its calls, on the store's I/O thread, one at a time.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "sluice/decision.h"
#include "sluice/give_back.h"
#include "sluice/limit.h"
#include "sluice/store.h"
#include "src/redis/call.h"

namespace sluice::internal {

// One slot's share of a split request.
struct SplitPart {
  int slot = 0;
  std::vector<size_t> at;             // Where its limits (or keys) stand in the caller's request.
  std::vector<Decision> each;         // Its figures, as the last call on it answered them.
  bool charged = false;               // Its charge was allowed (by Redis or by the failure policy).
  std::vector<Charge> receipts;       // What Redis charged it, to give back after a later denial.
  std::optional<absl::Status> error;  // A request asked of every part at once: its failure.
};

// A request of limits (DecideAll) or of leases (LeaseAll), split by slot. The parts' calls
// complete one at a time while charging; once several are in flight, each writes its own part
// only, and `open` counts them down (atomic, so that whichever thread completes the last one,
// should a call ever complete on its caller's thread, sees every part written).
struct Split {
  // The request, copied: the parts' calls are made after the caller has returned.
  std::vector<Limit> limits;  // Empty for leases.
  std::vector<std::string> keys;
  std::vector<std::vector<Limit>> before;  // Each limit's earlier figures (LimitedKey::before).
  std::vector<int64_t> capacities;         // Leases only.
  std::optional<LeaseOp> lease_op;
  std::string lease_id;
  Micros lease_ttl{0};
  int64_t cost = 0;  // Or the lease op, as a call carries it.
  Timestamp now;
  std::span<Decision> each;    // The caller's, written once, by the answer.
  std::span<Charge> receipts;  // A charge's (ChargeAll): the caller's, written when allowed.
  DecideDone done;
  SteadyTime deadline;  // The charges share the request's deadline.

  std::vector<SplitPart> parts;       // In ascending slot order.
  size_t next = 0;                    // The part being charged.
  std::atomic<size_t> open{0};        // Calls in flight once the charging has stopped.
  std::optional<absl::Status> error;  // The failure of a charge, which the request answers.

  bool leases() const { return lease_op.has_value(); }
  // Whether the request records anything when allowed, and so is charged part by part.
  bool charges() const { return leases() ? *lease_op == LeaseOp::kTake : cost > 0; }
};

// Groups the entries of a request by slot (`slots[i]`, entry i's), in ascending slot order.
std::vector<SplitPart> PartsBySlot(std::span<const int> slots);

// The answer: `split.error` if set, else the first part's error if any; else every part's
// figures, written to `split.each` where they stand in the request, and their Combine.
absl::StatusOr<Decision> Merge(Split& split);

}  // namespace sluice::internal
