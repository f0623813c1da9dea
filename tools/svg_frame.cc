#include "tools/svg_frame.h"

#include <algorithm>

#include "fmt/format.h"

namespace sluice::tools {

Span RunSpan(const std::vector<Lane>& lanes) {
  Span span;
  bool any = false;
  int64_t longest_period = 1;
  for (const Lane& lane : lanes) {
    longest_period = std::max(longest_period, lane.limit.period().count());
    for (const SimulatedRow& row : lane.rows) {
      const int64_t acts_at = row.request.time_us + row.decision.delay.count();
      span.t0 = any ? std::min(span.t0, row.request.time_us) : row.request.time_us;
      span.t1 = any ? std::max(span.t1, acts_at) : acts_at;
      any = true;
    }
  }
  if (!any || span.t1 == span.t0) {
    span.t1 = span.t0 + longest_period;
  }
  return span;
}

std::optional<Burst> FindBurst(const std::vector<Lane>& lanes, const Span& span) {
  if (lanes.empty()) {
    return std::nullopt;
  }
  // Requests closer together than P/N come faster than the limit's steady rate: a burst.
  int64_t gap = lanes.front().limit.period().count() / lanes.front().limit.limit();
  for (const Lane& lane : lanes) {
    gap = std::min(gap, lane.limit.period().count() / lane.limit.limit());
  }
  gap = std::max<int64_t>(gap, 1);
  // Every lane replays the same trace: the first lane's rows are the requests.
  const std::vector<SimulatedRow>& rows = lanes.front().rows;
  Burst best;
  Burst run;
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t t = rows[i].request.time_us;
    if (i == 0 || t - rows[i - 1].request.time_us >= gap) {
      run = Burst{.first = t, .last = t, .requests = 0};
    }
    run.last = t;
    ++run.requests;
    if (run.requests > best.requests) {
      best = run;
    }
  }
  if (best.requests < 3 || best.last == best.first ||
      (best.last - best.first) * 4 >= span.t1 - span.t0) {
    // No burst; or one at a single instant, which no zoom can pull apart (its bars count it);
    // or one that the whole run already shows well.
    return std::nullopt;
  }
  return best;
}

Span ZoomSpan(const Burst& burst, const Span& span) {
  const int64_t pad =
      std::max({(burst.last - burst.first) / 2, (span.t1 - span.t0) / 100, int64_t{1}});
  return Span{.t0 = burst.first - pad, .t1 = burst.last + pad};
}

Span LaneZoomSpan(const Lane& lane, const Span& zoom, const Span& span) {
  int64_t last_act = zoom.t1;
  for (const SimulatedRow& row : lane.rows) {
    if (row.decision.allowed && row.request.time_us >= zoom.t0 && row.request.time_us <= zoom.t1) {
      last_act = std::max(last_act, row.request.time_us + row.decision.delay.count());
    }
  }
  if (last_act == zoom.t1) {
    return zoom;
  }
  // A margin after the last act, as the whole run's panel would show it: a hundredth of the run.
  return Span{.t0 = zoom.t0, .t1 = last_act + std::max<int64_t>((span.t1 - span.t0) / 100, 1)};
}

TimeUnit UnitFor(int64_t span) {
  if (span >= 2'000'000) {
    return {"s", 1'000'000};
  }
  if (span >= 2'000) {
    return {"ms", 1'000};
  }
  return {"us", 1};
}

int64_t TickStep(int64_t span, int64_t ticks) {
  int64_t step = 1;
  while (true) {
    for (int64_t m : {1, 2, 5}) {
      if (span / (step * m) <= ticks) {
        return step * m;
      }
    }
    step *= 10;
  }
}

std::string TickLabel(int64_t at, int64_t step, TimeUnit unit) {
  int decimals = 0;
  for (int64_t scaled = step; scaled % unit.us != 0 && decimals < 6; scaled *= 10) {
    ++decimals;
  }
  return fmt::format("{:.{}f}", static_cast<double>(at) / static_cast<double>(unit.us), decimals);
}

}  // namespace sluice::tools
