// A partner's feedback (feedback.h): the pause and lowering it asks of each limit, and
// RateLimitService::FeedbackAsync, which makes them in one store call.

#include "server/service/feedback.h"

#include <algorithm>
#include <utility>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

#include "server/service/blocks.h"
#include "server/service/service_internal.h"
#include "server/service/store_answer.h"
#include "sluice/duration.h"
#include "src/core/integers.h"

namespace sluice::server {
namespace {

constexpr Micros kPauseUnit = std::chrono::milliseconds(1);  // PauseLimit's emission interval.

// A drain's debt is kept below what every store holds exactly: the Redis store computes in
// doubles and wants (B + D) x P' below 2^52 (docs/redis.md).
constexpr Int128 kMaxDrain = Int128{1} << 50;

bool IsBucket(const Limit& limit) {
  const Algorithm a = limit.algorithm();
  return a == Algorithm::kTokenBucket || a == Algorithm::kGcra || a == Algorithm::kLeakyBucket;
}

}  // namespace

std::string PauseKey(std::string_view key) { return SideKey(key, "pause"); }

std::string SlowKey(std::string_view key, std::string_view limit) {
  return SideKey(key, "slow:", limit);
}
std::string PaceKey(std::string_view key, std::string_view limit) {
  return SideKey(key, "pace:", limit);
}
std::string CutKey(std::string_view key, std::string_view limit) {
  return SideKey(key, "cut:", limit);
}

int64_t AdaptiveRate(const AdaptivePolicy& policy, int64_t n, Micros slow) {
  if (slow <= Micros{0}) {
    return n;
  }
  const Int128 held =
      internal::CeilDiv(Int128{n - policy.floor} * slow.count(), policy.recover.count());
  return static_cast<int64_t>(std::max<Int128>(policy.floor, Int128{n} - held));
}

Micros SlowdownFor(const AdaptivePolicy& policy, int64_t n, int64_t rate) {
  rate = std::clamp(rate, policy.floor, n);
  const Int128 slow = internal::CeilDiv(Int128{n - rate} * policy.recover.count(),
                                        std::max<int64_t>(n - policy.floor, 1));
  return Micros{static_cast<int64_t>(slow)};
}

int64_t CutRate(const AdaptivePolicy& policy, int64_t rate) {
  const auto cut = static_cast<int64_t>(static_cast<double>(rate) * policy.cut);
  return std::max(policy.floor, std::min(cut, rate - 1));
}

int64_t PacingCost(int64_t cost, Micros period, int64_t rate) {
  const Int128 us = internal::CeilDiv(Int128{cost} * period.count(), std::max<int64_t>(rate, 1));
  return static_cast<int64_t>(std::min<Int128>(us, Limit::kMaxCount));
}

Micros PauseAsked(const PartnerAnswer& answer, const FeedbackPolicy& policy, std::string* note) {
  const bool none_left = answer.remaining && *answer.remaining == 0 && answer.reset;
  std::optional<Micros> asked;
  std::string_view from;
  if (answer.status == 429) {
    if (answer.retry_after) {
      asked = answer.retry_after;
      from = "its retry time";
    } else if (answer.reset && (!answer.remaining || *answer.remaining == 0)) {
      asked = answer.reset;
      from = "its reset";
    } else {
      asked = policy.pause;
      from = "the policy's pause, as the 429 named no time";
    }
  } else if (answer.status == 503 && answer.retry_after) {
    asked = answer.retry_after;
    from = "its retry time";
  } else if (none_left) {
    asked = answer.reset;
    from = "its reset, as nothing remains";
  }
  if (!asked || *asked <= Micros{0}) {
    return Micros{0};
  }
  if (*asked > policy.max_pause) {
    if (note != nullptr) {
      *note = fmt::format("the partner asked for a pause of {} ({}): paused for max_pause, {}",
                          FormatDuration(*asked), from, FormatDuration(policy.max_pause));
    }
    return policy.max_pause;
  }
  return *asked;
}

std::optional<Settlement> LimitSettlement(const Limit& limit, int64_t capacity, Micros pause,
                                          std::optional<int64_t> remaining, Micros max_pause,
                                          std::string* note) {
  const Int128 p = limit.rate_period_us();
  if (pause > Micros{0}) {
    if (!IsBucket(limit)) {
      return std::nullopt;
    }
    // Empty at the pause's end: the units the rate refills during it, owed past the burst.
    const Int128 refilled = internal::CeilDiv(Int128{pause.count()} * limit.rate_units(), p);
    Int128 debt = std::min(refilled, kMaxDrain / p - capacity);
    debt = std::max<Int128>(
        0, std::min<Int128>(debt, std::min(kMaxDebt, Limit::kMaxCount - capacity)));
    if (debt < refilled && note != nullptr) {
      *note = fmt::format(
          "the bucket refills during the last {} of the pause: a debt of {} "
          "units is the most every store holds for it",
          FormatDuration(Micros{static_cast<int64_t>((refilled - debt) * p / limit.rate_units())}),
          static_cast<int64_t>(debt));
    }
    return Settlement{.units = capacity + static_cast<int64_t>(debt),
                      .max_debt = static_cast<int64_t>(debt)};
  }
  if (!remaining || *remaining <= 0 || *remaining >= capacity) {
    return std::nullopt;
  }
  // How long a lowering lasts at most: a window's period; a bucket's time to refill its burst.
  const Micros lasts = IsBucket(limit)
                           ? Micros{static_cast<int64_t>(std::min<Int128>(
                                 internal::CeilDiv(Int128{capacity} * p, limit.rate_units()),
                                 kMaxPartnerTime.count()))}
                           : limit.period();
  if (lasts > max_pause) {
    if (note != nullptr) {
      *note = fmt::format(
          "not brought down to the partner's remaining: that would last up to "
          "{}, past max_pause ({})",
          FormatDuration(lasts), FormatDuration(max_pause));
    }
    return std::nullopt;
  }
  return Settlement{.units = capacity, .max_debt = -*remaining};
}

Settlement PauseSettlement(Micros pause) {
  const int64_t units = (pause.count() + kPauseUnit.count() - 1) / kPauseUnit.count();
  return Settlement{.units = units, .max_debt = std::max<int64_t>(units - 1, 0)};
}

namespace {

using Target = FeedbackTarget;

// The partner's figures, for the log.
std::string Figures(const PartnerAnswer& answer) {
  return fmt::format("status {}, retry {}, remaining {}, reset {}", answer.status,
                     answer.retry_after ? FormatDuration(*answer.retry_after) : "-",
                     answer.remaining ? fmt::format("{}", *answer.remaining) : "-",
                     answer.reset ? FormatDuration(*answer.reset) : "-");
}

// What a feedback's store call did on `target` (its limit's settle, its pause key's, its
// slowdown's query when adaptive), into `d`. `own_pause`: the pause key was settled with the
// pause this target asked (not a longer one of another limit of the key).
void Record(const Target& target, const Settled& limit, const Settled& pause, const Settled* slow,
            bool own_pause, FeedbackLimit& d) {
  d.paused = pause.charged > 0 && own_pause;
  d.pause_left = pause.after.reset_after;
  d.lowered = d.pause > Micros{0} ? 0 : limit.charged;
  d.after = limit.after;
  d.after.remaining = std::max<int64_t>(d.after.remaining - target.soft_extra, 0);
  if (slow != nullptr) {
    const RuleLimit& rule_limit = *target.rule_limit;
    d.rate =
        AdaptiveRate(*rule_limit.feedback->adaptive, rule_limit.nominal, slow->after.reset_after);
  }
}

// Makes what `answer` asks of every target in one store call: on each, its limit's settlement
// (or a query) and its pause key's. `targets` must outlive the task.
internal::Task<absl::StatusOr<std::vector<FeedbackLimit>>> Act(Store& store,
                                                               const std::vector<Target>& targets,
                                                               const PartnerAnswer& answer,
                                                               Timestamp now) {
  std::vector<LimitedKey> keys;
  std::vector<Settlement> settlements;
  std::vector<std::string> pause_keys;
  pause_keys.reserve(2 * targets.size());  // No reallocation: `keys` points into it.
  // Per target: its limit's entry, its pause key's (shared by the limits of one key: the
  // partner paused that key, so the longest pause asked holds), its slowdown's (0: none).
  std::vector<size_t> limit_at(targets.size()), pause_at(targets.size()),
      slow_at(targets.size(), 0);
  std::vector<FeedbackLimit> done(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    std::string note;
    done[i].name = t.name;
    done[i].pause = PauseAsked(answer, t.policy, &note);
    if (!note.empty()) {
      done[i].notes.push_back(std::move(note));
    }
    const std::optional<int64_t> remaining =
        answer.remaining && *answer.remaining > 0
            ? std::optional<int64_t>(*answer.remaining + t.soft_extra)
            : std::nullopt;
    limit_at[i] = keys.size();
    keys.push_back({.limit = t.limit, .key = t.key});
    settlements.push_back(LimitSettlement(*t.limit, t.limit->burst(), done[i].pause, remaining,
                                          t.policy.max_pause, &note)
                              .value_or(Settlement{}));
    if (!note.empty()) {
      done[i].notes.push_back(std::move(note));
    }
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    const std::string key = PauseKey(targets[i].key);
    const auto same = std::find(pause_keys.begin(), pause_keys.end(), key);
    if (same != pause_keys.end()) {
      pause_at[i] = pause_at[static_cast<size_t>(same - pause_keys.begin())];
      Settlement& shared = settlements[pause_at[i]];
      shared = std::max(shared, PauseSettlement(done[i].pause),
                        [](const Settlement& a, const Settlement& b) { return a.units < b.units; });
      pause_keys.push_back({});  // Keeps pause_keys[i] for target i.
      continue;
    }
    pause_at[i] = keys.size();
    keys.push_back({.limit = &PauseLimit(), .key = pause_keys.emplace_back(key)});
    settlements.push_back(PauseSettlement(done[i].pause));
  }
  std::vector<std::string> slow_keys;
  slow_keys.reserve(targets.size());  // No reallocation: `keys` points into it.
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i].rule_limit != nullptr && targets[i].rule_limit->pacing) {
      slow_at[i] = keys.size();
      keys.push_back({.limit = &PauseLimit(),
                      .key = slow_keys.emplace_back(SlowKey(targets[i].key, targets[i].name))});
      settlements.push_back(Settlement{});
    }
  }
  std::vector<Settled> settled(keys.size());
  if (absl::Status s =
          co_await StoreSettle(store, keys, settlements, {}, Timestamp{}, now, settled);
      !s.ok()) {
    co_return s;
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    Record(targets[i], settled[limit_at[i]], settled[pause_at[i]],
           slow_at[i] == 0 ? nullptr : &settled[slow_at[i]],
           settlements[pause_at[i]].units == PauseSettlement(done[i].pause).units, done[i]);
  }
  co_return std::move(done);
}

