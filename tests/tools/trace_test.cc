#include "tools/trace.h"

#include <sstream>

#include "gtest/gtest.h"

namespace sluice::tools {
namespace {

// Reads every row of `text`; returns the error message of the first bad one, or "".
std::string ReadAll(const std::string& text, std::vector<TraceRow>* rows = nullptr) {
  std::istringstream in(text);
  TraceReader reader(in);
  while (true) {
    absl::StatusOr<std::optional<TraceRow>> row = reader.Next();
    if (!row.ok()) {
      return std::string(row.status().message());
    }
    if (!row->has_value()) {
      return "";
    }
    if (rows != nullptr) {
      rows->push_back(**row);
    }
  }
}

TEST(TraceTest, KeyAndCostAreOptionalAndColumnsMayComeInAnyOrder) {
  std::vector<TraceRow> rows;
  EXPECT_EQ(ReadAll("time_us\n5\n7\r\n\n9\n", &rows), "");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].time_us, 7);
  EXPECT_EQ(rows[1].key, "-");
  EXPECT_EQ(rows[1].cost, 1);

  rows.clear();
  EXPECT_EQ(ReadAll("cost,time_us,key\n3,10,bob\n", &rows), "");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].cost, 3);
  EXPECT_EQ(rows[0].time_us, 10);
  EXPECT_EQ(rows[0].key, "bob");
}

TEST(TraceTest, ErrorsNameTheLine) {
  EXPECT_EQ(ReadAll(""), "line 1: the trace is empty; expected a header such as time_us,key,cost");
  EXPECT_EQ(ReadAll("time,key\n"),
            "line 1: unknown column 'time' in the header; expected "
            "time_us, key and cost");
  EXPECT_EQ(ReadAll("key,cost\n"), "line 1: the header has no time_us column");
  EXPECT_EQ(ReadAll("time_us,time_us\n"), "line 1: column 'time_us' appears twice");
  EXPECT_EQ(ReadAll("time_us,key,cost\n1,a,1\n2,a\n"), "line 3: expected 3 fields, found 2");
  EXPECT_EQ(ReadAll("time_us,key,cost\n1,a,1\n1x,a,1\n"), "line 3: time_us '1x' is not an integer");
  EXPECT_EQ(ReadAll("time_us,key,cost\n1,a,\n"), "line 2: cost '' is not an integer");
  EXPECT_EQ(ReadAll("time_us,key,cost\n1,a,-2\n"), "line 2: cost -2 is negative");
  EXPECT_EQ(ReadAll("time_us,key,cost\n5,a,1\n\n4,b,1\n"),
            "line 4: time_us 4 goes back in time (the row before has 5)");
  EXPECT_EQ(ReadAll("time_us\n99999999999999999999\n"),
            "line 2: time_us '99999999999999999999' is not an integer");
}

}  // namespace
}  // namespace sluice::tools
