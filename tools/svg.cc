#include "tools/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>

#include "absl/strings/str_format.h"
#include "fmt/format.h"
#include "fmt/printf.h"

#include "sluice/duration.h"

namespace sluice::tools {
namespace {

// Drawing is the one place that uses floating point: pixels, not decisions.
constexpr double kWidth = 1000;
constexpr double kLeft = 70;
constexpr double kRight = 20;
constexpr double kTop = 40;  // Room for the legend.
constexpr double kLaneHeight = 200;
constexpr double kTitleHeight = 22;
constexpr double kPlotHeight = 120;
constexpr double kMarksHeight = 40;
constexpr int kMaxKeyLines = 6;
constexpr const char* kKeyColors[kMaxKeyLines] = {"#1f6fb4", "#7b3fa0", "#c77c02",
                                                  "#0f8b8d", "#8c564b", "#555555"};

std::string Escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A round tick step (1, 2 or 5 x 10^k us) giving about eight ticks over `span`.
int64_t TickStep(int64_t span) {
  int64_t step = 1;
  while (true) {
    for (int64_t m : {1, 2, 5}) {
      if (span / (step * m) <= 8) {
        return step * m;
      }
    }
    step *= 10;
  }
}

struct Change {
  int64_t at;
  int64_t units;  // +cost when admitted, -cost when it leaves the trailing period.
};

class Canvas {
 public:
  Canvas(int64_t t0, int64_t t1) : t0_(t0), t1_(t1) {}

  double X(int64_t t) const {
    return kLeft + (kWidth - kLeft - kRight) * static_cast<double>(t - t0_) /
                       static_cast<double>(t1_ - t0_);
  }
  int64_t t0() const { return t0_; }
  int64_t t1() const { return t1_; }

 private:
  int64_t t0_;
  int64_t t1_;
};

struct KeyLine {
  std::string key;
  std::vector<std::pair<int64_t, int64_t>> points;  // (time, units in the trailing period)
  int64_t peak = 0;
};

// What a lane's title and lines show: its admitted and rejected requests, and per key the
// admitted units in the trailing period.
struct LaneSummary {
  int admitted = 0;
  int rejected = 0;
  std::vector<KeyLine> lines;  // Busiest first.
};

// Each key's changes as a step function (its level after each instant), busiest keys first.
std::vector<KeyLine> KeyLines(std::map<std::string, std::vector<Change>>& changes) {
  std::vector<KeyLine> lines;
  for (auto& [key, c] : changes) {
    std::stable_sort(c.begin(), c.end(), [](const Change& a, const Change& b) {
      // At one instant, departures first: the period (t - P, t] excludes t - P.
      return a.at != b.at ? a.at < b.at : a.units < b.units;
    });
    KeyLine line{.key = key};
    int64_t level = 0;
    for (const Change& ch : c) {
      level += ch.units;
      if (!line.points.empty() && line.points.back().first == ch.at) {
        line.points.back().second = level;
      } else {
        line.points.emplace_back(ch.at, level);
      }
      line.peak = std::max(line.peak, level);
    }
    lines.push_back(std::move(line));
  }
  // Busiest keys first, so that the lines drawn are the ones that matter.
  std::stable_sort(lines.begin(), lines.end(),
                   [](const KeyLine& a, const KeyLine& b) { return a.peak > b.peak; });
  return lines;
}

LaneSummary Summarize(const Lane& lane) {
  const int64_t period = lane.limit.period().count();

  // Per key, the admitted units in the trailing period (t - P, t] as a step function. A
  // leaky_bucket admission counts when its delay has passed: that is when the caller acts.
  std::map<std::string, std::vector<Change>> changes;
  LaneSummary summary;
  for (const SimulatedRow& row : lane.rows) {
    if (!row.decision.allowed) {
      ++summary.rejected;
      continue;
    }
    ++summary.admitted;
    if (row.request.cost == 0) {
      continue;
    }
    const int64_t acts_at = row.request.time_us + row.decision.delay.count();
    auto& c = changes[row.request.key];
    c.push_back({acts_at, row.request.cost});
    c.push_back({acts_at + period, -row.request.cost});
  }
  summary.lines = KeyLines(changes);
  return summary;
}

// A lane's plot height for a number of units: 0 at the bottom, `y_max` at the top.
struct YScale {
  double plot_bottom;
  double y_max;

