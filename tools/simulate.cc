#include "tools/simulate.h"

#include <string>

#include "absl/container/flat_hash_map.h"
#include "fmt/format.h"

#include "sluice/algorithms.h"

namespace sluice::tools {

absl::Status Simulate(std::istream& in, std::ostream& csv, std::vector<Lane>& lanes,
                      KeepRows keep) {
  TraceReader reader(in);
  if (absl::Status s = reader.ReadHeader(); !s.ok()) {
    return s;  // Nothing written: not even our header follows a trace that has none.
  }
  const bool compare = lanes.size() > 1;
  csv << (compare ? "algorithm," : "")
      << "time_us,key,cost,allowed,remaining,reset_after_us,retry_after_us,delay_us\n";
  std::vector<absl::flat_hash_map<std::string, AnyState>> states(lanes.size());
  std::string line;
  while (true) {
    absl::StatusOr<std::optional<TraceRow>> row = reader.Next();
    if (!row.ok()) {
      csv.flush();
      return row.status();
    }
    if (!row->has_value()) {
      break;
    }
    const TraceRow& r = **row;
    for (size_t i = 0; i < lanes.size(); ++i) {
      const Limit& limit = lanes[i].limit;
      auto [it, inserted] = states[i].try_emplace(r.key);
      if (inserted) {
        it->second = InitialState(limit.algorithm());
      }
      const WideDecision d = DecideWide(limit, it->second, Timestamp(Micros(r.time_us)), r.cost);
      line.clear();
      if (compare) {
        fmt::format_to(std::back_inserter(line), "{},", AlgorithmName(limit.algorithm()));
      }
      fmt::format_to(std::back_inserter(line), "{},{},{},{},{},{},{},{}\n", r.time_us, r.key,
                     r.cost, d.allowed ? 1 : 0, d.remaining, d.reset_after_us, d.retry_after_us,
                     d.delay_us);
      csv << line;
      if (keep == KeepRows::kYes) {
        lanes[i].rows.push_back({r, Narrow(d)});
      }
    }
  }
  csv.flush();
  return absl::OkStatus();
}

}  // namespace sluice::tools
