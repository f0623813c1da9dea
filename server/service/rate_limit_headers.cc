#include "server/service/rate_limit_headers.h"

#include <algorithm>
#include <chrono>
#include <iterator>

#include "absl/strings/escaping.h"
#include "fmt/compile.h"
#include "fmt/format.h"

#include "sluice/duration.h"

namespace sluice::server {
namespace {

constexpr int64_t kMicrosPerSecond = 1'000'000;
// The largest structured-field Integer (RFC 9651 3.3.1: at most 15 digits); Limit accepts up
// to 10^15, one more.
constexpr int64_t kMaxSfInteger = 999'999'999'999'999;

int64_t SfInteger(int64_t value) { return std::clamp<int64_t>(value, 0, kMaxSfInteger); }

// A rate limit's quota and window: its capacity (burst, or limit; in soft mode the nominal
// share of it) and the time its rate takes to refill that much, at least a second.
void SetQuota(const Limit& limit, int64_t nominal, HeaderQuota& quota) {
  using Wide = __int128;
  const int64_t capacity =
      nominal == limit.limit()
          ? limit.burst()
          : static_cast<int64_t>(Wide{limit.burst()} * nominal / limit.limit());
  quota.quota = SfInteger(capacity);
  if (limit.calendar()) {  // A calendar quota: its unit's nominal length (a month of 30 days).
    quota.window = CeilSeconds(CalendarNominalPeriod(*limit.calendar()));
    return;
  }
  if (nominal <= 0) {
    quota.window = std::max<int64_t>(1, CeilSeconds(limit.period()));
    return;
  }
  const Wide micros = Wide{limit.period().count()} * capacity / nominal;
  const Wide seconds = (micros + kMicrosPerSecond - 1) / kMicrosPerSecond;
  quota.window = static_cast<int64_t>(std::clamp<Wide>(seconds, 1, kMaxSfInteger));
}

// (Appended whole: fmt through a string's back_inserter grows it a character at a time.)
void AppendInteger(std::string& out, std::string_view key, int64_t value) {
  const fmt::format_int digits(SfInteger(value));
  out.push_back(';');
  out.append(key);
  out.push_back('=');
  out.append(digits.data(), digits.size());
}

void AppendPartition(std::string& out, std::string_view partition) {
  if (!partition.empty()) {
    out += ";pk=:";
    out += absl::Base64Escape(absl::string_view(partition.data(), partition.size()));
    out.push_back(':');
  }
}

// RateLimit-Policy of the current draft: every limit once (by name and partition).
std::string IetfPolicy(std::span<const HeaderQuota> quotas) {
  std::string out;
  out.reserve(48 * quotas.size());
  for (size_t i = 0; i < quotas.size(); ++i) {
    const HeaderQuota& q = quotas[i];
    const auto same = [&](const HeaderQuota& o) {  // A limit told twice (two descriptors).
      return o.name == q.name && o.partition == q.partition && o.quota == q.quota &&
             o.window == q.window && o.concurrent == q.concurrent;
    };
    if (std::any_of(quotas.begin(), quotas.begin() + static_cast<ptrdiff_t>(i), same)) {
      continue;
    }
    if (!out.empty()) {
      out += ", ";
    }
    AppendSfString(out, q.name);
    AppendInteger(out, "q", q.quota);
    if (q.concurrent) {
      out += R"(;qu="concurrent-requests")";
    }
    if (q.window > 0) {
      AppendInteger(out, "w", q.window);
    }
    AppendPartition(out, q.partition);
  }
  return out;
}

// RateLimit of the current draft: the closest limit's remaining and reset (none when no
// wait lets the request pass).
std::string IetfRateLimit(const HeaderQuota& q) {
  std::string out;
  out.reserve(q.name.size() + 40);
  AppendSfString(out, q.name);
  AppendInteger(out, "r", q.never ? 0 : q.remaining);
  if (!q.never) {
    AppendInteger(out, "t", CeilSeconds(q.reset));
  }
  AppendPartition(out, q.partition);
  return out;
}

// draft-06's RateLimit-Policy: `10;w=1, 1000;w=86400`, unnamed.
std::string Draft06Policy(std::span<const HeaderQuota> quotas) {
  std::string out;
  for (const HeaderQuota& q : quotas) {
    fmt::format_to(std::back_inserter(out), FMT_COMPILE("{}{}"), out.empty() ? "" : ", ", q.quota);
    if (q.window > 0) {
      AppendInteger(out, "w", q.window);
    }
  }
  return out;
}

}  // namespace

std::string_view HeaderFormatName(HeaderFormat format) {
  switch (format) {
    case HeaderFormat::kDraftIetf:
      return "draft-ietf";
    case HeaderFormat::kDraft06:
      return "draft-06";
    case HeaderFormat::kXRateLimit:
      return "x-ratelimit";
  }
  return "draft-ietf";
}

std::optional<HeaderFormat> ParseHeaderFormat(std::string_view name) {
  for (HeaderFormat f :
       {HeaderFormat::kDraftIetf, HeaderFormat::kDraft06, HeaderFormat::kXRateLimit}) {
    if (name == HeaderFormatName(f)) {
      return f;
    }
  }
  return std::nullopt;
}

void AppendSfString(std::string& out, std::string_view text) {
  constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  size_t plain = 0;  // The start of the run of characters that go as they are.
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const auto byte = static_cast<unsigned char>(c);
    const bool escaped = c == '"' || c == '\\';
    if (!escaped && byte >= 0x20 && byte <= 0x7E && c != '%') {
      continue;
    }
    out.append(text.substr(plain, i - plain));
    plain = i + 1;
    if (escaped) {
      out.push_back('\\');
      out.push_back(c);
    } else {
      const char encoded[] = {'%', kHex[byte >> 4], kHex[byte & 0xF]};
      out.append(encoded, sizeof encoded);
    }
  }
  out.append(text.substr(plain));
  out.push_back('"');
}