// A 429's cut of an adaptive target's rate, `done.rate` before it: once per cooldown,
// fleet-wide (the cut claim's one unit), the slowdown set to run the key at CutRate.
internal::Task<absl::Status> Cut(Store& store, const Target& target, Timestamp now,
                                 FeedbackLimit& done) {
  const RuleLimit& rule_limit = *target.rule_limit;
  const std::string claim = CutKey(target.key, target.name);
  const LimitedKey claim_key{.limit = &*rule_limit.cut_claim, .key = claim};
  Decision claimed;
  const absl::StatusOr<Decision> taken =
      co_await StoreDecision(store, {&claim_key, 1}, 1, now, {&claimed, 1});
  if (!taken.ok() || !taken->allowed) {
    co_return taken.status();  // Cut within the cooldown already (by this 429's siblings).
  }
  const AdaptivePolicy& policy = *rule_limit.feedback->adaptive;
  const int64_t rate = CutRate(policy, done.rate);
  const std::string slow = SlowKey(target.key, target.name);
  const LimitedKey slow_key{.limit = &PauseLimit(), .key = slow};
  const Settlement set = PauseSettlement(SlowdownFor(policy, rule_limit.nominal, rate));
  Settled settled;
  if (absl::Status s = co_await StoreSettle(store, {&slow_key, 1}, {&set, 1}, {}, Timestamp{}, now,
                                            {&settled, 1});
      !s.ok()) {
    co_return s;
  }
  done.cut = settled.charged > 0;
  done.rate = AdaptiveRate(policy, rule_limit.nominal, settled.after.reset_after);
  co_return absl::OkStatus();
}

}  // namespace