  double operator()(int64_t units) const {
    return plot_bottom - kPlotHeight * static_cast<double>(units) / y_max;
  }
};

// The title, the plot's frame, the labels of 0, the limit and the most admitted, and the limit's
// dashed line.
void DrawFrame(const Lane& lane, const LaneSummary& summary, int64_t most, double top,
               const YScale& y, std::string& svg) {
  const int64_t limit = lane.limit.limit();
  const double plot_top = top + kTitleHeight;
  svg += fmt::sprintf(
      "<text x=\"%.1f\" y=\"%.1f\" class=\"title\">%s: admitted %d, rejected %d; most admitted "
      "for one key in any %s: %d (limit %d)</text>\n",
      kLeft, top + 15, Escape(lane.limit.ToString()), summary.admitted, summary.rejected,
      FormatDuration(lane.limit.period()), most, limit);
  svg +=
      fmt::sprintf("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"plot\"/>\n",
                   kLeft, plot_top, kWidth - kLeft - kRight, kPlotHeight);
  for (int64_t units : {int64_t{0}, limit, most}) {
    if (units == most && std::abs(y(most) - y(limit)) < 12 && most != limit) {
      continue;  // Its label would overwrite the limit's.
    }
    svg +=
        fmt::sprintf("<text x=\"%.1f\" y=\"%.1f\" class=\"axis\" text-anchor=\"end\">%d</text>\n",
                     kLeft - 6, y(units) + 4, units);
  }
  svg += fmt::sprintf("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"limit\"/>\n",
                      kLeft, y(limit), kWidth - kRight, y(limit));
}

// The busiest keys' lines, up to kMaxKeyLines.
void DrawKeyLines(const std::vector<KeyLine>& lines, const Canvas& canvas, const YScale& y,
                  std::string& svg) {
  for (size_t k = 0; k < lines.size() && k < kMaxKeyLines; ++k) {
    std::string path = fmt::sprintf("M%.1f,%.1f", kLeft, y(0));
    int64_t level = 0;
    for (const auto& [at, next] : lines[k].points) {
      if (at > canvas.t1()) {
        break;
      }
      const double x = canvas.X(std::max(at, canvas.t0()));
      path += fmt::sprintf(" L%.1f,%.1f L%.1f,%.1f", x, y(level), x, y(next));
      level = next;
    }
    path += fmt::sprintf(" L%.1f,%.1f", kWidth - kRight, y(level));
    svg += fmt::sprintf(
        "<path d=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"><title>key %s</title>"
        "</path>\n",
        path, kKeyColors[k], Escape(lines[k].key));
  }
}

// A tick per request under the plot: admitted above, rejected below.
void DrawMarks(const Lane& lane, const Canvas& canvas, double marks_top, std::string& svg) {
  for (const SimulatedRow& row : lane.rows) {
    const double x = canvas.X(row.request.time_us);
    const bool ok = row.decision.allowed;
    const double y0 = ok ? marks_top : marks_top + kMarksHeight / 2;
    svg += fmt::sprintf("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"%s\"/>\n", x,
                        y0, x, y0 + kMarksHeight / 2 - 4, ok ? "admitted" : "rejected");
  }
}

void DrawLane(const Lane& lane, const Canvas& canvas, double top, std::string& svg) {
  const int64_t limit = lane.limit.limit();
  const LaneSummary summary = Summarize(lane);
  const int64_t most = summary.lines.empty() ? 0 : summary.lines.front().peak;

  const double plot_top = top + kTitleHeight;
  const double plot_bottom = plot_top + kPlotHeight;
  const YScale y{.plot_bottom = plot_bottom,
                 .y_max = static_cast<double>(std::max(limit, most)) * 1.25};
  DrawFrame(lane, summary, most, top, y, svg);
  DrawKeyLines(summary.lines, canvas, y, svg);
  DrawMarks(lane, canvas, plot_bottom + 6, svg);
}

}  // namespace

std::string RenderSvg(const std::vector<Lane>& lanes) {
  int64_t t0 = 0;
  int64_t t1 = 0;
  bool any = false;
  int64_t longest_period = 1;
  for (const Lane& lane : lanes) {
    longest_period = std::max(longest_period, lane.limit.period().count());
    for (const SimulatedRow& row : lane.rows) {
      const int64_t acts_at = row.request.time_us + row.decision.delay.count();
      t0 = any ? std::min(t0, row.request.time_us) : row.request.time_us;
      t1 = any ? std::max(t1, acts_at) : acts_at;
      any = true;
    }
  }
  if (!any || t1 == t0) {
    t1 = t0 + longest_period;
  }
  const Canvas canvas(t0, t1);
  const double height = kTop + kLaneHeight * static_cast<double>(lanes.size()) + 30;

  std::string svg = fmt::sprintf(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
      kWidth, height, kWidth, height);
  fmt::format_to(std::back_inserter(svg), "{}",
                 "<style>.title{font-weight:bold}.axis{fill:#444}.plot{fill:none;stroke:#ccc}"
                 ".limit{stroke:#d62728;stroke-dasharray:6 4;stroke-width:1.5}"
                 ".admitted{stroke:#2ca02c;stroke-width:1.5}.rejected{stroke:#d62728;"
                 "stroke-width:1.5}.grid{stroke:#e4e4e4}</style>\n"
                 "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  svg += fmt::sprintf(
      "<text x=\"%.1f\" y=\"20\">Line: units admitted per key in the trailing period. "
      "Dashed: the limit. Ticks: admitted (green, upper), rejected (red, lower).</text>\n",
      kLeft);
  const int64_t step = TickStep(t1 - t0);
  const double bottom = kTop + kLaneHeight * static_cast<double>(lanes.size());
  for (int64_t at = 0; t0 + at <= t1; at += step) {
    const double x = canvas.X(t0 + at);
    svg += fmt::sprintf(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n"
        "<text x=\"%.1f\" y=\"%.1f\" class=\"axis\" text-anchor=\"middle\">%s</text>\n",
        x, kTop, x, bottom, x, bottom + 16, FormatDuration(Micros(at)));
  }
  for (size_t i = 0; i < lanes.size(); ++i) {
    DrawLane(lanes[i], canvas, kTop + kLaneHeight * static_cast<double>(i), svg);
  }
  fmt::format_to(std::back_inserter(svg), "</svg>\n");
  return svg;
}

}  // namespace sluice::tools
