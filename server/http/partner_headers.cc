#include "server/http/partner_headers.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "fmt/format.h"

#include "sluice/duration.h"
#include "sluice/limit.h"

namespace sluice::server {
namespace {

constexpr int64_t kEpochSince = 1'000'000'000;  // A reset at least this is in epoch seconds.

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

// `s` split at each `sep` outside a quoted string (structured fields' strings may hold it).
std::vector<std::string_view> SplitOutsideQuotes(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  bool quoted = false;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && quoted) {
      ++i;
    } else if (s[i] == '"') {
      quoted = !quoted;
    } else if (s[i] == sep && !quoted) {
      parts.push_back(Trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  parts.push_back(Trim(s.substr(start)));
  return parts;
}

// One member of a structured-field list: its bare item and its parameters.
struct Member {
  std::string_view item;
  std::vector<std::pair<std::string_view, std::string_view>> params;

  std::optional<std::string_view> Param(std::string_view key) const {
    for (const auto& [k, v] : params) {
      if (k == key) {
        return v;
      }
    }
    return std::nullopt;
  }
};

Member ParseMember(std::string_view text) {
  std::vector<std::string_view> parts = SplitOutsideQuotes(text, ';');
  Member m{.item = parts.front()};
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    m.params.emplace_back(Trim(parts[i].substr(0, eq)),
                          eq == std::string_view::npos ? "?1" : Trim(parts[i].substr(eq + 1)));
  }
  return m;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A count: digits only, at most Limit::kMaxCount.
std::optional<int64_t> Count(std::string_view s) {
  if (!AllDigits(s) || s.size() > 16) {
    return std::nullopt;
  }
  const int64_t n = std::stoll(std::string(s));
  return n <= Limit::kMaxCount ? std::optional<int64_t>(n) : std::nullopt;
}

// Non-negative seconds (or another unit of `unit_us`), digits with an optional fraction,
// rounded up to the microsecond and read as at most `cap` (`*capped` then).
std::optional<Micros> Seconds(std::string_view s, int64_t unit_us, bool* capped,
                              Micros cap = kMaxPartnerTime) {
  const size_t dot = s.find('.');
  const std::string_view whole = s.substr(0, dot);
  const std::string_view fraction = dot == std::string_view::npos ? "" : s.substr(dot + 1);
  if (!AllDigits(whole) || (dot != std::string_view::npos && !AllDigits(fraction))) {
    return std::nullopt;
  }
  const int64_t cap_units = cap.count() / unit_us;
  if (whole.size() > 15 || std::stoll(std::string(whole)) > cap_units) {
    *capped = true;
    return cap;
  }
  int64_t us = std::stoll(std::string(whole)) * unit_us;
  // The fraction, to the microsecond, rounded up: a partner's 0.0001 s is a wait, not none.
  int64_t scale = unit_us;
  int64_t part = 0;
  bool rest = false;
  for (char c : fraction) {
    if (scale >= 10) {
      scale /= 10;
      part += (c - '0') * scale;
    } else if (c != '0') {
      rest = true;
    }
  }
  us += part + (rest ? 1 : 0);
  return std::min(Micros{us}, cap);
}

// An HTTP date (RFC 9110 5.6.7: IMF-fixdate, and the obsolete RFC 850 and asctime forms).
std::optional<absl::Time> HttpDate(std::string_view s) {
  if (s.empty() || !absl::ascii_isalpha(static_cast<unsigned char>(s.front())) ||
      s.substr(0, 8) == "infinite") {  // absl reads "infinite-future" as a time.
    return std::nullopt;
  }
  std::string text(s);
  // asctime pads a day below 10 with a space: "Nov  6".
  if (const size_t two = text.find("  "); two != std::string::npos) {
    text.erase(two, 1);
  }
  for (const char* format :
       {"%a, %d %b %Y %H:%M:%S GMT", "%A, %d-%b-%y %H:%M:%S GMT", "%a %b %d %H:%M:%S %Y"}) {
    absl::Time t;
    std::string error;
    if (absl::ParseTime(format, text, absl::UTCTimeZone(), &t, &error)) {
      return t;
    }
  }
  return std::nullopt;
}

// The answer in the making, with the most cautious value of each field kept.
class Reading {
 public:
  explicit Reading(Timestamp now) : now_(now) {}

  PartnerAnswer& answer() { return answer_; }
  // At most kMaxNotes notes, the last saying how many more there were: an answer of many
  // bad values is not echoed back whole.
  void Note(std::string note) {
    if (++notes_ <= kMaxNotes) {
      answer_.notes.push_back(std::move(note));
    } else {
      answer_.notes.back() = fmt::format("... and {} more notes", notes_ - kMaxNotes + 1);
    }
  }

  void RetryAfter(std::string_view name, std::string_view value, int64_t unit_us);
  // Resets: seconds from now, or epoch seconds when at least kEpochSince.
  std::optional<Micros> Reset(std::string_view name, std::string_view value);
  std::optional<int64_t> Remaining(std::string_view name, std::string_view value);
  // A remaining count and the reset it runs until (either may be missing).
  void Pair(std::optional<int64_t> remaining, std::optional<Micros> reset);
  void Policy(std::optional<int64_t> quota, std::optional<Micros> window);

 private:
  static constexpr size_t kMaxNotes = 16;
  Timestamp now_;
  PartnerAnswer answer_;
  size_t notes_ = 0;
};

void Reading::RetryAfter(std::string_view name, std::string_view value, int64_t unit_us) {
  bool capped = false;
  std::optional<Micros> wait = Seconds(value, unit_us, &capped);
  if (!wait && unit_us == 1'000'000) {
    if (const std::optional<absl::Time> date = HttpDate(value)) {
      const absl::Duration d = *date - absl::FromUnixMicros(now_.time_since_epoch().count());
      wait = d <= absl::ZeroDuration()
                 ? Micros{0}
                 : std::min(Micros{absl::ToInt64Microseconds(d)}, kMaxPartnerTime);
      capped = *wait == kMaxPartnerTime;
    }
  }
  if (!wait) {
    Note(fmt::format("{} '{}' is neither seconds nor an HTTP date: ignored", name, value));
    return;
  }
  if (capped) {
    Note(fmt::format("{} '{}' is read as {}", name, value, FormatDuration(kMaxPartnerTime)));
  }
  answer_.retry_after = std::max(answer_.retry_after.value_or(Micros{0}), *wait);
}

std::optional<Micros> Reading::Reset(std::string_view name, std::string_view value) {
  // Read first as up to 10^12 s, which epoch times are far below, then bounded.
  bool capped = false;
  std::optional<Micros> reset =
      Seconds(value, 1'000'000, &capped, std::chrono::seconds(1'000'000'000'000));
  if (!reset) {
    Note(fmt::format("{} '{}' is not seconds: ignored", name, value));
    return std::nullopt;
  }
  if (*reset >= std::chrono::seconds(kEpochSince)) {
    *reset -= now_.time_since_epoch();
  }
  capped = capped || *reset > kMaxPartnerTime;
  reset = std::clamp(*reset, Micros{0}, kMaxPartnerTime);
  if (capped) {
    Note(fmt::format("{} '{}' is read as {}", name, value, FormatDuration(kMaxPartnerTime)));
  }
  return reset;
}

std::optional<int64_t> Reading::Remaining(std::string_view name, std::string_view value) {
  std::optional<int64_t> n = Count(value);
  if (!n) {
    Note(
        fmt::format("{} '{}' is not a count from 0 to {}: ignored", name, value, Limit::kMaxCount));
  }
  return n;
}

void Reading::Pair(std::optional<int64_t> remaining, std::optional<Micros> reset) {
  if (!remaining) {
    if (reset && !answer_.remaining) {
      answer_.reset = std::max(answer_.reset.value_or(Micros{0}), *reset);
    }
    return;
  }
  // The fewest remaining wins, with its reset; of two equal, the later reset.
  if (!answer_.remaining || *remaining < *answer_.remaining) {
    answer_.remaining = remaining;
    answer_.reset = reset;
  } else if (*remaining == *answer_.remaining && reset) {
    answer_.reset = std::max(answer_.reset.value_or(Micros{0}), *reset);
  }
}

void Reading::Policy(std::optional<int64_t> quota, std::optional<Micros> window) {
  if (!quota) {
    return;
  }
  // The slowest policy: the least quota per window (quota/window compared by cross products);
  // one with a window says more than one without.
  const auto slower = [&] {
    if (!answer_.quota || (window && !answer_.window)) {
      return true;
    }
    if (!window || !answer_.window) {
      return !window && !answer_.window && *quota < *answer_.quota;
    }
    return static_cast<__int128>(*quota) * answer_.window->count() <
           static_cast<__int128>(*answer_.quota) * window->count();
  };
  if (slower()) {
    answer_.quota = quota;
    answer_.window = window;
  }
}

}  // namespace

namespace {

// The draft-06 and X-RateLimit headers' lists, paired once every header is read.
struct Separate {
  std::vector<int64_t> remaining;
  std::vector<Micros> reset;
};

// RateLimit: the IETF draft's list of `"name";r=R;t=T` (08 to 11), or draft-07's dictionary
// `limit=L, remaining=R, reset=T`.
void ReadRateLimit(Reading& reading, std::string_view name, std::string_view value) {
  std::optional<int64_t> remaining;
  std::optional<Micros> reset;
  bool dictionary = false;
  for (std::string_view text : SplitOutsideQuotes(value, ',')) {
    const Member m = ParseMember(text);
    if (const std::optional<std::string_view> r = m.Param("r")) {
      const std::optional<Micros> t =
          m.Param("t") ? reading.Reset(fmt::format("{} t", name), *m.Param("t")) : std::nullopt;
      reading.Pair(reading.Remaining(fmt::format("{} r", name), *r), t);
      continue;
    }
    const size_t eq = m.item.find('=');
    const std::string_view key = eq == std::string_view::npos ? "" : Trim(m.item.substr(0, eq));
    const std::string_view v = eq == std::string_view::npos ? "" : Trim(m.item.substr(eq + 1));
    if (key == "remaining") {
      remaining = reading.Remaining(fmt::format("{} remaining", name), v);
      dictionary = true;
    } else if (key == "reset") {
      reset = reading.Reset(fmt::format("{} reset", name), v);
      dictionary = true;
    } else if (key == "limit") {
      reading.Policy(Count(v), std::nullopt);
      dictionary = true;
    } else if (!text.empty()) {
      reading.Note(fmt::format("{} member '{}' has no r= (nor remaining=): ignored", name, text));
    }
  }
  if (dictionary) {
    reading.Pair(remaining, reset);
  }
}

// RateLimit-Policy: `"name";q=Q;w=W` (08 to 11) or `Q;w=W` (06, 07); also RateLimit-Limit's
// older `Q, Q;w=W` and X-RateLimit-Limit's `Q`.
void ReadPolicy(Reading& reading, std::string_view name, std::string_view value) {
  for (std::string_view text : SplitOutsideQuotes(value, ',')) {
    const Member m = ParseMember(text);
    const std::optional<std::string_view> q = m.Param("q");
    const std::optional<int64_t> quota = Count(q ? *q : m.item);
    if (!quota) {
      reading.Note(fmt::format("{} member '{}' has no quota: ignored", name, text));
      continue;
    }
    std::optional<Micros> window;
    if (const std::optional<std::string_view> w = m.Param("w")) {
      bool capped = false;
      window = Seconds(*w, 1'000'000, &capped);
      if (!window || *window == Micros{0} || capped) {
        reading.Note(fmt::format("{} window '{}' is not seconds above 0: ignored", name, *w));
        continue;
      }
    }
    reading.Policy(quota, window);
  }
}

// What each header sluiced reads holds, by its lower-case name: the one list of them.
enum class Field : uint8_t {
  kNone,
  kRetrySeconds,
  kRetryMillis,
  kRateLimit,
  kPolicy,
  kRemaining,
  kReset
};

Field FieldOf(std::string_view name) {
  static constexpr std::pair<std::string_view, Field> kFields[] = {
      {"retry-after", Field::kRetrySeconds},
      {"retry-after-ms", Field::kRetryMillis},
      {"ratelimit", Field::kRateLimit},
      {"ratelimit-policy", Field::kPolicy},
      {"ratelimit-limit", Field::kPolicy},
      {"x-ratelimit-limit", Field::kPolicy},
      {"x-rate-limit-limit", Field::kPolicy},
      {"ratelimit-remaining", Field::kRemaining},
      {"x-ratelimit-remaining", Field::kRemaining},
      {"x-rate-limit-remaining", Field::kRemaining},
      {"ratelimit-reset", Field::kReset},
      {"x-ratelimit-reset", Field::kReset},
      {"x-rate-limit-reset", Field::kReset},
      {"x-ratelimit-reset-after", Field::kReset},
  };
  for (const auto& [known, field] : kFields) {
    if (known == name) {
      return field;
    }
  }
  return Field::kNone;
}

// One header, by its lower-case name; headers no partner sends about limits are skipped.
void ReadHeader(Reading& reading, Separate& separate, std::string_view name,
                std::string_view value) {
  switch (FieldOf(name)) {
    case Field::kRetrySeconds:
      reading.RetryAfter(name, value, 1'000'000);
      break;
    case Field::kRetryMillis:
      reading.RetryAfter(name, value, 1'000);
      break;
    case Field::kRateLimit:
      ReadRateLimit(reading, name, value);
      break;
    case Field::kPolicy:
      ReadPolicy(reading, name, value);
      break;
    case Field::kRemaining:
      for (std::string_view v : SplitOutsideQuotes(value, ',')) {
        if (const std::optional<int64_t> n = reading.Remaining(name, v)) {
          separate.remaining.push_back(*n);
        }
      }
      break;
    case Field::kReset:
      for (std::string_view v : SplitOutsideQuotes(value, ',')) {
        if (const std::optional<Micros> t = reading.Reset(name, v)) {
          separate.reset.push_back(*t);
        }
      }
      break;
    case Field::kNone:
      break;
  }
}

// The separate headers' values paired: by position when the lists are as long, else the
// fewest remaining with the latest reset.
void PairSeparate(Reading& reading, const Separate& separate) {
  if (separate.remaining.size() == separate.reset.size()) {
    for (size_t i = 0; i < separate.remaining.size(); ++i) {
      reading.Pair(separate.remaining[i], separate.reset[i]);
    }
    return;
  }
  std::optional<int64_t> remaining;
  std::optional<Micros> reset;
  if (!separate.remaining.empty()) {
    remaining = *std::min_element(separate.remaining.begin(), separate.remaining.end());
  }
  if (!separate.reset.empty()) {
    reset = *std::max_element(separate.reset.begin(), separate.reset.end());
  }
  if (separate.remaining.size() > 1 || separate.reset.size() > 1) {
    reading.Note(
        fmt::format("{} remaining and {} resets cannot be paired: read as the fewest "
                    "remaining until the latest reset",
                    separate.remaining.size(), separate.reset.size()));
  }
  reading.Pair(remaining, reset);
}

}  // namespace

PartnerAnswer ReadPartnerAnswer(int status, std::span<const PartnerHeader> headers, Timestamp now) {
  Reading reading(now);
  reading.answer().status = status;
  Separate separate;
  if (headers.size() > kMaxPartnerHeaders) {
    reading.Note(
        fmt::format("{} headers: only the first {} are read", headers.size(), kMaxPartnerHeaders));
    headers = headers.first(kMaxPartnerHeaders);
  }
  std::vector<std::string> names;
  for (const PartnerHeader& header : headers) {
    const std::string name = absl::AsciiStrToLower(std::string(Trim(header.name)));
    names.push_back(name);
    if (header.value.size() > kMaxPartnerValueBytes) {
      reading.Note(fmt::format("{}: a value of {} bytes (above {}): ignored", name,
                               header.value.size(), kMaxPartnerValueBytes));
      continue;
    }
    ReadHeader(reading, separate, name, Trim(header.value));
  }
  PairSeparate(reading, separate);
  std::sort(names.begin(), names.end());
  for (auto at = names.begin(); at != names.end();) {
    const auto end = std::find_if(at, names.end(), [&](const std::string& n) { return n != *at; });
    if (end - at > 1 && FieldOf(*at) != Field::kNone) {
      reading.Note(
          fmt::format("{} is given {} times: the most cautious value is read", *at, end - at));
    }
    at = end;
  }
  return std::move(reading.answer());
}

}  // namespace sluice::server
