#include "server/http/explain_answer.h"

#include <iterator>
#include <optional>
#include <string>

#include "fmt/compile.h"
#include "fmt/format.h"

#include "server/http/answers.h"

namespace sluice::server {
namespace {

void AppendState(std::string& out, const char* name, const std::optional<Decision>& state) {
  fmt::format_to(std::back_inserter(out), R"(,"{}":)", name);
  if (!state) {
    out += "null";
    return;
  }
  fmt::format_to(std::back_inserter(out), FMT_COMPILE(R"({{"remaining":{},"reset_after_us":{}}})"),
                 state->remaining, state->reset_after.count());
}

void AppendLimitExplanation(std::string& out, const LimitExplanation& l) {
  // The limit as the answer's "limits" write it, then what only an explanation says.
  AppendLimit(out, l.outcome, l.decided ? &l.outcome.decision : nullptr);
  out.pop_back();
  out += R"(,"source":)";
  AppendJsonString(out, l.source);
  out += R"(,"key":)";
  if (l.key.empty()) {
    out += "null";
  } else {
    AppendJsonString(out, l.key);
  }
  AppendState(out, "before", l.before);
  AppendState(out, "after", l.after);
  out += R"(,"verdict":)";
  AppendJsonString(out, l.verdict);
  out.push_back('}');
}

void AppendDescriptor(std::string& out, const DescriptorExplanation& d) {
  out += R"({"entries":[)";
  for (size_t i = 0; i < d.entries.size(); ++i) {
    out += i > 0 ? R"(,{"key":)" : R"({"key":)";
    AppendJsonString(out, d.entries[i].key);
    out += R"(,"value":)";
    AppendJsonString(out, d.entries[i].value);
    out.push_back('}');
  }
  out += R"(],"rule":)";
  if (d.rule.empty()) {
    out += "null";
  } else {
    AppendJsonString(out, d.rule);
  }
  out += R"(,"match":)";
  AppendJsonString(out, d.match);
  out += R"(,"limits":[)";
  for (size_t i = 0; i < d.limits.size(); ++i) {
    if (i > 0) {
      out.push_back(',');
    }
    AppendLimitExplanation(out, d.limits[i]);
  }
  out += "]}";
}

// `first`: the index in the request of e's first descriptor (the Envoy API explains each
// descriptor alone).
void AppendDecider(std::string& out, const Explanation& e, size_t first = 0) {
  out += R"(,"decided_by":)";
  if (!e.decided_by) {
    out += "null";
    return;
  }
  fmt::format_to(std::back_inserter(out), R"({{"descriptor":{},"limit":{},"name":)",
                 first + e.decided_by->descriptor, e.decided_by->limit);
  AppendJsonString(
      out, e.descriptors[e.decided_by->descriptor].limits[e.decided_by->limit].outcome.name);
  out.push_back('}');
}

void AppendError(std::string& out, const Explanation& e) {
  if (!e.error.empty()) {
    out += R"(,"error":)";
    AppendJsonString(out, e.error);
  }
}

}  // namespace

void AppendExplanation(std::string& out, const Explanation& e) {
  out += R"(,"explain":{"domain":)";
  if (e.domain.empty()) {
    out += "null";
  } else {
    AppendJsonString(out, e.domain);
  }
  fmt::format_to(std::back_inserter(out), R"(,"cost":{},"admitted":{})", e.cost, e.admitted);
  AppendDecider(out, e);
  AppendError(out, e);
  out += R"(,"descriptors":[)";
  for (size_t i = 0; i < e.descriptors.size(); ++i) {
    if (i > 0) {
      out.push_back(',');
    }
    AppendDescriptor(out, e.descriptors[i]);
  }
  out += "]}";
}

void AppendEnvoyExplanation(std::string& out, const std::vector<DescriptorResult>& results) {
  const Explanation* first = nullptr;
  for (const DescriptorResult& result : results) {
    first = first != nullptr ? first : result.explanation.get();
  }
  if (first == nullptr) {
    return;
  }
  // Each descriptor decided on its own: each says its cost, its answer and its decider, in the
  // order of the statuses (null where there is nothing to say: a shadow descriptor that found
  // no room in a full store).
  out += R"(,"explain":{"domain":)";
  AppendJsonString(out, first->domain);
  out += R"(,"descriptors":[)";
  for (size_t i = 0; i < results.size(); ++i) {
    out += i > 0 ? "," : "";
    const Explanation* e = results[i].explanation.get();
    if (e == nullptr || e->descriptors.size() != 1) {
      out += "null";
      continue;
    }
    AppendDescriptor(out, e->descriptors.front());
    out.pop_back();
    fmt::format_to(std::back_inserter(out), R"(,"cost":{},"admitted":{})", e->cost, e->admitted);
    AppendDecider(out, *e, i);
    AppendError(out, *e);
    out.push_back('}');
  }
  out += "]}";
}

}  // namespace sluice::server
