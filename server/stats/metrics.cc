#include "server/stats/metrics.h"

#include <algorithm>
#include <iterator>
#include <tuple>

#include "fmt/format.h"
#include "sluice_build/version.h"

#include "src/core/utf8.h"

namespace sluice::server {
namespace {

// Prometheus label values escape backslash, double quote and newline, and must be UTF-8: a
// key a caller sent (--top-metrics) may hold any bytes, and one bad byte would make a scraper
// refuse the whole page. Other control bytes and what is not well-formed UTF-8 become U+FFFD.
std::string LabelValue(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
      ++i;
    } else if (c == '\n') {
      out += "\\n";
      ++i;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += "\xef\xbf\xbd";
      ++i;
    } else if (const size_t length = internal::Utf8SequenceAt(text, i); length > 0) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out += "\xef\xbf\xbd";
      ++i;
    }
  }
  return out;
}

// Prometheus's convention for what is running: a gauge of 1 whose labels say it.
std::string BuildInfo() {
  return fmt::format(
      "# HELP sluice_build_info The version of sluiced running.\n"
      "# TYPE sluice_build_info gauge\n"
      "sluice_build_info{{version=\"{}\",revision=\"{}\"}} 1\n",
      LabelValue(build::kVersion), LabelValue(build::kGitDescribe));
}

}  // namespace

void LatencyHistogram::Record(Micros latency) {
  const int64_t us = latency.count();
  const auto* bucket = std::lower_bound(kBucketsUs.begin(), kBucketsUs.end(), us);
  buckets_[static_cast<size_t>(bucket - kBucketsUs.begin())].fetch_add(1,
                                                                       std::memory_order_relaxed);
  sum_us_.fetch_add(static_cast<uint64_t>(std::max<int64_t>(us, 0)), std::memory_order_relaxed);
}

std::array<uint64_t, LatencyHistogram::kBucketsUs.size() + 1> LatencyHistogram::Counts() const {
  std::array<uint64_t, kBucketsUs.size() + 1> counts{};
  for (size_t i = 0; i < counts.size(); ++i) {
    counts[i] = buckets_[i].load(std::memory_order_relaxed);
  }
  return counts;
}

void LatencyHistogram::Append(std::string& out, std::string_view name,
                              std::string_view help) const {
  auto emit = std::back_inserter(out);
  fmt::format_to(emit, "# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  const auto counts = Counts();
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    if (i < kBucketsUs.size()) {
      fmt::format_to(emit, "{}_bucket{{le=\"{}\"}} {}\n", name,
                     static_cast<double>(kBucketsUs[i]) / 1e6, cumulative);
    } else {
      fmt::format_to(emit, "{}_bucket{{le=\"+Inf\"}} {}\n", name, cumulative);
    }
  }
  fmt::format_to(emit, "{}_sum {}\n{}_count {}\n", name,
                 static_cast<double>(sum_us_.load(std::memory_order_relaxed)) / 1e6, name,
                 cumulative);
}

void Metrics::CountDomainNotFound(std::string_view domain, uint64_t descriptors) {
  internal::MutexLock lock(unknown_domains_mutex_);
  if (auto it = unknown_domains_.find(absl::string_view(domain.data(), domain.size()));
      it != unknown_domains_.end()) {
    it->second += descriptors;
  } else if (unknown_domains_.size() < kMaxUnknownDomains) {
    unknown_domains_.emplace(std::string(domain), descriptors);
  }
}

std::vector<std::pair<std::string, uint64_t>> Metrics::DomainsNotFound() const {
  internal::MutexLock lock(unknown_domains_mutex_);
  return {unknown_domains_.begin(), unknown_domains_.end()};
}

std::string Metrics::Render(std::string_view extra) const {
  std::string out;
  auto emit = std::back_inserter(out);
  AppendRuleFamilies(out);
  auto counter = [&](const char* name, const char* help, const std::atomic<uint64_t>& value) {
    fmt::format_to(emit, "# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name,
                   value.load(std::memory_order_relaxed));
  };
  counter("sluice_store_errors_total", "Decisions the store failed to make.", store_errors_);
  counter("sluice_config_reloads_total", "Rule files reloaded successfully.", reloads_);
  counter("sluice_config_reload_failures_total",
          "Reloads refused because the new rules were broken (the last good rules stay).",
          reload_failures_);
  counter("sluice_bad_requests_total", "Requests refused as malformed (HTTP 400).", bad_requests_);
  counter("sluice_global_shadow_mode_total",
          "Envoy answers over the limit made OK by the global shadow mode.", global_shadow_mode_);
  counter("sluice_caller_limits_refused_total",
          "Requests refused: callers had 1,024 limits in use.", caller_limits_refused_);
  counter("sluice_unknown_domain_total",
          "Requests to a domain no rule knows (admitted; the log says which at debug level).",
          unknown_domain_);
  counter("sluice_settles_total", "Receipts settled (POST /v1/settle).", settles_);
  counter("sluice_settles_refused_total",
          "Settles refused for their receipt: forged, changed, expired, settled already or "
          "malformed.",
          settles_refused_);
  counter("sluice_resets_total", "Resets made (POST /v1/reset).", resets_);
  counter("sluice_feedback_total", "Partners' answers told (POST /v1/feedback).", feedback_);
  counter("sluice_feedback_ignored_total",
          "Parts of partners' answers ignored or bounded (each named in its answer's notes).",
          feedback_notes_);
  counter("sluice_admin_refused_total",
          "Requests to admin endpoints without the right token (401, 403).", admin_refused_);
  counter("sluice_envoy_service_errors_total",
          "Envoy requests refused before a decision: no domain, no descriptors, no rules loaded.",
          service_errors_);
  out += BuildInfo();

  latency_.Append(out, "sluice_decision_latency_seconds",
                  "Time to decide a request, from parsed to answered.");
  grpc_calls_.Append(out, "sluice_grpc_call_seconds",
                     "Envoy's ShouldRateLimit over gRPC, from arrival to answer.");
  out.append(extra);
  return out;
}