std::optional<HeaderQuota> QuotaOf(const LimitOutcome& outcome) {
  if (outcome.unlimited || outcome.mode == Mode::kShadow) {
    return std::nullopt;
  }
  HeaderQuota q{.name = outcome.name, .partition = outcome.partition};
  if (outcome.concurrency > 0) {
    q.quota = SfInteger(outcome.concurrency);
    q.concurrent = true;
  } else if (outcome.limit) {
    SetQuota(*outcome.limit, outcome.nominal, q);
  }  // Else requests_per_unit: 0, quota 0.
  const Decision& d = outcome.decision;
  q.remaining = std::clamp<int64_t>(d.remaining, 0, q.quota);
  q.reset = d.reset_after;
  q.denies = !d.allowed && !outcome.borrowed;
  q.never = q.denies && (d.never_allowed() || q.quota == 0);
  q.candidate = !outcome.borrowed;
  return q;
}

size_t ClosestQuota(std::span<const HeaderQuota> quotas) {
  size_t closest = quotas.size();
  auto rank = [](const HeaderQuota& q) { return q.never ? 2 : q.denies ? 1 : 0; };
  for (size_t i = 0; i < quotas.size(); ++i) {
    const HeaderQuota& q = quotas[i];
    if (!q.candidate) {
      continue;
    }
    if (closest == quotas.size() || rank(q) > rank(quotas[closest]) ||
        (rank(q) == rank(quotas[closest]) && q.remaining < quotas[closest].remaining)) {
      closest = i;
    }
  }
  return closest;
}

void AddRateLimitHeaders(std::span<const HeaderQuota> quotas, size_t closest,
                         const HeaderOptions& options, Timestamp now, AddHeader add) {
  if (closest >= quotas.size()) {
    return;
  }
  const HeaderQuota& c = quotas[closest];
  const int64_t remaining = c.never ? 0 : c.remaining;
  switch (options.format) {
    case HeaderFormat::kDraftIetf:
      add("RateLimit-Policy", IetfPolicy(quotas));
      add("RateLimit", IetfRateLimit(c));
      return;
    case HeaderFormat::kDraft06:
      add(options.limit_name, std::to_string(c.quota));
      add(options.remaining_name, std::to_string(remaining));
      if (!c.never) {
        add(options.reset_name, std::to_string(CeilSeconds(c.reset)));
      }
      add("RateLimit-Policy", Draft06Policy(quotas));
      return;
    case HeaderFormat::kXRateLimit: {
      add("X-RateLimit-Limit", std::to_string(c.quota));
      add("X-RateLimit-Remaining", std::to_string(remaining));
      if (!c.never) {  // Nothing is used up by a request no quota can hold.
        add("X-RateLimit-Used", std::to_string(c.quota - remaining));
        const Micros since_epoch = now.time_since_epoch() + c.reset;
        add("X-RateLimit-Reset", std::to_string(CeilSeconds(since_epoch)));
      }
      return;
    }
  }
}

}  // namespace sluice::server
