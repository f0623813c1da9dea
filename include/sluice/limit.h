#pragma once

// Limit: one rate limit (an algorithm and its parameters), validated once at configuration time
// so that every decision made with it is exact in 128-bit integer arithmetic.
//
// Limit is a small immutable value: copy it freely. Thread-compatible.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "sluice/clock.h"

namespace sluice {

enum class Algorithm : uint8_t {
  kFixedWindow,
  kSlidingLog,
  kSlidingWindow,
  kSlidingBuckets,
  kTokenBucket,
  kGcra,
  kLeakyBucket,
};

// "fixed_window", "sliding_log", ... as in the spec, the CLI and the config files.
std::string_view AlgorithmName(Algorithm algorithm);
// The inverse of AlgorithmName; InvalidArgument naming the text and the valid names otherwise.
absl::StatusOr<Algorithm> ParseAlgorithm(std::string_view name);

// Whether the algorithm uses a burst (capacity) B: token_bucket, gcra, leaky_bucket.
bool UsesBurst(Algorithm algorithm);

// The windows of a calendar quota ("10,000 a month, from midnight in Berlin on the 1st"):
// the days, ISO weeks (Monday first), months or years of an IANA time zone. A day lasts 23
// or 25 hours across a change to or from summer time, a month 28 to 31 days.
enum class CalendarUnit : uint8_t { kDay, kWeek, kMonth, kYear };

// "day", "week", "month", "year", and back (nullopt for another name).
std::string_view CalendarUnitName(CalendarUnit unit);
std::optional<CalendarUnit> ParseCalendarUnit(std::string_view name);
// "1d", "1w", "1mo", "1y": the period an ad hoc request names a calendar quota's unit by, and
// back (nullopt for another period).
std::string_view CalendarPeriodName(CalendarUnit unit);
std::optional<CalendarUnit> ParseCalendarPeriod(std::string_view period);
// Its nominal length, as Envoy's units count them (a day of 24 h, a month of 30 days, a year
// of 365), for what needs one figure (a RateLimit-Policy's window); decisions use the real one.
Micros CalendarNominalPeriod(CalendarUnit unit);

struct Calendar {
  CalendarUnit unit = CalendarUnit::kDay;
  std::string time_zone = "UTC";  // An IANA name from the system's tzdata.
};

// What a Limit is made from. Options that an algorithm does not use (burst for fixed_window,
// buckets for anything but sliding_buckets) are ignored, so one spec can be tried under
// several algorithms. Every member has a default initializer, here and in every options struct
// of these headers, so that the designated-initializer style (LimitSpec{.limit = 10, .period =
// 1s}) leaves members out without a -Wmissing-field-initializers warning (GCC's -Wextra).
struct LimitSpec {
  Algorithm algorithm = Algorithm::kFixedWindow;
  int64_t limit = 0;  // N: units allowed per period.
  Micros period{0};   // P.
  // B: capacity; defaults to `limit`.
  std::optional<int64_t> burst = std::nullopt;
  // K: sub-windows of sliding_buckets; defaults to 60.
  std::optional<int64_t> buckets = std::nullopt;
  // fixed_window only: its windows are the calendar's, and `period` must be 0 (it is then
  // CalendarPeriod(unit), the longest such window). Other algorithms refill or trail each
  // request by a fixed period, which the calendar has not (docs/algorithms.md).
  std::optional<Calendar> calendar = std::nullopt;
};

// An upper bound on a window's length in any zone, for what keeps state at most a period
// (retirement, horizons): 2 days, 8 days, 32 days, 367 days.
Micros CalendarPeriod(CalendarUnit unit);

class Limit {
 public:
  // The largest limit or burst accepted: 10^15, exact in every backend (Redis Lua numbers are
  // doubles, exact below 2^53), and far from overflowing the 128-bit intermediates.
  static constexpr int64_t kMaxCount = 1'000'000'000'000'000;
  // The longest period accepted: 100 years of 365 days.
  static constexpr Micros kMaxPeriod{100LL * 365 * 86'400'000'000};
  static constexpr int64_t kDefaultBuckets = 60;

  // Validates `spec`. InvalidArgument, naming the parameter, when: limit, period, burst or
  // buckets is zero or negative, or above its maximum; buckets does not divide the period; a
  // calendar is given to an algorithm other than fixed_window, with a period, or in a time
  // zone the system does not know (named).
  static absl::StatusOr<Limit> Create(const LimitSpec& spec);

  Algorithm algorithm() const { return algorithm_; }
  int64_t limit() const { return limit_; }      // N
  Micros period() const { return period_; }     // P
  int64_t burst() const { return burst_; }      // B; equals N for algorithms without a burst.
  int64_t buckets() const { return buckets_; }  // K; 1 for algorithms other than sliding_buckets.
  // A calendar quota's unit and zone; nullopt for windows of the fixed period P from the epoch.
  std::optional<CalendarUnit> calendar() const { return calendar_; }
  const absl::TimeZone& time_zone() const { return zone_; }  // UTC without a calendar.
  // A hash of the zone's name, 0 without a calendar: for hashes of limits, which must tell
  // apart quotas that differ only by their zone.
  uint64_t zone_hash() const { return zone_hash_; }

  // The rate N/P in lowest terms: N and P divided by gcd(N, P). The bucket algorithms compute
  // in these units, which changes none of their figures (every formula is homogeneous in N
  // and P) and keeps their state within 64 bits for ordinary limits: 10^9 per second is 1000
  // per millisecond, whose TAT x 1000 fits 64 bits until the year 2262.
  int64_t rate_units() const { return rate_units_; }
  int64_t rate_period_us() const { return rate_period_us_; }

  // The spec this limit was made from, with burst and buckets as Create set them: change a
  // field and Create again to make a limit like it (a calendar quota stays one).
  LimitSpec spec() const;

  // "gcra 10/1s burst 20", "fixed_window 10000/month Europe/Berlin", for messages and plots.
  std::string ToString() const;
  // "1h", or a calendar quota's "month Europe/Berlin": what its period is called.
  std::string PeriodName() const;

  friend bool operator==(const Limit& a, const Limit& b) {
    return a.algorithm_ == b.algorithm_ && a.limit_ == b.limit_ && a.period_ == b.period_ &&
           a.burst_ == b.burst_ && a.buckets_ == b.buckets_ && a.calendar_ == b.calendar_ &&
           a.zone_ == b.zone_;
  }
  template <typename H>
  friend H AbslHashValue(H h, const Limit& l) {
    return H::combine(std::move(h), l.algorithm_, l.limit_, l.period_.count(), l.burst_, l.buckets_,
                      l.calendar_, l.zone_hash_);
  }

 private:
  Limit(Algorithm algorithm, int64_t limit, Micros period, int64_t burst, int64_t buckets,
        std::optional<CalendarUnit> calendar = std::nullopt,
        absl::TimeZone zone = absl::UTCTimeZone());

  Algorithm algorithm_;
  int64_t limit_;
  Micros period_;
  int64_t burst_;
  int64_t buckets_;
  int64_t rate_units_;      // Derived: limit_ / gcd(limit_, period_).
  int64_t rate_period_us_;  // Derived: period_ / gcd(limit_, period_).
  std::optional<CalendarUnit> calendar_;
  absl::TimeZone zone_;
  uint64_t zone_hash_;
};

}  // namespace sluice
