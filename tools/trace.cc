#include "tools/trace.h"

#include <charconv>
#include <string_view>
#include <vector>

#include "fmt/format.h"

namespace sluice::tools {
namespace {

bool ReadLine(std::istream& in, std::string& line) {
  if (!std::getline(in, line)) {
    return false;
  }
  if (!line.empty() && line.back() == '\r') {
    line.pop_back();
  }
  return true;
}

bool ParseInt(std::string_view text, int64_t& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

}  // namespace

std::vector<std::string_view> SplitCommas(std::string_view line) {
  std::vector<std::string_view> fields;
  while (true) {
    const size_t comma = line.find(',');
    fields.push_back(line.substr(0, comma));
    if (comma == std::string_view::npos) {
      return fields;
    }
    line.remove_prefix(comma + 1);
  }
}

absl::Status TraceReader::ReadHeader() {
  if (header_read_) {
    return absl::OkStatus();
  }
  std::string line;
  if (!ReadLine(in_, line)) {
    return absl::InvalidArgumentError(
        "line 1: the trace is empty; expected a header such as time_us,key,cost");
  }
  line_ = 1;
  const std::vector<std::string_view> names = SplitCommas(line);
  columns_ = static_cast<int>(names.size());
  for (int i = 0; i < columns_; ++i) {
    const std::string_view name = names[i];
    int* column = name == "time_us" ? &time_column_
                  : name == "key"   ? &key_column_
                  : name == "cost"  ? &cost_column_
                                    : nullptr;
    if (column == nullptr) {
      return absl::InvalidArgumentError(fmt::format(
          "line 1: unknown column '{}' in the header; expected time_us, key and cost", name));
    }
    if (*column != -1) {
      return absl::InvalidArgumentError(fmt::format("line 1: column '{}' appears twice", name));
    }
    *column = i;
  }
  if (time_column_ == -1) {
    return absl::InvalidArgumentError("line 1: the header has no time_us column");
  }
  header_read_ = true;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<TraceRow>> TraceReader::Next() {
  if (absl::Status s = ReadHeader(); !s.ok()) {
    return s;
  }
  std::string line;
  do {
    if (!ReadLine(in_, line)) {
      return std::nullopt;
    }
    ++line_;
  } while (line.empty());

  const std::vector<std::string_view> fields = SplitCommas(line);
  if (static_cast<int>(fields.size()) != columns_) {
    return absl::InvalidArgumentError(
        fmt::format("line {}: expected {} fields, found {}", line_, columns_, fields.size()));
  }
  TraceRow row;
  if (!ParseInt(fields[time_column_], row.time_us)) {
    return absl::InvalidArgumentError(
        fmt::format("line {}: time_us '{}' is not an integer", line_, fields[time_column_]));
  }
  if (key_column_ != -1) {
    row.key = std::string(fields[key_column_]);
  }
  if (cost_column_ != -1) {
    if (!ParseInt(fields[cost_column_], row.cost)) {
      return absl::InvalidArgumentError(
          fmt::format("line {}: cost '{}' is not an integer", line_, fields[cost_column_]));
    }
    if (row.cost < 0) {
      return absl::InvalidArgumentError(
          fmt::format("line {}: cost {} is negative", line_, row.cost));
    }
  }
  if (previous_time_.has_value() && row.time_us < *previous_time_) {
    return absl::InvalidArgumentError(
        fmt::format("line {}: time_us {} goes back in time (the row before has {})", line_,
                    row.time_us, *previous_time_));
  }
  previous_time_ = row.time_us;
  return row;
}

}  // namespace sluice::tools
