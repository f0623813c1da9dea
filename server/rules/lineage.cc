// HistoryOf, FormatHistory and ParseHistory (rules.h) and InheritLimits (parser.h): each limit
// of a freshly loaded RuleSet takes, as its
// RuleLimit::before, the figures the same limit had in the rules in force before, so that a
// reload that lowers, raises or reshapes a limit carries what its keys have used
// (docs/algorithms.md, "A change of limit") instead of handing every key a fresh budget.
//
// A limit is the same limit when its rule's path (domain and descriptor entries) and its name
// (rate_limit.name, or the path, or path[i] for an unnamed entry of `limits:`) are the same;
// a pool's limit by its domain and pool name. Renamed limits and other rules start afresh.

#include <algorithm>
#include <iterator>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "fmt/format.h"

#include "server/rules/parser.h"

namespace sluice::server {
namespace {

// Calls f(identity, limit) for every limit of `rules`: rules in the descriptor tree, then pools.
template <typename Domains, typename F>
void ForEachLimit(const Domains& domains, F f) {
  struct Walk {
    F& f;
    void Level(DescriptorLevel& level) {
      for (const auto& node : level.nodes) {
        if (node->rule) {
          for (RuleLimit& limit : node->rule->limits) {
            f(node->rule->path + '\n' + limit.name, limit);
          }
        }
        Level(node->children);
      }
    }
  };
  Walk walk{f};
  for (const auto& domain : domains) {
    walk.Level(domain->descriptors);
    for (const auto& pool : domain->pools) {
      f(domain->name + "\npool\n" + pool->name, pool->limit);
    }
  }
}

}  // namespace

LimitHistory HistoryOf(const RuleSet& rules) {
  LimitHistory history;
  ForEachLimit(rules.domains(), [&](std::string identity, const RuleLimit& limit) {
    // A limit that denies every request (requests_per_unit 0) holds no state of its own, but
    // passes on the figures before it: a change to 0 and back keeps what keys used.
    std::vector<Limit> figures;
    if (limit.limit) {
      figures.push_back(*limit.limit);
    }
    figures.insert(figures.end(), limit.before.begin(), limit.before.end());
    if (!figures.empty()) {
      history.emplace(std::move(identity), std::move(figures));
    }
  });
  return history;
}

void InheritLimits(const LimitHistory& previous, RuleSet& next) {
  if (previous.empty()) {
    return;
  }
  ForEachLimit(next.domains(), [&](const std::string& identity, RuleLimit& limit) {
    const auto found = previous.find(identity);
    if (found == previous.end()) {
      return;  // A new limit: nothing to carry.
    }
    std::vector<Limit> before;
    for (const Limit& l : found->second) {
      if ((!limit.limit || l != *limit.limit) && before.size() < kMaxBefore &&
          std::find(before.begin(), before.end(), l) == before.end()) {
        before.push_back(l);
      }
    }
    limit.before = std::move(before);
  });
}

std::string FormatHistory(const LimitHistory& history) {
  std::string out;
  for (const auto& [identity, figures] : history) {
    out += absl::CEscape(identity);
    for (const Limit& l : figures) {
      fmt::format_to(std::back_inserter(out), "\t{}:{}:{}:{}:{}", AlgorithmName(l.algorithm()),
                     l.limit(), l.calendar() ? 0 : l.period().count(), l.burst(), l.buckets());
      if (l.calendar()) {  // A calendar quota's unit and zone, as two more fields.
        fmt::format_to(std::back_inserter(out), ":{}:{}", CalendarUnitName(*l.calendar()),
                       l.time_zone().name());
      }
    }
    out += '\n';
  }
  return out;
}

absl::StatusOr<LimitHistory> ParseHistory(std::string_view text) {
  LimitHistory history;
  int line_number = 0;
  for (const absl::string_view line :
       absl::StrSplit(absl::string_view(text.data(), text.size()), '\n', absl::SkipEmpty())) {
    ++line_number;
    auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(fmt::format("line {}: {}", line_number, why));
    };
    const std::vector<absl::string_view> parts = absl::StrSplit(line, '\t');
    std::string identity;
    if (parts.size() < 2 || !absl::CUnescape(parts[0], &identity)) {
      return bad("expected an escaped identity and at least one limit");
    }
    std::vector<Limit> figures;
    for (size_t i = 1; i < parts.size(); ++i) {
      const std::vector<absl::string_view> f = absl::StrSplit(parts[i], ':');
      absl::StatusOr<Algorithm> algorithm =
          f.size() == 5 || f.size() == 7
              ? ParseAlgorithm(std::string_view(f[0].data(), f[0].size()))
              : absl::InvalidArgumentError("5 or 7 fields");
      std::optional<Calendar> calendar;
      if (f.size() == 7) {
        const std::optional<CalendarUnit> unit =
            ParseCalendarUnit(std::string_view(f[5].data(), f[5].size()));
        if (!unit) {
          return bad(fmt::format("'{}' is not a calendar unit", std::string(f[5])));
        }
        calendar = Calendar{*unit, std::string(f[6])};
      }
      int64_t n = 0;
      int64_t p = 0;
      int64_t b = 0;
      int64_t k = 0;
      if (!algorithm.ok() || !absl::SimpleAtoi(f[1], &n) || !absl::SimpleAtoi(f[2], &p) ||
          !absl::SimpleAtoi(f[3], &b) || !absl::SimpleAtoi(f[4], &k)) {
        return bad(fmt::format("'{}' is not algorithm:N:P:B:K[:unit:zone]", std::string(parts[i])));
      }
      absl::StatusOr<Limit> limit = Limit::Create({.algorithm = *algorithm,
                                                   .limit = n,
                                                   .period = Micros(p),
                                                   .burst = b,
                                                   .buckets = k,
                                                   .calendar = std::move(calendar)});
      if (!limit.ok()) {
        return bad(std::string(limit.status().message()));
      }
      figures.push_back(*limit);
    }
    history[std::move(identity)] = std::move(figures);
  }
  return history;
}

}  // namespace sluice::server
