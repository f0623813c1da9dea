#pragma once

// RateLimitService: what sluiced decides, whatever the transport. It matches a request's
// descriptors against the rules in force, applies each rule's mode (hard, soft, shadow,
// elastic), asks the store, and counts what happened. The HTTP API (/v1/check, /json,
// /v1/auth) and the Envoy gRPC API are thin adapters over it.
//
// Asynchronous: a decision waits for the store without holding a thread (RedisStore answers
// from its own I/O thread), and the caller is called back with the result.
//
// Thread-safe: any number of threads may call it while another swaps the rules.

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"

#include "server/rules/rules.h"
#include "server/service/caller_limits.h"
#include "server/service/feedback.h"
#include "server/service/key_names.h"
#include "server/service/log_throttle.h"
#include "server/service/receipt.h"
#include "server/service/task.h"
#include "server/service/waiting.h"
#include "server/stats/metrics.h"
#include "sluice/clock.h"
#include "sluice/decision.h"
#include "sluice/store.h"
#include "src/core/mutex.h"

namespace sluice::server {

struct Explanation;  // explain.h

// Bounds on a rules-mode request of the HTTP API, checked before anything is decided. Each
// names its field in the error. The Envoy API (gRPC, POST /json) has none: whatever Envoy can
// send within gRPC's message size is answered, each descriptor on its own.
inline constexpr size_t kMaxDescriptors = 64;
inline constexpr size_t kMaxEntries = 16;  // Per descriptor.
inline constexpr size_t kMaxKeyBytes = 256;
inline constexpr size_t kMaxValueBytes = 1024;
inline constexpr size_t kMaxAdHocKeyBytes = 1024;

// A descriptor's key is stored as it is up to this size; a longer one (a URL path or a header
// in a value) is stored as its first bytes and a SHA-256 of the whole, so that a flood of huge
// values costs the store no more than this per key.
inline constexpr size_t kMaxStoredKeyBytes = 256;

// How the Envoy API (gRPC and POST /json) decides, as envoyproxy/ratelimit's settings of the
// same names do.
struct EnvoySettings {
  // Every hit of a fixed window rule is counted, over the limit or not, so that a window once
  // over stays over (their default: Redis INCRBY, then a comparison). False: a hit over the
  // limit counts nothing (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT), as sluice's own API does.
  bool count_over_limit = true;
  // STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, as their Redis cache does it: when one descriptor
  // of a request would pass its limit with its hits, only the descriptors that would are
  // counted (hit as ever: each of them is then over); the others are charged nothing, and
  // answered as they stand. (count_over_limit false is sluice's own meaning instead.)
  bool stop_others_over_limit = false;
  // QUOTA_MODE: every rule in quota mode (see DescriptorResult::quota_mode).
  bool quota_mode = false;
  // SHADOW_MODE: the overall code is never OVER_LIMIT (the statuses still say it).
  bool shadow_mode = false;
};

// Envoy's per-descriptor `limit`: a fixed window that bypasses the rules.
struct LimitOverride {
  int64_t requests_per_unit = 0;
  Unit unit = Unit::kUnknown;
};

struct RequestDescriptor {
  std::vector<Entry> entries;
  std::optional<LimitOverride> limit;
  std::optional<int64_t> cost;  // Envoy's per-descriptor hits_addend; the request's when empty.
};

struct CheckRequest {
  std::string domain;
  // Envoy's API: no bounds on sizes, each descriptor decided on its own (ShouldRateLimitAsync
  // sets it).
  bool envoy = false;
  std::vector<RequestDescriptor> descriptors;
  int64_t cost = 1;
  // Whether concurrency limits apply (and a lease is taken). False where the caller has no way
  // to give a lease back (GET /v1/auth): they are then left out.
  bool leases = true;
  // Whether the answer carries a receipt of what was charged, to settle later (SettleAsync).
  bool receipt = false;
  // Whether the answer explains itself (CheckResult::explanation, DescriptorResult's): two
  // queries of the store more, around the decision.
  bool explain = false;
};

// A limit given in the request itself (POST /v1/check without rules).
struct AdHocRequest {
  std::string key;
  LimitSpec spec;
  int64_t cost = 1;
  bool receipt = false;                    // As CheckRequest's.
  std::optional<int64_t> max_debt;         // A settle's bound past the limit; default the limit.
  Micros block{0};                         // A rule's `block` (blocks.h); 0: none.
  std::optional<FeedbackPolicy> feedback;  // A rule's `feedback` (feedback.h); empty: none.
  bool explain = false;                    // As CheckRequest's.
};

// What one limit said about a request.
struct LimitOutcome {
  std::string name;
  // Set when another limit of the same request has the same name (one rule applied to two
  // descriptor values): a stable digest of the counter's key, the RateLimit headers' `pk`.
  std::string partition;
  bool named = false;  // The name was written in the rules (Envoy's answers carry only such).
  std::optional<Limit> limit;  // Empty for unlimited rules and requests_per_unit: 0.
  int64_t nominal = 0;         // The limit clients are told (soft mode stores more).
  Unit unit = Unit::kUnknown;  // Envoy's unit, when the rule was written with one.
  Mode mode = Mode::kHard;
  size_t descriptor = 0;  // Index of the request descriptor it applied to.
  bool unlimited = false;
  bool pool = false;       // An elastic pool charged for a borrowing limit.
  bool borrowed = false;   // Over its own limit, admitted by its pool.
  bool over_soft = false;  // Admitted past the nominal limit by soft mode.
  bool blocked = false;    // Denied by a block that runs on its key (the rule's `block`).
  bool paused = false;     // Denied by a pause its partner asked for (feedback.h).
  bool paced = false;      // Denied by an adaptive rate below the limit (feedback.h).
  // A concurrency limit: its capacity (also in `nominal`; `limit` is empty) and the time its
  // leases live. 0 for rate limits.
  int64_t concurrency = 0;
  Micros lease_ttl{0};
  RuleCounters* counters = nullptr;  // Where /metrics counts it (CountOutcomes).
  // The limit's own decision, as the client is told it: in soft mode against the nominal
  // limit; in shadow mode as decided (the request is admitted regardless).
  Decision decision;
  // The Envoy API's counted limits (EnvoySettings::count_over_limit): the window's count with
  // this request's hits (envoyproxy/ratelimit's limitAfterIncrease), for the hit counters.
  // Empty for other limits, and when the counter could not count them.
  std::optional<int64_t> count;
};

struct CheckResult {
  // The request's answer: the Combine of every finite limit that applied, with shadow limits
  // reported as admitting. Meaningless when !limited.
  Decision combined{.allowed = true};
  bool limited = false;  // Whether any finite limit applied.
  std::vector<LimitOutcome> limits;
  // The cost the limits were decided at (Envoy's hits_addend): the hits CountOutcomes counts.
  int64_t cost = 0;
  // When a concurrency limit applied and the request was admitted with a cost above 0: the
  // lease it holds (a token for Release). Empty otherwise.
  std::string lease;
  Micros lease_ttl{0};  // How long that lease lives unless given back.
  // The keys of the concurrency limits that applied: an acquire waits for releases there.
  std::vector<std::string> lease_keys;
  // No rule matched any descriptor, or the domain is unknown: nothing limits the request (a
  // misspelt key or domain, as clients warn). Not so for a rule that matched and holds no
  // limit here (a concurrency limit asked without leases, limits all `replaces`d).
  bool unmatched = false;
  // Asked for (CheckRequest::receipt) and the request admitted with a cost above 0: the
  // signed receipt of what it charged, and how long it can be settled.
  std::string receipt;
  Micros receipt_ttl{0};
  // Asked for (CheckRequest::explain): why the request was answered so (explain.h).
  std::shared_ptr<const Explanation> explanation;
};

// POST /v1/settle: what a request that got a receipt really cost.
struct SettleRequest {
  std::string receipt;
  int64_t cost = 0;  // 0: a refund.
};

// What a settle did on one limit of the receipt.
struct SettledLimit {
  std::string name;
  Settled settled;
};

struct SettleResult {
  int64_t cost = 0;
  // The least over the limits of what each gave back and charged past its limit.
  int64_t given_back = 0;
  int64_t charged = 0;
  std::vector<SettledLimit> limits;
};

// POST /v1/reset: the keys a check would count under, forgotten.
struct ResetResult {
  std::vector<std::string> limits;  // The names of the limits reset, as a check lists them.
  bool unmatched = false;           // No rule matched: nothing was reset.
};

// Counts each limit of `result` in its rule's counters, as admitted or not by the request.
// The service counts every decision once; an acquire, once, when it is answered.
void CountOutcomes(const CheckResult& result);

// POST /v1/feedback: which limits (named as a check names them) and what their partner
// answered (feedback.h).
struct FeedbackRequest {
  std::variant<AdHocRequest, CheckRequest> target;
  PartnerAnswer answer;
};

// A lease token taken apart: the id and the keys it is held on.
struct ParsedLease {
  std::string id;
  std::vector<std::string> keys;
};
inline constexpr size_t kMaxLeaseTokenBytes = 16 * 1024;
// InvalidArgument "lease is not a lease token from sluiced" for anything else.
absl::StatusOr<ParsedLease> ParseLeaseToken(std::string_view token);

// POST /v1/acquire: a check that may wait, up to max_wait, until it can go ahead.
struct AcquireRequest {
  std::variant<AdHocRequest, CheckRequest> check;
  Micros max_wait{0};
};

// The longest an acquire may wait.
inline constexpr Micros kMaxAcquireWait = std::chrono::hours(1);

// An acquire that waits for a concurrency slot is woken by releases made through this server
// at once; releases through another server of a fleet are not seen here, so it also asks the
// store again this often.
inline constexpr Micros kLeasePoll = std::chrono::milliseconds(100);

struct AcquireResult {
  CheckResult check;  // The admitting decision, or the denial that was too far off.
  Micros waited{0};   // From arrival to the answer.
};

// One result per request descriptor, decided each on its own, as envoyproxy/ratelimit does.
struct DescriptorResult {
  bool matched = false;  // A rule (or an override) applied.
  // Its rule is in quota mode (quota_mode: true, or EnvoySettings::quota_mode): being over
  // the limit makes the request over only when every quota descriptor of it is.
  bool quota_mode = false;
  bool unlimited = false;               // It was an unlimited rule.
  bool over_limit = false;              // Denied (shadow limits never deny).
  std::string metadata_json;            // Its rule's `metadata` (Rule::metadata_json).
  std::optional<LimitOutcome> closest;  // The limit nearest to denying (fewest remaining).
  // Envoy's view of `closest`, as /json and gRPC answer it:
  // - limit_remaining: its remaining when OK, 0 when over, 4294967295 when unlimited;
  // - unit: the rule's unit, or the unit its period equals (kUnknown when none does);
  // - until_reset: to the end of the window for fixed_window, rounded up to whole seconds
  //   (never 0), else reset_after.
  uint32_t limit_remaining = 0;
  Unit unit = Unit::kUnknown;
  Micros until_reset{0};
  // Asked for (CheckRequest::explain): this descriptor's explanation, alone in it.
  std::shared_ptr<const Explanation> explanation;
};

class RateLimitService {
 public:
  // Receives a decision. Called exactly once: before the call that started the decision
  // returns when the store answers at once (the memory store), else later on the store's own
  // thread (RedisStore's I/O thread), so keep it quick and hand heavy work (building a
  // response) back to a thread of the caller's.
  template <typename T>
  using Done = absl::AnyInvocable<void(T) &&>;

