// `sluice simulate`'s trace (tools/trace.h): CSV text read row by row and replayed through a
// limit of every algorithm, as `sluice simulate --compare` replays it. The reader must refuse
// anything malformed with an error naming its line; rows it accepts (any time and cost it lets
// through) must be decided without overflow.

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "tools/simulate.h"
#include "tools/trace.h"

namespace sluice::tools {
namespace {

std::vector<Lane> Lanes() {
  std::vector<Lane> lanes;
  for (int a = 0; a <= static_cast<int>(Algorithm::kLeakyBucket); ++a) {
    const absl::StatusOr<Limit> limit = Limit::Create({.algorithm = static_cast<Algorithm>(a),
                                                       .limit = 10,
                                                       .period = Micros{1'000'000},
                                                       .burst = 20,
                                                       .buckets = 10});
    if (limit.ok()) {
      lanes.push_back({.limit = *limit});
    }
  }
  return lanes;
}

}  // namespace
}  // namespace sluice::tools

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice::tools;
  const std::string text(reinterpret_cast<const char*>(data), size);
  {
    // The reader alone, to its end or its first error.
    std::istringstream in(text);
    TraceReader reader(in);
    while (true) {
      const absl::StatusOr<std::optional<TraceRow>> row = reader.Next();
      if (!row.ok() || !row->has_value()) {
        break;
      }
    }
  }
  std::istringstream in(text);
  std::ostringstream csv;
  static const std::vector<Lane> kLanes = Lanes();
  std::vector<Lane> lanes = kLanes;
  (void)Simulate(in, csv, lanes, KeepRows::kNo);
  return 0;
}