internal::Task<absl::StatusOr<FeedbackResult>> RateLimitService::DecideFeedback(
    FeedbackRequest request) {
  const Timestamp now = clock_.Now();
  FeedbackResult result;
  result.notes = request.answer.notes;
  std::vector<Target> targets;
  std::optional<Limit> adhoc_limit;      // Outlives the store call: `targets` points to it.
  std::shared_ptr<const RuleSet> rules;  // Likewise for the rules' limits.
  if (AdHocRequest* adhoc = std::get_if<AdHocRequest>(&request.target)) {
    absl::StatusOr<Limit> limit = AdHocLimit(*adhoc);
    if (!limit.ok()) {
      co_return limit.status();
    }
    if (!adhoc->feedback) {
      co_return absl::InvalidArgumentError(
          "this ad hoc limit takes no feedback: give it \"feedback\": true (or {\"max_pause\": "
          "..., \"pause\": ...}), in its checks too");
    }
    adhoc_limit = *std::move(limit);
    targets.push_back({.name = "adhoc",
                       .limit = &*adhoc_limit,
                       .key = adhoc->key,
                       .policy = *adhoc->feedback,
                       .counters = adhoc_counters_});
  } else {
    CheckRequest& check = std::get<CheckRequest>(request.target);
    if (absl::Status s = Validate(check); !s.ok()) {
      co_return s;
    }
    rules = this->rules();
    const Domain* domain = rules->FindDomain(check.domain);
    bool matched = false;
    absl::StatusOr<std::vector<Planned>> plan =
        domain == nullptr ? std::vector<Planned>()
                          : Plan(*domain, check, nullptr, nullptr, &matched);
    if (!plan.ok()) {
      co_return plan.status();
    }
    result.unmatched = !matched;
    AddRuleTargets(*plan, targets, result.notes);
  }
  metrics_.CountFeedback(request.answer.notes.size());
  if (targets.empty()) {
    co_return std::move(result);
  }
  absl::StatusOr<std::vector<FeedbackLimit>> done =
      co_await Act(store_, targets, request.answer, now);
  if (!done.ok()) {
    CountStoreFailure(done.status());
    co_return done.status();
  }
  result.limits = *std::move(done);
  if (request.answer.status == 429) {
    for (size_t i = 0; i < targets.size(); ++i) {
      if (targets[i].rule_limit != nullptr && targets[i].rule_limit->pacing) {
        if (absl::Status s = co_await Cut(store_, targets[i], now, result.limits[i]); !s.ok()) {
          CountStoreFailure(s);  // The pause stands; the rate is left as it was.
        }
      }
    }
  }
  CountAndLog(targets, result.limits, request.answer);
  co_return std::move(result);
}