  // `store`, `clock`, `metrics` and `timers` must outlive the service. Without timers,
  // acquire is refused (FailedPrecondition).
  RateLimitService(Store& store, Clock& clock, Metrics& metrics, Timers* timers = nullptr,
                   EnvoySettings envoy = {});

  // The rules in force; never null. A request keeps the rules it started with.
  std::shared_ptr<const RuleSet> rules() const;
  void SetRules(std::shared_ptr<const RuleSet> rules);

  // Rules mode, all or nothing over the whole request: every limit of every descriptor must
  // admit it. Errors: InvalidArgument for a malformed request (naming the field), the store's
  // error when it cannot decide.
  void CheckAsync(CheckRequest request, Done<absl::StatusOr<CheckResult>> done);

  // Envoy's semantics (POST /json, gRPC): each descriptor decided on its own, with its own
  // cost. InvalidArgument for an empty domain or no descriptors; Unavailable when no rules
  // are loaded.
  void ShouldRateLimitAsync(CheckRequest request,
                            Done<absl::StatusOr<std::vector<DescriptorResult>>> done);

  // The overall code of an answer of ShouldRateLimitAsync, as envoyproxy/ratelimit's: over
  // when a descriptor outside quota mode is over its limit, or when there are quota
  // descriptors and every one is; never in shadow mode (EnvoySettings), which counts each
  // answer it made OK (Metrics::CountGlobalShadowMode): call it once per answer.
  bool OverallOverLimit(const std::vector<DescriptorResult>& results) const;

