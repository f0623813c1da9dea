// The limits of a rule, as FileParser reads them (parser.h): a rate_limit, an entry of
// `limits` or a pool; a concurrency limit; and soft mode's enlargement of a limit.

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "fmt/format.h"
#include "yaml-cpp/yaml.h"

#include "server/rules/parser.h"
#include "sluice/duration.h"
#include "sluice/store.h"
#include "src/core/integers.h"
#include "src/core/status.h"

namespace sluice::server {

Limit BlockLimit(Micros duration) {
  return Limit::Create({.algorithm = Algorithm::kGcra, .limit = 1, .period = duration, .burst = 1})
      .value();
}

const Limit& PauseLimit() {
  static const Limit pause = Limit::Create({.algorithm = Algorithm::kGcra,
                                            .limit = 1,
                                            .period = std::chrono::milliseconds(1),
                                            .burst = 1})
                                 .value();
  return pause;
}

Limit EnvoyCounter(Micros period, std::optional<Calendar> calendar) {
  return Limit::Create({.algorithm = Algorithm::kFixedWindow,
                        .limit = Limit::kMaxCount,
                        .period = period,
                        .calendar = std::move(calendar)})
      .value();
}

RuleLimit FileParser::ParseLimit(const YAML::Node& node, std::string default_name) const {
  CheckKeys(node, {"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm",
                   "period", "burst", "buckets", "share", "max_debt", "block", "feedback",
                   "calendar", "time_zone"});
  if (++budget_.limits > limits_.max_limits) {
    Fail(node, fmt::format("more than {} rule limits (the limit on limits)", limits_.max_limits));
  }
  RuleLimit rule_limit;
  // An empty name is no name, as envoyproxy/ratelimit reads it.
  if (const YAML::Node name = node["name"]) {
    rule_limit.name = String(name, "'name'");
    rule_limit.named = !rule_limit.name.empty();
  }
  if (!rule_limit.named) {
    rule_limit.name = std::move(default_name);
  }
  ParseReplaces(node, rule_limit);
  if (const YAML::Node unlimited = node["unlimited"]; unlimited && Bool(unlimited, "unlimited")) {
    if (node["unit"] || node["period"] || node["share"] || node["calendar"] || node["time_zone"]) {
      Fail(node, "an unlimited rate_limit has no unit, period, share or calendar");
    }
    rule_limit.unlimited = true;  // requests_per_unit is ignored, as envoyproxy/ratelimit does.
    rule_limit.counters = counters_.Get(rule_limit.name);
    return rule_limit;
  }
  LimitSpec spec;
  ParsePeriod(node, rule_limit, spec);
  if (const YAML::Node count = node["requests_per_unit"]) {
    rule_limit.nominal = Integer(count, "requests_per_unit", 0, Limit::kMaxCount);
  } else if (rule_limit.unit == Unit::kUnknown) {
    // Envoy's form without a count is 0 (every request denied), as theirs reads it; sluice's
    // `period` form has no such default.
    Fail(node, "missing 'requests_per_unit'");
  }
  spec.limit = rule_limit.nominal;
  if (const YAML::Node algorithm = node["algorithm"]) {
    const absl::StatusOr<Algorithm> parsed = ParseAlgorithm(String(algorithm, "'algorithm'"));
    if (!parsed.ok()) {
      Fail(algorithm, internal::Message(parsed.status()));
    }
    spec.algorithm = *parsed;
  }
  if (const YAML::Node burst = node["burst"]) {
    spec.burst = Integer(burst, "burst", 1, Limit::kMaxCount);
  }
  if (const YAML::Node buckets = node["buckets"]) {
    spec.buckets = Integer(buckets, "buckets", 1, Limit::kMaxCount);
  }
  if (spec.algorithm == Algorithm::kFixedWindow &&
      ((spec.period <= Limit::kMaxPeriod && spec.period > Micros{0}) || spec.calendar)) {
    rule_limit.counter = EnvoyCounter(spec.period, spec.calendar);
    if (absl::Status s = check_limit_(*rule_limit.counter); !s.ok()) {
      Fail(node, internal::Message(s));
    }
  }
  if (spec.limit == 0 && spec.calendar) {
    // No Limit is made of a limit of 0: what Create says of its calendar, said all the same.
    LimitSpec probe = spec;
    probe.limit = 1;
    if (absl::StatusOr<Limit> limit = Limit::Create(probe); !limit.ok()) {
      Fail(node, internal::Message(limit.status()));
    }
  }
  if (spec.limit > 0) {
    absl::StatusOr<Limit> limit = Limit::Create(spec);
    if (!limit.ok()) {
      Fail(node, internal::Message(limit.status()));
    }
    if (absl::Status s = check_limit_(*limit); !s.ok()) {
      Fail(node, internal::Message(s));
    }
    rule_limit.limit = *limit;
  }
  if (const YAML::Node share = node["share"]) {
    rule_limit.share = ParseShare(share, rule_limit);
  }
  ParseAfterDecision(node, spec.limit, rule_limit);
  rule_limit.counters = counters_.Get(rule_limit.name);
  return rule_limit;
}

// The fields that act after a decision: `max_debt` (how far a settle may charge past the
// limit), `block` (a denial's penalty on the key) and `feedback` (what the partner says).
void FileParser::ParseAfterDecision(const YAML::Node& node, int64_t limit,
                                    RuleLimit& rule_limit) const {
  if (const YAML::Node max_debt = node["max_debt"]) {
    rule_limit.max_debt = Integer(max_debt, "max_debt", 0, kMaxDebt);
  }
  if (const YAML::Node block = node["block"]) {
    const absl::StatusOr<Micros> duration = ParseDuration(String(block, "'block'"));
    if (!duration.ok()) {
      Fail(block, fmt::format("block: {}", internal::Message(duration.status())));
    }
    if (*duration < kMinBlock || *duration > kMaxBlock) {
      Fail(block, fmt::format("block must be {} to {}", FormatDuration(kMinBlock),
                              FormatDuration(kMaxBlock)));
    }
    if (limit == 0) {
      Fail(block, "'block' needs a limit that can deny: requests_per_unit is 0");
    }
    rule_limit.block = BlockLimit(*duration);
    if (absl::Status s = check_limit_(*rule_limit.block); !s.ok()) {
      Fail(block, fmt::format("block: {}", internal::Message(s)));
    }
  }
  if (const YAML::Node feedback = node["feedback"]) {
    if (limit == 0) {
      Fail(feedback, "'feedback' needs a limit to pace: requests_per_unit is 0");
    }
    rule_limit.feedback = ParseFeedback(feedback, limit);
    if (absl::Status s = check_limit_(PauseLimit()); !s.ok()) {
      Fail(feedback, fmt::format("feedback: {}", internal::Message(s)));
    }
    if (rule_limit.feedback->adaptive) {
      MakeAdaptive(feedback, rule_limit);
    }
  }
}

// The limits an adaptive rate needs (RuleLimit::pacing, cut_claim), from the limit's own.
void FileParser::MakeAdaptive(const YAML::Node& node, RuleLimit& rule_limit) const {
  const Limit& limit = *rule_limit.limit;
  const int64_t period_us = limit.period().count();
  // A burst of the limit's, in microseconds of its rate: B requests at the full rate.
  const Int128 burst = internal::CeilDiv(Int128{limit.burst()} * period_us, limit.limit());
  absl::StatusOr<Limit> pacing =
      burst > Limit::kMaxCount
          ? absl::InvalidArgumentError("its burst in microseconds is too large")
          : Limit::Create({.algorithm = Algorithm::kGcra,
                           .limit = period_us,
                           .period = limit.period(),
                           .burst = static_cast<int64_t>(burst)});
  absl::Status checked = pacing.ok() ? check_limit_(*pacing) : pacing.status();
  if (!checked.ok()) {
    Fail(node, fmt::format("feedback: adaptive: {}", internal::Message(checked)));
  }
  rule_limit.pacing = *std::move(pacing);
  rule_limit.cut_claim = BlockLimit(rule_limit.feedback->adaptive->cooldown);
}

// `adaptive: {floor: 2, cut: 0.7, recover: 1m, cooldown: 1s}` of a limit of `limit`.
AdaptivePolicy FileParser::ParseAdaptive(const YAML::Node& node, int64_t limit) const {
  if (!node.IsMap()) {
    Fail(node, "'adaptive' must be a mapping: adaptive: {floor: 2, cut: 0.7, recover: 1m}");
  }
  CheckKeys(node, {"floor", "cut", "recover", "cooldown"});
  if (limit < 2) {
    Fail(node, "'adaptive' needs a limit of 2 or more to adapt");
  }
  AdaptivePolicy policy;
  if (const YAML::Node floor = node["floor"]) {
    policy.floor = Integer(floor, "adaptive: floor", 1, limit - 1);
  }
  if (const YAML::Node cut = node["cut"]) {
    double value = 0;
    if (!YAML::convert<double>::decode(cut, value) || !(value >= 0.05 && value <= 0.95)) {
      Fail(cut, "adaptive: cut must be a number from 0.05 to 0.95");
    }
    policy.cut = value;
  }
  auto duration = [&](const char* name, Micros min, Micros max, Micros fallback) {
    const YAML::Node field = node[name];
    if (!field) {
      return fallback;
    }
    const absl::StatusOr<Micros> d = ParseDuration(String(field, name));
    if (!d.ok() || *d < min || *d > max) {
      Fail(field, fmt::format("adaptive: {} must be a duration of {} to {}", name,
                              FormatDuration(min), FormatDuration(max)));
    }
    return *d;
  };
  policy.recover =
      duration("recover", std::chrono::seconds(1), std::chrono::hours(24), policy.recover);
  policy.cooldown =
      duration("cooldown", std::chrono::milliseconds(1), std::chrono::hours(1), policy.cooldown);
  return policy;
}

// `feedback: true`, or a mapping of its durations: feedback: {max_pause: 10m, pause: 2s}.
FeedbackPolicy FileParser::ParseFeedback(const YAML::Node& node, int64_t limit) const {
  FeedbackPolicy policy;
  if (node.IsScalar()) {
    if (!Bool(node, "feedback")) {
      Fail(node, "'feedback: false' is no feedback: leave it out");
    }
    return policy;
  }
  if (!node.IsMap()) {
    Fail(node, "'feedback' must be true or a mapping: feedback: {max_pause: 10m, pause: 1s}");
  }
  CheckKeys(node, {"max_pause", "pause", "adaptive"});
  auto duration = [&](const char* name, Micros min, Micros max, Micros fallback) {
    const YAML::Node field = node[name];
    if (!field) {
      return fallback;
    }
    const absl::StatusOr<Micros> d = ParseDuration(String(field, name));
    if (!d.ok()) {
      Fail(field, fmt::format("feedback: {}: {}", name, internal::Message(d.status())));
    }
    if (*d < min || *d > max) {
      Fail(field, fmt::format("feedback: {} must be {} to {}", name, FormatDuration(min),
                              FormatDuration(max)));
    }
    return *d;
  };
  policy.max_pause = duration("max_pause", kMinMaxPause, kMaxMaxPause, policy.max_pause);
  policy.pause =
      duration("pause", Micros{0}, policy.max_pause, std::min(policy.pause, policy.max_pause));
  if (const YAML::Node adaptive = node["adaptive"]) {
    policy.adaptive = ParseAdaptive(adaptive, limit);
  }
  return policy;
}

SharePolicy FileParser::ParseShare(const YAML::Node& node, const RuleLimit& rule_limit) const {
  if (!node.IsMap()) {
    Fail(node, "'share' must be a mapping: share: {max: 100, ttl: 100ms}");
  }
  CheckKeys(node, {"max", "ttl"});
  if (!rule_limit.limit) {
    Fail(node, "'share' needs a limit to lease: requests_per_unit is 0");
  }
  if (!node["max"] || !node["ttl"]) {
    Fail(node, "'share' needs both 'max' (units) and 'ttl' (a duration)");
  }
  SharePolicy policy{.max = Integer(node["max"], "share: max", 1, kMaxShare)};
  const absl::StatusOr<Micros> ttl = ParseDuration(String(node["ttl"], "share: 'ttl'"));
  if (!ttl.ok()) {
    Fail(node["ttl"], fmt::format("share: ttl: {}", internal::Message(ttl.status())));
  }
  policy.ttl = *ttl;
  if (absl::Status s = ValidateSharePolicy(*rule_limit.limit, policy); !s.ok()) {
    Fail(policy.ttl < kMinShareTtl || policy.ttl > kMaxShareTtl ? node["ttl"] : node,
         internal::Message(s));
  }
  return policy;
}

void FileParser::ParseReplaces(const YAML::Node& node, RuleLimit& rule_limit) const {
  if (const YAML::Node replaces = node["replaces"]) {
    for (const YAML::Node& item : Sequence(replaces, "replaces")) {
      CheckKeys(item, {"name"});
      std::string name = item["name"] ? String(item["name"], "'name'") : "";
      if (name.empty()) {  // Also `- name:` with nothing after it.
        Fail(item, "a 'replaces' entry needs a non-empty name");
      }
      if (name == rule_limit.name) {
        Fail(item, fmt::format("'{}' cannot replace itself", name));
      }
      rule_limit.replaces.push_back(std::move(name));
    }
  }
}

void FileParser::ParsePeriod(const YAML::Node& node, RuleLimit& rule_limit, LimitSpec& spec) const {
  const YAML::Node unit = node["unit"];
  const YAML::Node period = node["period"];
  if (unit && period) {
    Fail(period, "give either 'unit' or 'period', not both");
  }
  if (unit) {
    const std::optional<Unit> parsed = ParseUnit(String(unit, "'unit'"));
    if (!parsed) {
      Fail(unit, fmt::format("unknown unit '{}'; expected second, minute, hour, day, week, "
                             "month or year",
                             unit.Scalar()));
    }
    rule_limit.unit = *parsed;
    spec.period = UnitPeriod(*parsed);
    ParseCalendar(node, *parsed, spec);
  } else if (period) {
    if (const YAML::Node calendar = node["calendar"]; calendar && Bool(calendar, "calendar")) {
      Fail(calendar,
           "a calendar quota takes its window from 'unit' (day, week, month or year), "
           "not from 'period'");
    }
    const absl::StatusOr<Micros> parsed = ParseDuration(String(period, "'period'"));
    if (!parsed.ok()) {
      Fail(period, internal::Message(parsed.status()));
    }
    spec.period = *parsed;
  } else {
    Fail(node, "missing 'unit' (or 'period')");
  }
}

// `calendar: true` (sluice's own): the windows of `unit` are the calendar's, in `time_zone`
// (an IANA name; UTC by default), and the algorithm is a fixed_window (Limit::Create refuses
// the others, saying why).
void FileParser::ParseCalendar(const YAML::Node& node, Unit unit, LimitSpec& spec) const {
  const YAML::Node calendar = node["calendar"];
  const YAML::Node zone = node["time_zone"];
  if (!calendar || !Bool(calendar, "calendar")) {
    if (zone) {
      Fail(zone,
           "'time_zone' needs 'calendar: true': a window of a fixed period starts at the "
           "epoch, in no zone");
    }
    return;
  }
  std::optional<CalendarUnit> calendar_unit;
  switch (unit) {
    case Unit::kDay:
      calendar_unit = CalendarUnit::kDay;
      break;
    case Unit::kWeek:
      calendar_unit = CalendarUnit::kWeek;
      break;
    case Unit::kMonth:
      calendar_unit = CalendarUnit::kMonth;
      break;
    case Unit::kYear:
      calendar_unit = CalendarUnit::kYear;
      break;
    default: {
      std::string name(UnitName(unit));
      absl::AsciiStrToLower(&name);
      Fail(calendar,
           fmt::format("a calendar quota's unit is day, week, month or year, not {}", name));
    }
  }
  spec.period = Micros{0};
  spec.calendar = Calendar{*calendar_unit, zone ? String(zone, "'time_zone'") : "UTC"};
  if (zone) {
    // Refused here, at the zone's own line, rather than at the limit's.
    if (absl::StatusOr<Limit> probe = Limit::Create({.limit = 1, .calendar = spec.calendar});
        !probe.ok()) {
      Fail(zone, internal::Message(probe.status()));
    }
  }
}

std::optional<ConcurrencyLimit> FileParser::ParseConcurrency(const YAML::Node& node,
                                                             const std::string& path) {
  const YAML::Node capacity = node["concurrency"];
  const YAML::Node ttl = node["lease_ttl"];
  if (!capacity) {
    if (ttl) {
      Fail(ttl, "'lease_ttl' needs 'concurrency' on this descriptor");
    }
    return std::nullopt;
  }
  if (!no_leases_.empty()) {
    Fail(capacity,
         fmt::format("rule '{}': a concurrency limit needs leases, and {}", path, no_leases_));
  }
  ConcurrencyLimit concurrency;
  concurrency.name = path + ":concurrency";
  concurrency.capacity = Integer(capacity, "concurrency", 1, kMaxConcurrency);
  if (ttl) {
    const absl::StatusOr<Micros> parsed = ParseDuration(String(ttl, "'lease_ttl'"));
    if (!parsed.ok()) {
      Fail(ttl, fmt::format("lease_ttl: {}", internal::Message(parsed.status())));
    }
    if (*parsed <= Micros{0} || *parsed > kMaxLeaseTtl) {
      Fail(ttl, fmt::format("lease_ttl must be more than 0 and at most {}",
                            FormatDuration(kMaxLeaseTtl)));
    }
    concurrency.lease_ttl = *parsed;
  }
  concurrency.counters = counters_.Get(concurrency.name);
  return concurrency;
}

void FileParser::Soften(RuleLimit& rule_limit, int64_t percent, const YAML::Node& node) const {
  if (!rule_limit.limit) {
    return;
  }
  const Limit& limit = *rule_limit.limit;
  auto enlarge = [&](int64_t n) {
    return n + static_cast<int64_t>(static_cast<__int128>(n) * percent / 100);
  };
  LimitSpec spec = limit.spec();
  spec.limit = enlarge(limit.limit());
  spec.burst = enlarge(limit.burst());
  absl::StatusOr<Limit> softened = Limit::Create(spec);
  if (!softened.ok()) {
    Fail(node, fmt::format("with soft_percent: {}", internal::Message(softened.status())));
  }
  if (absl::Status s = check_limit_(*softened); !s.ok()) {
    Fail(node, fmt::format("with soft_percent: {}", internal::Message(s)));
  }
  rule_limit.soft_extra = softened->burst() - limit.burst();
  rule_limit.limit = *softened;
}

}  // namespace sluice::server
