// A partner's feedback (feedback.h): the pause and lowering it asks of each limit, and
// RateLimitService::FeedbackAsync, which makes them in one store call.

#include "server/service/feedback.h"

#include <algorithm>
#include <utility>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

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

std::string PauseKey(std::string_view key) {
  std::string pause(key);
  pause +=
      "\x1b"
      "pause";
  return pause;
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
                                          std::optional<int64_t> remaining) {
  if (pause > Micros{0}) {
    if (!IsBucket(limit)) {
      // The window the pause starts in has nothing left; a later window is the pause key's.
      return Settlement{.units = capacity, .max_debt = 0};
    }
    // Empty at the pause's end: the units the rate refills during it, owed past the burst.
    const Int128 p = limit.rate_period_us();
    Int128 refilled = internal::CeilDiv(Int128{pause.count()} * limit.rate_units(), p);
    refilled = std::min(refilled, kMaxDrain / p - capacity);
    refilled = std::min<Int128>(refilled, std::min(kMaxDebt, Limit::kMaxCount - capacity));
    const int64_t debt = static_cast<int64_t>(std::max<Int128>(refilled, 0));
    return Settlement{.units = capacity + debt, .max_debt = debt};
  }
  if (remaining && *remaining < capacity) {
    return Settlement{.units = capacity, .max_debt = -std::max<int64_t>(*remaining, 0)};
  }
  return std::nullopt;
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

// Makes what `answer` asks of every target in one store call: on each, its limit's settlement
// (or a query) and its pause key's. `targets` must outlive the task.
internal::Task<absl::StatusOr<std::vector<FeedbackLimit>>> Act(Store& store,
                                                               const std::vector<Target>& targets,
                                                               const PartnerAnswer& answer,
                                                               Timestamp now) {
  std::vector<LimitedKey> keys;
  std::vector<Settlement> settlements;
  std::vector<std::string> pause_keys;
  pause_keys.reserve(targets.size());  // No reallocation: `keys` points into it.
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
        answer.remaining ? std::optional<int64_t>(*answer.remaining + t.soft_extra) : std::nullopt;
    keys.push_back({.limit = t.limit, .key = t.key});
    settlements.push_back(LimitSettlement(*t.limit, t.limit->burst(), done[i].pause, remaining)
                              .value_or(Settlement{}));
    keys.push_back({.limit = &PauseLimit(), .key = pause_keys.emplace_back(PauseKey(t.key))});
    settlements.push_back(PauseSettlement(done[i].pause));
  }
  std::vector<Settled> settled(keys.size());
  if (absl::Status s =
          co_await StoreSettle(store, keys, settlements, {}, Timestamp{}, now, settled);
      !s.ok()) {
    co_return s;
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    const Settled& limit = settled[2 * i];
    const Settled& pause = settled[2 * i + 1];
    FeedbackLimit& d = done[i];
    d.paused = pause.charged > 0;
    d.pause_left = pause.after.reset_after;
    d.lowered = d.pause > Micros{0} ? 0 : limit.charged;
    d.after = limit.after;
    d.after.remaining = std::max<int64_t>(d.after.remaining - targets[i].soft_extra, 0);
  }
  co_return std::move(done);
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
    for (const Planned& p : *plan) {
      const RuleLimit& rule_limit = *p.rule_limit;
      if (rule_limit.unlimited || !rule_limit.limit) {
        continue;
      }
      if (!rule_limit.feedback) {
        std::string note =
            fmt::format("{} takes no feedback (its rule has no `feedback`)", rule_limit.name);
        if (std::find(result.notes.begin(), result.notes.end(), note) == result.notes.end()) {
          result.notes.push_back(std::move(note));
        }
        continue;
      }
      const bool seen = std::any_of(targets.begin(), targets.end(), [&](const Target& t) {
        return t.limit == &*rule_limit.limit && t.key == p.key;
      });
      if (!seen) {
        targets.push_back({.name = rule_limit.name,
                           .limit = &*rule_limit.limit,
                           .key = p.key,
                           .policy = *rule_limit.feedback,
                           .soft_extra = rule_limit.soft_extra,
                           .counters = rule_limit.counters});
      }
    }
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
  CountAndLog(targets, result.limits, request.answer);
  co_return std::move(result);
}

void RateLimitService::CountAndLog(const std::vector<FeedbackTarget>& targets,
                                   const std::vector<FeedbackLimit>& done,
                                   const PartnerAnswer& answer) {
  for (size_t i = 0; i < done.size(); ++i) {
    const FeedbackLimit& d = done[i];
    // A pause is logged each time it starts or lengthens: once per 429 the fleet meets.
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