  // A limit given by the caller.
  void CheckAdHocAsync(AdHocRequest request, Done<absl::StatusOr<CheckResult>> done);

  // Waits until `request` may go ahead, then charges it: through a leaky_bucket's delay, or a
  // denial's retry_after, each wait a timer rather than a thread. Waiters on the same
  // descriptors (or ad hoc key) are served first come, first served: only the first asks the
  // store. Answers a denial at once when going ahead is further off than max_wait
  // (retry_after says how far), or never possible. A waiter holds no reservation: a
  // leaky_bucket's delay is waited out before it is charged. Returns a function that gives
  // the wait up (the client went away): the waiter leaves its line at once and `done`
  // receives Cancelled.
  using CancelWait = absl::AnyInvocable<void()>;
  CancelWait AcquireAsync(AcquireRequest request, Done<absl::StatusOr<AcquireResult>> done);
  // Gives back the lease of a CheckResult (its `lease` token), on every key it holds, and
  // wakes the acquires waiting for those keys. True when it was held on every key; false when
  // it had been released already or had expired. InvalidArgument for a malformed token.
  void ReleaseAsync(std::string lease, Done<absl::StatusOr<bool>> done);

  // Settles a receipt (CheckResult::receipt) at `request.cost`, on every limit it names, as
  // sluice/settle.h says: gives back what was charged beyond the cost, or charges the extra
  // past the limit up to each limit's max_debt. Once per receipt, fleet-wide on a shared
  // store. InvalidArgument naming the reason for a receipt that is empty, malformed, forged,
  // changed, expired or settled already (nothing changes then); the store's error when it
  // cannot settle (nothing given back).
  void SettleAsync(SettleRequest request, Done<absl::StatusOr<SettleResult>> done);