void RateLimitService::AddRuleTargets(const std::vector<Planned>& plan,
                                      std::vector<FeedbackTarget>& targets,
                                      std::vector<std::string>& notes) const {
  for (const Planned& p : plan) {
    const RuleLimit& rule_limit = *p.rule_limit;
    if (rule_limit.unlimited || !rule_limit.limit) {
      continue;
    }
    if (!rule_limit.feedback) {
      std::string note =
          fmt::format("{} takes no feedback (its rule has no `feedback`)", rule_limit.name);
      if (std::find(notes.begin(), notes.end(), note) == notes.end()) {
        notes.push_back(std::move(note));
      }
      continue;
    }
    const bool seen = std::any_of(targets.begin(), targets.end(), [&](const Target& t) {
      return t.limit == &*rule_limit.limit && t.key == p.key;
    });
    if (!seen) {
      targets.push_back({.rule_limit = &rule_limit,
                         .name = rule_limit.name,
                         .limit = &*rule_limit.limit,
                         .key = p.key,
                         .policy = *rule_limit.feedback,
                         .soft_extra = rule_limit.soft_extra,
                         .counters = rule_limit.counters});
    }
  }
}

void RateLimitService::CountAndLog(const std::vector<FeedbackTarget>& targets,
                                   const std::vector<FeedbackLimit>& done,
                                   const PartnerAnswer& answer) {
  for (size_t i = 0; i < done.size(); ++i) {
    const FeedbackLimit& d = done[i];
    // A pause is logged each time it starts or lengthens: once per 429 the fleet meets.
    if (d.cut) {
      targets[i].counters->partner_cuts.fetch_add(1, std::memory_order_relaxed);
      spdlog::info("feedback: {} cut to {} per {} by its partner's 429", targets[i].name, d.rate,
                   FormatDuration(targets[i].limit->period()));
    }
    if (d.paused) {
      targets[i].counters->partner_pauses.fetch_add(1, std::memory_order_relaxed);
      spdlog::info("feedback: {} paused for {} by its partner ({})", targets[i].name,
                   FormatDuration(d.pause_left), Figures(answer));
    }
    // A partner may lower ours on every answer: at most one line every 10 s.
    uint64_t held = 0;
    bool first = false;
    if (d.lowered > 0) {
      targets[i].counters->partner_lowered.fetch_add(1, std::memory_order_relaxed);
      if (lowered_logged_.Allow(clock_.Now().time_since_epoch().count(), &held, &first)) {
        spdlog::info("feedback: {} brought down by {} to the partner's remaining ({}){}",
                     targets[i].name, d.lowered, Figures(answer),
                     held > 1 ? fmt::format("; {} such since the last line", held) : "");
      }
    }
  }
}

void RateLimitService::FeedbackAsync(FeedbackRequest request,
                                     Done<absl::StatusOr<FeedbackResult>> done) {
  Run(DecideFeedback(std::move(request)), std::move(done));
}

absl::StatusOr<FeedbackResult> RateLimitService::Feedback(FeedbackRequest request) {
  return internal::Wait(DecideFeedback(std::move(request)));
}

}  // namespace sluice::server
