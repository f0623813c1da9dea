#pragma once

// `sluice simulate`: replays a trace through one or more limits and writes the spec's CSV.

#include <istream>
#include <ostream>
#include <vector>

#include "absl/status/status.h"

#include "sluice/decision.h"
#include "sluice/limit.h"
#include "tools/trace.h"

namespace sluice::tools {

struct SimulatedRow {
  TraceRow request;
  Decision decision;
};

// One limit's run over the trace: a lane of `sluice simulate --compare`.
struct Lane {
  Limit limit;
  std::vector<SimulatedRow> rows;  // Filled only when Simulate is asked to keep them.
};

enum class KeepRows { kNo, kYes };

// Reads the trace from `in` and decides each row under every lane's limit (each key with its
// own state, a fresh one per lane), writing a CSV row per decision to `csv` as it goes. With
// one lane the CSV is exactly the spec's; with several, each row starts with an `algorithm`
// column, and the lanes' rows for one trace row follow each other.
// On a bad trace row, returns its error (naming the line) having written only the rows
// before it.
absl::Status Simulate(std::istream& in, std::ostream& csv, std::vector<Lane>& lanes, KeepRows keep);

}  // namespace sluice::tools
