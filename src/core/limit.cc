#include "sluice/limit.h"

#include <array>
#include <functional>
#include <limits>
#include <numeric>
#include <utility>

#include "fmt/format.h"

#include "sluice/duration.h"
#include "src/core/calendar.h"

namespace sluice {
namespace {

constexpr std::array<std::pair<Algorithm, std::string_view>, 7> kNames{{
    {Algorithm::kFixedWindow, "fixed_window"},
    {Algorithm::kSlidingLog, "sliding_log"},
    {Algorithm::kSlidingWindow, "sliding_window"},
    {Algorithm::kSlidingBuckets, "sliding_buckets"},
    {Algorithm::kTokenBucket, "token_bucket"},
    {Algorithm::kGcra, "gcra"},
    {Algorithm::kLeakyBucket, "leaky_bucket"},
}};

absl::Status CheckCount(std::string_view what, int64_t value) {
  if (value <= 0 || value > Limit::kMaxCount) {
    return absl::InvalidArgumentError(
        fmt::format("{} must be between 1 and {}, not {}", what, Limit::kMaxCount, value));
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view AlgorithmName(Algorithm algorithm) {
  for (const auto& [a, name] : kNames) {
    if (a == algorithm) {
      return name;
    }
  }
  return "unknown";
}

absl::StatusOr<Algorithm> ParseAlgorithm(std::string_view name) {
  for (const auto& [a, n] : kNames) {
    if (n == name) {
      return a;
    }
  }
  std::string names;
  for (const auto& [a, n] : kNames) {
    fmt::format_to(std::back_inserter(names), "{}{}", names.empty() ? "" : ", ", n);
  }
  return absl::InvalidArgumentError(
      fmt::format("unknown algorithm '{}'; expected one of {}", name, names));
}

bool UsesBurst(Algorithm algorithm) {
  return algorithm == Algorithm::kTokenBucket || algorithm == Algorithm::kGcra ||
         algorithm == Algorithm::kLeakyBucket;
}

Micros CalendarPeriod(CalendarUnit unit) {
  constexpr int64_t kDayUs = 86'400'000'000;
  switch (unit) {
    case CalendarUnit::kDay:
      return Micros{2 * kDayUs};
    case CalendarUnit::kWeek:
      return Micros{8 * kDayUs};
    case CalendarUnit::kMonth:
      return Micros{32 * kDayUs};
    case CalendarUnit::kYear:
      return Micros{367 * kDayUs};
  }
  return Micros{367 * kDayUs};
}

Limit::Limit(Algorithm algorithm, int64_t limit, Micros period, int64_t burst, int64_t buckets,
             std::optional<CalendarUnit> calendar, absl::TimeZone zone)
    : algorithm_(algorithm),
      limit_(limit),
      period_(period),
      burst_(burst),
      buckets_(buckets),
      rate_units_(limit / std::gcd(limit, period.count())),
      rate_period_us_(period.count() / std::gcd(limit, period.count())),
      calendar_(calendar),
      zone_(zone),
      zone_hash_(calendar ? std::hash<std::string>{}(zone.name()) : 0) {}

absl::StatusOr<Limit> Limit::Create(const LimitSpec& spec) {
  if (absl::Status s = CheckCount("limit", spec.limit); !s.ok()) {
    return s;
  }
  if (spec.calendar) {
    if (spec.algorithm != Algorithm::kFixedWindow) {
      return absl::InvalidArgumentError(fmt::format(
          "a calendar quota is a fixed_window, not a {}: the others refill or trail each "
          "request by a fixed period; put a calendar fixed_window beside it",
          AlgorithmName(spec.algorithm)));
    }
    if (spec.period != Micros{0}) {
      return absl::InvalidArgumentError(
          "a calendar quota takes its period from its unit (day, week, month or year); give no "
          "period");
    }
    absl::StatusOr<absl::TimeZone> zone = internal::LoadCalendarZone(spec.calendar->time_zone);
    if (!zone.ok()) {
      return zone.status();
    }
    const CalendarUnit unit = spec.calendar->unit;
    return Limit(spec.algorithm, spec.limit, CalendarPeriod(unit), spec.limit, 1, unit, *zone);
  }
  if (spec.period <= Micros{0} || spec.period > kMaxPeriod) {
    return absl::InvalidArgumentError(fmt::format("period must be between 1us and {}, not {}us",
                                                  FormatDuration(kMaxPeriod), spec.period.count()));
  }
  int64_t burst = spec.limit;
  if (UsesBurst(spec.algorithm)) {
    burst = spec.burst.value_or(spec.limit);
    if (absl::Status s = CheckCount("burst", burst); !s.ok()) {
      return s;
    }
  }
  int64_t buckets = 1;
  if (spec.algorithm == Algorithm::kSlidingBuckets) {
    buckets = spec.buckets.value_or(kDefaultBuckets);
    if (buckets <= 0) {
      return absl::InvalidArgumentError(fmt::format("buckets must be positive, not {}", buckets));
    }
    if (spec.period.count() % buckets != 0) {
      return absl::InvalidArgumentError(fmt::format(
          "buckets {} does not divide the period {} ({}us); choose a divisor such as 10 or 100",
          buckets, FormatDuration(spec.period), spec.period.count()));
    }
  }
  return Limit(spec.algorithm, spec.limit, spec.period, burst, buckets);
}

LimitSpec Limit::spec() const {
  LimitSpec spec{.algorithm = algorithm_,
                 .limit = limit_,
                 .period = period_,
                 .burst = burst_,
                 .buckets = buckets_};
  if (calendar_) {
    spec.period = Micros{0};
    spec.calendar = Calendar{*calendar_, zone_.name()};
  }
  return spec;
}

std::string Limit::PeriodName() const {
  if (calendar_) {
    return fmt::format("{} {}", internal::CalendarUnitName(*calendar_), zone_.name());
  }
  return FormatDuration(period_);
}

std::string Limit::ToString() const {
  std::string out = fmt::format("{} {}/{}", AlgorithmName(algorithm_), limit_, PeriodName());
  if (UsesBurst(algorithm_)) {
    fmt::format_to(std::back_inserter(out), " burst {}", burst_);
  }
  if (algorithm_ == Algorithm::kSlidingBuckets) {
    fmt::format_to(std::back_inserter(out), " buckets {}", buckets_);
  }
  return out;
}

}  // namespace sluice