  // Forgets, fleet-wide, the keys of every rate limit `request` would be checked against
  // (its cost is ignored; elastic pools, shared by every key, and concurrency limits are
  // left alone). For an administrator: the caller checks the right to act on others' keys.
  void ResetAsync(std::variant<AdHocRequest, CheckRequest> request,
                  Done<absl::StatusOr<ResetResult>> done);

  // Acts on `request.target`'s limits that take feedback as feedback.h says, fleet-wide:
  // pauses them, or brings their count down to the partner's. Limits without `feedback` are
  // left alone, and named in the result's notes. InvalidArgument for a malformed target (as a
  // check's), or an ad hoc one without feedback; the store's error when it cannot act
  // (nothing changed then, or, on a Cluster, some keys only).
  void FeedbackAsync(FeedbackRequest request, Done<absl::StatusOr<FeedbackResult>> done);

  // How keys are shown in explanations and to operators (key_names.h): as they are until set.
  // Set it before serving.
  void SetKeyNames(KeyNames names) { names_ = std::move(names); }
  const KeyNames& key_names() const { return names_; }

  // The secret receipts are signed with; a random one until set. Set it before serving.
  void SetReceiptSigner(ReceiptSigner signer) { signer_ = std::move(signer); }

  // Ends every wait now, and any that starts later, with Unavailable (the server stops).
  void StopWaiting();
  // Requests waiting in AcquireAsync now.
  size_t waiting() const;
  // Distinct limits callers have in use now (CallerLimits; at most kMaxCallerLimits).
  size_t caller_limits_in_use() const { return caller_limits_.InUse(clock_.Now()); }

  // The same three, waiting for the answer: for tests and tools, never for a thread that
  // serves requests.
  absl::StatusOr<CheckResult> Check(CheckRequest request);
  absl::StatusOr<std::vector<DescriptorResult>> ShouldRateLimit(CheckRequest request);
  absl::StatusOr<CheckResult> CheckAdHoc(AdHocRequest request);
  absl::StatusOr<AcquireResult> Acquire(AcquireRequest request);
  absl::StatusOr<bool> Release(std::string lease);
  absl::StatusOr<SettleResult> Settle(SettleRequest request);
  absl::StatusOr<ResetResult> Reset(std::variant<AdHocRequest, CheckRequest> request);
  absl::StatusOr<FeedbackResult> Feedback(FeedbackRequest request);