// One family per rule counter, a series per rule limit.
void Metrics::AppendRuleFamilies(std::string& out) const {
  auto emit = std::back_inserter(out);
  struct Family {
    const char* name;
    const char* help;
    std::atomic<uint64_t> RuleCounters::*member;
  };
  static constexpr std::array<Family, 18> kFamilies = {{
      {"sluice_rule_checks_total", "Requests a rule limit applied to.", &RuleCounters::checks},
      {"sluice_rule_admitted_total", "Requests admitted where the rule limit applied.",
       &RuleCounters::admitted},
      {"sluice_rule_denied_total", "Requests this rule limit denied.", &RuleCounters::denied},
      {"sluice_rule_near_limit_total",
       "Requests admitted past the near-limit ratio of the rule limit.", &RuleCounters::near_limit},
      {"sluice_rule_shadow_denied_total",
       "Requests a shadow-mode limit would have denied (admitted).", &RuleCounters::shadow_denied},
      {"sluice_rule_over_soft_total", "Requests admitted past the limit by soft mode.",
       &RuleCounters::over_soft},
      {"sluice_rule_borrowed_total", "Requests admitted over the limit by an elastic pool.",
       &RuleCounters::borrowed},
      {"sluice_rule_blocked_total", "Requests denied by a block running on their key.",
       &RuleCounters::blocked},
      {"sluice_rule_paused_total", "Requests denied by a pause their partner asked for.",
       &RuleCounters::paused},
      {"sluice_rule_partner_pauses_total",
       "Pauses a partner's answer started or lengthened (POST /v1/feedback).",
       &RuleCounters::partner_pauses},
      {"sluice_rule_partner_lowered_total",
       "Partners' answers that brought the limit's remaining down to theirs.",
       &RuleCounters::partner_lowered},
      {"sluice_rule_partner_cuts_total", "Adaptive rates a partner's 429 cut.",
       &RuleCounters::partner_cuts},
      {"sluice_rule_paced_total", "Requests an adaptive rate below the limit denied.",
       &RuleCounters::paced},
      {"sluice_rule_hits_total", "Hits (request costs) counted against the rule limit.",
       &RuleCounters::total_hits},
      {"sluice_rule_over_limit_hits_total", "Hits past the rule limit.",
       &RuleCounters::over_limit_hits},
      {"sluice_rule_near_limit_hits_total",
       "Hits past the near-limit ratio of the rule limit, not past the limit.",
       &RuleCounters::near_limit_hits},
      {"sluice_rule_within_limit_hits_total", "Hits of requests within the rule limit.",
       &RuleCounters::within_limit_hits},
      {"sluice_rule_shadow_mode_hits_total", "Hits past a shadow-mode limit (admitted).",
       &RuleCounters::shadow_mode_hits},
  }};
  const auto rules = rules_.All();
  for (const Family& family : kFamilies) {
    fmt::format_to(emit, "# HELP {} {}\n# TYPE {} counter\n", family.name, family.help,
                   family.name);
    for (const auto& [name, counters] : rules) {
      fmt::format_to(emit, "{}{{rule=\"{}\"}} {}\n", family.name, LabelValue(name),
                     (counters->*family.member).load(std::memory_order_relaxed));
    }
  }
}

std::string Metrics::RenderTop(size_t n, Timestamp now,
                               const std::function<std::string(std::string_view)>& show) const {
  std::string out;
  auto emit = std::back_inserter(out);
  for (const auto& [by, name, help] :
       {std::tuple{
            TopBy::kDenied, "sluice_top_denied",
            "Requests a rule limit denied a key of its top offenders, over the last minutes."},
        std::tuple{TopBy::kHits, "sluice_top_hits",
                   "Hits of a key of a rule limit's top offenders, over the last minutes."}}) {
    fmt::format_to(emit, "# HELP {} {}\n# TYPE {} gauge\n", name, help, name);
    for (const RuleTop& top : top_.Top({}, by, n, now)) {
      for (const RuleTop::Key& key : top.keys) {
        fmt::format_to(emit, "{}{{rule=\"{}\",key=\"{}\"}} {}\n", name, LabelValue(top.rule),
                       LabelValue(show(key.key)), key.count);
      }
    }
  }
  return out;
}

}  // namespace sluice::server
