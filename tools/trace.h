#pragma once

// The trace format of `sluice simulate` (docs/simulate.md): CSV with a header line naming the
// columns time_us, key and cost, in any order; key and cost may be omitted (defaults "-" and
// 1). TraceReader reads it one row at a time so that a trace of any length streams through.

#include <cstdint>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace sluice::tools {

struct TraceRow {
  int64_t time_us = 0;
  std::string key = "-";
  int64_t cost = 1;
};

// The comma-separated fields of `line`, as views into it ("a,,b" has three).
std::vector<std::string_view> SplitCommas(std::string_view line);

class TraceReader {
 public:
  // `in` must outlive the reader.
  explicit TraceReader(std::istream& in) : in_(in) {}

  // The next row; std::nullopt at the end of the trace. InvalidArgument naming the line
  // ("line 7: ...") for a missing or malformed header, a wrong number of fields, a malformed
  // number, a negative cost or a time earlier than the row before. After an error the reader
  // must not be used again.
  absl::StatusOr<std::optional<TraceRow>> Next();

  // Reads and checks the header line, if Next has not yet; errors as Next's.
  absl::Status ReadHeader();

 private:
  std::istream& in_;
  int line_ = 0;
  bool header_read_ = false;
  int columns_ = 0;
  int time_column_ = -1;
  int key_column_ = -1;
  int cost_column_ = -1;
  std::optional<int64_t> previous_time_;
};

}  // namespace sluice::tools