  // Blocks until every decision started by an *Async call has called its `done`. A server
  // calls it once it takes no more requests, before it tears down what those callbacks use.
  // Bounded by the store's own timeouts.
  void WaitIdle() const;

 private:
  struct Planned;
  struct PlannedLease;
  struct Deciding;    // Decide's steps, one per mode (decide.cc).
  struct Explaining;  // An explanation in the making (explain.cc).
  using CheckTask = internal::Task<absl::StatusOr<CheckResult>>;
  using DescriptorsTask = internal::Task<absl::StatusOr<std::vector<DescriptorResult>>>;
  using StatusTask = internal::Task<absl::Status>;

  // `count`: whether /metrics counts the decision (an acquire counts its answer only).
  CheckTask DecideCheck(CheckRequest request, bool count = true);
  DescriptorsTask DecideDescriptors(CheckRequest request);
  CheckTask DecideAdHoc(AdHocRequest request, bool count = true);
  // Explained (explain.cc): `planned` and `leases` decided as DecideCheck does, for the
  // request's `descriptors` (Envoy's API explains each alone), with the keys' states asked
  // before and after, into CheckResult::explanation.
  CheckTask DecideExplained(const Domain& domain, const CheckRequest& request,
                            std::vector<size_t> descriptors, std::vector<Planned>& planned,
                            std::vector<PlannedLease>& leases, int64_t cost, Timestamp now,
                            bool count = true, bool matched = true);
  CheckTask ExplainAdHoc(AdHocRequest request, bool count);
  // The explanation of `descriptors`, which matched no rule (or whose domain is unknown: null).
  std::shared_ptr<const Explanation> ExplainUnmatched(const Domain* domain,
                                                      const CheckRequest& request,
                                                      std::vector<size_t> descriptors);
  internal::Task<absl::StatusOr<bool>> DecideRelease(std::string lease);
  internal::Task<absl::StatusOr<SettleResult>> DecideSettle(SettleRequest request);
  internal::Task<absl::StatusOr<ResetResult>> DecideReset(
      std::variant<AdHocRequest, CheckRequest> request);
  internal::Task<absl::StatusOr<FeedbackResult>> DecideFeedback(FeedbackRequest request);
  // The limits of `plan` that take feedback, each once, into `targets`; those that do not,
  // named in `notes`.
  void AddRuleTargets(const std::vector<Planned>& plan, std::vector<FeedbackTarget>& targets,
                      std::vector<std::string>& notes) const;
  // Counts what a feedback did in each target's counters, and logs it.
  void CountAndLog(const std::vector<FeedbackTarget>& targets,
                   const std::vector<FeedbackLimit>& done, const PartnerAnswer& answer);
  // Signs the receipt of `limits` charged at `now` into `result` (settle.cc).
  void IssueReceipt(std::vector<ReceiptLimit> limits, Timestamp now, CheckResult& result) const;
  internal::Task<absl::StatusOr<AcquireResult>> DecideAcquire(AcquireRequest request,
                                                              std::shared_ptr<Waiter> waiter);
  // One try of an acquire: its check at `cost`.
  CheckTask Attempt(const AcquireRequest& request, int64_t cost);
  // An acquire's try that was admitted, `decided` when the store answered: waits out a delay
  // it still has, then answers, unless the waiter was cancelled meanwhile.
  internal::Task<absl::StatusOr<CheckResult>> GoAhead(const std::shared_ptr<Waiter>& waiter,
                                                      CheckResult result, Timestamp decided);
  // Runs `task` for an *Async call: counted in in_flight_ until `done` has returned.
  template <typename T>
  internal::Detached Run(internal::Task<T> task, Done<T> done);

