#pragma once

// Where the picture of `sluice simulate --svg` looks: the time span of the whole run, and the
// burst that a reader came to see, which in a long trace would otherwise fill a few pixels.
// Also the round tick steps and labels of a time axis. Floating point only for pixels.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/simulate.h"

namespace sluice::tools {

// A stretch of time [t0, t1] drawn between pixels x0 and x1.
struct Panel {
  int64_t t0 = 0;
  int64_t t1 = 1;
  double x0 = 0;
  double x1 = 1;

  double X(int64_t t) const {
    return x0 + (x1 - x0) * static_cast<double>(t - t0) / static_cast<double>(t1 - t0);
  }
  bool Holds(int64_t t) const { return t >= t0 && t <= t1; }
};

// The longest run of requests each closer to the one before than the fastest lane's rate allows
// (P/N), if it holds at least 3 requests and spans some time, but under a quarter of the run:
// the burst.
struct Burst {
  int64_t first = 0;  // Time of its first and last request.
  int64_t last = 0;
  int requests = 0;
};

// The span of the run: from the first request to the last one, or to the last leaky_bucket
// admission's action if that is later. A run without requests spans the longest period.
struct Span {
  int64_t t0 = 0;
  int64_t t1 = 1;
};
Span RunSpan(const std::vector<Lane>& lanes);

std::optional<Burst> FindBurst(const std::vector<Lane>& lanes, const Span& span);

// The span the zoom panel shows around a burst: the burst in its middle half.
Span ZoomSpan(const Burst& burst, const Span& span);

// The zoom of one lane: `zoom`, run on until the last admission decided inside it acts, for a
// lane whose admissions act after a delay (leaky_bucket). Its zoom then shows the spacing the
// delays make, which the decisions, all within the burst, do not.
Span LaneZoomSpan(const Lane& lane, const Span& zoom, const Span& span);

// The unit of a time axis over `span` microseconds: "s", "ms" or "us", and its size in us.
struct TimeUnit {
  const char* name;
  int64_t us;
};
TimeUnit UnitFor(int64_t span);

// A round tick step (1, 2 or 5 x 10^k us) giving at most `ticks` ticks over `span`.
int64_t TickStep(int64_t span, int64_t ticks);

// `at` in `unit`, with as many decimals as `step` needs: "2.95" for 2,950,000 us in s.
std::string TickLabel(int64_t at, int64_t step, TimeUnit unit);

}  // namespace sluice::tools