  absl::Status Validate(const CheckRequest& request) const;
  // The limits that apply to `request`'s descriptors in `domain`, keys built, IP addresses
  // grouped, `replaces` applied; and, when `leases` is given, the concurrency limits there
  // (else they are left out: Envoy's API cannot give a lease back).
  // ResourceExhausted when an override would pass kMaxCallerLimits (CallerLimits); or, when
  // `refused` is given, that descriptor is left out of the plan and *refused says why, so that
  // the other descriptors are still decided (the Envoy API: failing the whole request would
  // let Envoy's default admit a descriptor over its limit). *matched, when given, says
  // whether any descriptor matched a rule or carried an override.
  absl::StatusOr<std::vector<Planned>> Plan(const Domain& domain, const CheckRequest& request,
                                            std::vector<PlannedLease>* leases = nullptr,
                                            absl::Status* refused = nullptr,
                                            bool* matched = nullptr);
  absl::StatusOr<Planned> PlanOverride(const Domain& domain, const LimitOverride& override,
                                       bool counting);
  RuleCounters* DetailedCounters(const Domain& domain, const Rule& rule,
                                 const RuleLimit& rule_limit, const std::vector<Entry>& entries);
  // A limit the caller gave, admitted by caller_limits_ at `now` or refused (counted).
  absl::Status AdmitCallerLimit(const Limit& limit, Timestamp now);
  // Counts a store call's failure in /metrics, unless the request itself was refused.
  void CountStoreFailure(const absl::Status& status);
  // Decides `planned` (each limit with its key) for `cost`: up to three store calls, one after
  // the other (the enforced limits; when elastic ones denied, again with their pools; the
  // shadow limits). `denied_elsewhere`: the request is denied already (by a concurrency
  // limit); it is counted so, and `cost` should be 0. `planned` must stay alive until the
  // task ends.
  // `receipt`: the answer carries a receipt of what was charged (CheckRequest::receipt).
  CheckTask Decide(std::vector<Planned>& planned, int64_t cost, Timestamp now,
                   bool denied_elsewhere = false, bool count = true, bool receipt = false);
  // The Envoy API's answer to `request` before any descriptor is decided: unmatched (each
  // explained as such when asked, if its `domain` is unknown, null).
  std::vector<DescriptorResult> NoResults(const CheckRequest& request, const Domain* domain);
  // `planned` by the descriptor of `request` each limit is for.
  static std::vector<std::vector<Planned>> ByDescriptor(const CheckRequest& request,
                                                        std::vector<Planned> planned);
  // EnvoySettings::stop_others_over_limit: looks at each descriptor's limits (`groups`, each
  // with its cost in `costs`) and, when any would pass its limit with its cost, sets the costs
  // of the others to 0.
  StatusTask StopOthersOverLimit(std::vector<std::vector<Planned>>& groups,
                                 std::vector<int64_t>& costs, Timestamp now);
  // Decides `planned` and `leases` together: the leases are taken first (they can be given
  // back), then the rate limits are charged; when those deny, the leases are given back.
  CheckTask DecideLeased(std::vector<Planned>& planned, std::vector<PlannedLease>& leases,
                         int64_t cost, Timestamp now, bool count, bool receipt = false);

  Store& store_;
  Clock& clock_;
  Metrics& metrics_;
  const EnvoySettings envoy_;
  // The rules, swapped under a mutex; each thread keeps a copy (rules()) and takes the mutex
  // only when the version has moved on. (libstdc++'s atomic<shared_ptr> is a spin lock that
  // ThreadSanitizer reports races in.)
  const uint64_t id_;  // Tells services apart in the threads' copies.
  mutable internal::Mutex rules_mutex_;
  std::shared_ptr<const RuleSet> rules_ ABSL_GUARDED_BY(rules_mutex_);
  std::atomic<uint64_t> rules_version_{1};
  RuleCounters* adhoc_counters_;
  CallerLimits caller_limits_;
  std::atomic<int64_t> in_flight_{0};       // *Async decisions whose `done` has not returned.
  std::atomic<bool> detailed_full_{false};  // CounterRegistry::kMaxDetailed reached (logged).
  // Store failures are logged at most every 10 s (a store that is down fails every request),
  // and so are counts a partner's feedback lowered (a partner may say so on every answer).
  LogThrottle store_errors_logged_{10'000'000};
  LogThrottle lowered_logged_{10'000'000};
  std::unique_ptr<WaitLines> lines_;  // Acquire's waiters; null without timers.
  ReceiptSigner signer_;
  KeyNames names_;
};

// The key under which `entries` of `domain` are counted: the domain and every entry, each
// part escaped so that no two descriptors share a key, bounded by kMaxStoredKeyBytes. Starts
// with a control byte, so it can never equal an ad-hoc key (those may not contain control
// bytes).
std::string RuleKey(std::string_view domain, const std::vector<Entry>& entries);

}  // namespace sluice::server
