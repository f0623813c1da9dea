#include "tools/svg.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>

#include "fmt/format.h"
#include "fmt/printf.h"

#include "sluice/duration.h"
#include "tools/svg_frame.h"
#include "tools/svg_notes.h"

namespace sluice::tools {
namespace {

// Drawing is the one place that uses floating point: pixels, not decisions.
constexpr double kWidth = 1000;
constexpr double kLeft = 80;
constexpr double kRight = 20;
constexpr double kOverviewRight = 380;  // With a zoom: the whole run left, the burst right.
constexpr double kZoomLeft = 440;       // The gap between holds the zoom's y figures and title.
constexpr double kLaneHeight = 246;
constexpr double kPlotTop = 38;  // Below the lane's title and note.
constexpr double kPlotHeight = 120;
constexpr double kMarksHeight = 40;
constexpr double kBinPx = 3;  // Requests closer than this on screen are counted in one bar.
constexpr int kMaxKeyLines = 6;

// Okabe-Ito colours, safe for colour-blind readers; admitted and rejected also differ in place
// (above or below the middle of the marks), the limit in dashes.
constexpr const char* kAdmitted = "#009E73";
constexpr const char* kRejected = "#D55E00";
constexpr const char* kLimit = "#000000";
constexpr const char* kZoomShade = "#EEEEEE";
constexpr const char* kKeyColors[kMaxKeyLines] = {"#0072B2", "#E69F00", "#CC79A7",
                                                  "#56B4E9", "#8C6D31", "#999999"};

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

struct Change {
  int64_t at;
  int64_t units;  // +cost when admitted, -cost when it leaves the trailing period.
};

struct KeyLine {
  std::string key;
  std::vector<std::pair<int64_t, int64_t>> points;  // (time, units in the trailing period)
  int64_t peak = 0;
};

// What a lane shows: its counts, and per key the admitted units in the trailing period.
struct LaneSummary {
  int admitted = 0;
  int rejected = 0;
  std::map<std::string, KeyLine> lines;
  int64_t most = 0;  // The highest peak of any key.
};

// Each key's changes as a step function: its level after each instant.
KeyLine StepLine(const std::string& key, std::vector<Change>& c) {
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
  return line;
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
  for (auto& [key, c] : changes) {
    KeyLine line = StepLine(key, c);
    summary.most = std::max(summary.most, line.peak);
    summary.lines.emplace(key, std::move(line));
  }
  return summary;
}

// The keys that get a line, busiest (most requests) first; one colour per key in every lane.
std::vector<std::string> DrawnKeys(const std::vector<Lane>& lanes) {
  std::map<std::string, int64_t> requests;
  if (!lanes.empty()) {
    for (const SimulatedRow& row : lanes.front().rows) {
      ++requests[row.request.key];
    }
  }
  std::vector<std::pair<std::string, int64_t>> keys(requests.begin(), requests.end());
  std::stable_sort(keys.begin(), keys.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> drawn;
  for (size_t k = 0; k < keys.size() && k < kMaxKeyLines; ++k) {
    drawn.push_back(keys[k].first);
  }
  return drawn;
}

// A lane's plot height for a number of units: 0 at the bottom, `y_max` at the top.
struct YScale {
  double plot_bottom;
  double y_max;

  double operator()(int64_t units) const {
    return plot_bottom - kPlotHeight * static_cast<double>(units) / y_max;
  }
};

// What every panel of the picture shares.
struct Picture {
  std::vector<std::string> keys;  // Drawn keys, in colour order.
  int64_t origin = 0;             // Time 0 of the x axis: the first request.
  TimeUnit unit{"s", 1'000'000};
  std::string period;  // "1s", for the legend and the y axis title.
};

// The legend: a swatch and a label per series, in rows as wide as the picture. Returns the
// height it takes.
double DrawLegend(const Picture& pic, bool zoom, bool acts, std::string& svg) {
  struct Item {
    std::string series;
    std::string swatch;
    std::string label;
  };
  std::vector<Item> items;
  for (size_t k = 0; k < pic.keys.size(); ++k) {
    items.push_back({"key:" + pic.keys[k],
                     fmt::format("<line x1=\"0\" y1=\"-4\" x2=\"22\" y2=\"-4\" stroke=\"{}\" "
                                 "stroke-width=\"2\" class=\"swatch\"/>",
                                 kKeyColors[k]),
                     fmt::format("units admitted in the trailing {}, key {}", pic.period,
                                 Escape(pic.keys[k]))});
  }
  items.push_back({"limit",
                   fmt::format("<line x1=\"0\" y1=\"-4\" x2=\"22\" y2=\"-4\" stroke=\"{}\" "
                               "stroke-width=\"1.5\" stroke-dasharray=\"6 4\" class=\"swatch\"/>",
                               kLimit),
                   "the limit N"});
  items.push_back({"admitted",
                   fmt::format("<rect x=\"8\" y=\"-12\" width=\"4\" height=\"8\" fill=\"{}\" "
                               "class=\"swatch\"/>",
                               kAdmitted),
                   "admitted requests (bars up)"});
  items.push_back({"rejected",
                   fmt::format("<rect x=\"8\" y=\"-4\" width=\"4\" height=\"8\" fill=\"{}\" "
                               "class=\"swatch\"/>",
                               kRejected),
                   "rejected requests (bars down)"});
  if (acts) {
    items.push_back({"acts",
                     fmt::format("<g class=\"swatch\"><line x1=\"0\" y1=\"0\" x2=\"18\" "
                                 "y2=\"-8\" stroke=\"{0}\" stroke-dasharray=\"2 2\"/>"
                                 "<circle cx=\"18\" cy=\"-8\" r=\"3\" fill=\"white\" "
                                 "stroke=\"{0}\" stroke-width=\"1.5\"/></g>",
                                 kAdmitted),
                     "when a delayed admission acts (leaky_bucket), joined to its request"});
  }
  if (zoom) {
    items.push_back({"zoom",
                     fmt::format("<rect x=\"0\" y=\"-12\" width=\"22\" height=\"12\" fill=\"{}\" "
                                 "stroke=\"#999\" class=\"swatch\"/>",
                                 kZoomShade),
                     "the burst, zoomed on the right"});
  }
  svg += "<g id=\"legend\">\n";
  double x = kLeft;
  double y = 20;
  for (const Item& item : items) {
    const double width = 30 + 6.5 * static_cast<double>(item.label.size()) + 18;
    if (x > kLeft && x + width > kWidth - kRight) {
      x = kLeft;
      y += 20;
    }
    svg += fmt::sprintf(
        "<g class=\"legend-item\" data-series=\"%s\" transform=\"translate(%.1f,%.1f)\">%s"
        "<text x=\"30\" y=\"0\">%s</text></g>\n",
        Escape(item.series), x, y, item.swatch, item.label);
    x += width;
  }
  svg += "</g>\n";
  return y + 12;
}

// A y axis left of `x`: labels of 0, the limit and the most admitted, and its title.
void DrawYFigures(int64_t limit, int64_t most, const Picture& pic, double x, double plot_top,
                  const YScale& y, std::string& svg) {
  for (int64_t units : {int64_t{0}, limit, most}) {
    if (units == most && std::abs(y(most) - y(limit)) < 12 && most != limit) {
      continue;  // Its label would overwrite the limit's.
    }
    svg += fmt::sprintf(
        "<text x=\"%.1f\" y=\"%.1f\" class=\"axis\" data-axis=\"y\" data-units=\"%d\" "
        "text-anchor=\"end\">%d</text>\n",
        x - 6, y(units) + 4, units, units);
  }
  const double mid = plot_top + kPlotHeight / 2;
  svg += fmt::sprintf(
      "<text class=\"axis-title\" data-axis=\"y\" text-anchor=\"middle\" "
      "transform=\"translate(%.1f,%.1f) rotate(-90)\">units in the trailing %s</text>\n",
      x - 44, mid, pic.period);
}

// The y axis of a lane, left of the first panel, and the title of the marks under it.
void DrawYAxis(int64_t limit, int64_t most, const Picture& pic, double plot_top, const YScale& y,
               std::string& svg) {
  DrawYFigures(limit, most, pic, kLeft, plot_top, y, svg);
  svg += fmt::sprintf(
      "<text x=\"%.1f\" y=\"%.1f\" class=\"axis-title\" data-axis=\"y-marks\" "
      "text-anchor=\"end\">requests</text>\n",
      kLeft - 6, plot_top + kPlotHeight + 6 + kMarksHeight / 2 + 4);
}

// The grid and tick labels of one panel's time axis, through the plot and the marks.
void DrawXAxis(const Panel& panel, const Picture& pic, double plot_top, std::string& svg) {
  const double bottom = plot_top + kPlotHeight + 6 + kMarksHeight;
  const int64_t ticks = std::max<int64_t>(3, static_cast<int64_t>((panel.x1 - panel.x0) / 60));
  const int64_t step = TickStep(panel.t1 - panel.t0, ticks);
  // Ticks at round times since the first request.
  const int64_t from = panel.t0 - pic.origin;
  int64_t at = from >= 0 ? (from + step - 1) / step * step : -(-from / step * step);
  for (; pic.origin + at <= panel.t1; at += step) {
    const double x = panel.X(pic.origin + at);
    svg += fmt::sprintf(
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>\n"
        "<text x=\"%.1f\" y=\"%.1f\" class=\"axis\" text-anchor=\"middle\">%s</text>\n",
        x, plot_top, x, bottom, x, bottom + 13, TickLabel(at, step, pic.unit));
  }
}

// One key's line over a panel: its level at the panel's start, then each change within it.
void DrawKeyLine(const KeyLine& line, const char* color, const Panel& panel, const YScale& y,
                 std::string& svg) {
  int64_t level = 0;
  auto it = line.points.begin();
  for (; it != line.points.end() && it->first <= panel.t0; ++it) {
    level = it->second;
  }
  std::string path = fmt::sprintf("M%.1f,%.1f", panel.x0, y(level));
  for (; it != line.points.end() && it->first <= panel.t1; ++it) {
    const double x = panel.X(it->first);
    path += fmt::sprintf(" L%.1f,%.1f L%.1f,%.1f", x, y(level), x, y(it->second));
    level = it->second;
  }
  path += fmt::sprintf(" L%.1f,%.1f", panel.x1, y(level));
  svg += fmt::sprintf(
      "<path d=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" data-series=\"key:%s\">"
      "<title>key %s</title></path>\n",
      path, color, Escape(line.key), Escape(line.key));
}

// "42ms": a short spelling of a bar's width in time, for the marks' scale.
std::string RoundDuration(double us) {
  const TimeUnit unit = UnitFor(static_cast<int64_t>(us * 2));
  return fmt::format("{:.{}f}{}", us / static_cast<double>(unit.us),
                     us >= static_cast<double>(unit.us) * 10 ? 0 : 1, unit.name);
}

// The requests under a panel's plot, a bar per kBinPx of time: admitted up from the middle,
// rejected down, as tall as the count. Requests kBinPx apart stay apart.
struct Bars {
  Bars(const Lane& lane, const Panel& panel, double marks_top)
      : panel(panel), middle(marks_top + kMarksHeight / 2) {
    for (const SimulatedRow& row : lane.rows) {
      if (panel.Holds(row.request.time_us)) {
        auto& bin = bins[Bin(row.request.time_us)];
        ++(row.decision.allowed ? bin.first : bin.second);
      }
    }
    for (const auto& [_, counts] : bins) {
      most = std::max({most, counts.first, counts.second});
    }
    unit = (kMarksHeight / 2 - 2) / most;
  }

  int64_t Bin(int64_t t) const { return static_cast<int64_t>((panel.X(t) - panel.x0) / kBinPx); }
  double Left(int64_t bin) const { return panel.x0 + static_cast<double>(bin) * kBinPx; }
  // The top of the admitted bar that holds time `t`.
  double AdmittedTop(int64_t t) const {
    auto it = bins.find(Bin(t));
    return middle - 1 - unit * (it == bins.end() ? 0 : it->second.first);
  }

  const Panel& panel;
  double middle;
  std::map<int64_t, std::pair<int, int>> bins;  // bin -> (admitted, rejected)
  int most = 1;
  double unit = 1;  // Pixels per request.
};

void DrawMarks(const Bars& bars, double marks_top, std::string& svg) {
  const Panel& panel = bars.panel;
  const int most = bars.most;
  const double middle = bars.middle;
  const double unit = bars.unit;
  for (const auto& [bin, counts] : bars.bins) {
    const double x = bars.Left(bin);
    for (int side = 0; side < 2; ++side) {
      const int count = side == 0 ? counts.first : counts.second;
      if (count == 0) {
        continue;
      }
      const double h = unit * count;
      svg += fmt::sprintf(
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" "
          "data-series=\"%s\" data-count=\"%d\"/>\n",
          x, side == 0 ? middle - 1 - h : middle + 1, kBinPx - 1, h,
          side == 0 ? kAdmitted : kRejected, side == 0 ? "admitted" : "rejected", count);
    }
  }
  if (most > 1) {
    const double bin_us = kBinPx * static_cast<double>(panel.t1 - panel.t0) / (panel.x1 - panel.x0);
    svg += fmt::sprintf(
        "<text x=\"%.1f\" y=\"%.1f\" class=\"scale\" text-anchor=\"end\">bar height: requests "
        "per %s, up to %d</text>\n",
        panel.x1, marks_top + kMarksHeight + 26, RoundDuration(bin_us), most);
  }
}

// A key's level at `t`: the units its line shows there.
int64_t LevelAt(const KeyLine& line, int64_t t) {
  int64_t level = 0;
  for (auto it = line.points.begin(); it != line.points.end() && it->first <= t; ++it) {
    level = it->second;
  }
  return level;
}

bool HasDelay(const SimulatedRow& row) {
  return row.decision.allowed && row.request.cost > 0 && row.decision.delay.count() > 0;
}

// A leaky_bucket admission acts after its delay, and its key's line counts it then; its bar
// marks the decision. So each delayed admission gets a circle on its key's line at the time it
// acts (on the plot's floor for a key without a line), joined to its request's bar by a dotted
// line: the spacing the queue makes shows. One that acts after the panel ends gets the line
// alone, to the panel's edge.
void DrawActs(const Lane& lane, const LaneSummary& summary, const Picture& pic, const Bars& bars,
              const YScale& y, std::string& svg) {
  const Panel& panel = bars.panel;
  for (const SimulatedRow& row : lane.rows) {
    const int64_t at = row.request.time_us;
    if (!HasDelay(row) || !panel.Holds(at)) {
      continue;
    }
    const int64_t acts_at = at + row.decision.delay.count();
    int64_t level = 0;
    if (std::find(pic.keys.begin(), pic.keys.end(), row.request.key) != pic.keys.end()) {
      level = LevelAt(summary.lines.at(row.request.key), acts_at);
    }
    const double x_from = bars.Left(bars.Bin(at)) + (kBinPx - 1) / 2;
    const double y_from = bars.AdmittedTop(at);
    double x_to = panel.X(acts_at);
    double y_to = y(level);
    const bool inside = panel.Holds(acts_at);
    if (!inside && x_to > x_from) {
      y_to = y_from + (y_to - y_from) * (panel.x1 - x_from) / (x_to - x_from);
      x_to = panel.x1;
    }
    svg += fmt::sprintf(
        "<g data-series=\"acts\" data-t=\"%d\" data-acts=\"%d\"><title>admitted with a delay of "
        "%s</title><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
        "stroke-opacity=\"0.7\" stroke-dasharray=\"2 2\"/>",
        at, acts_at, FormatDuration(row.decision.delay), x_from, y_from, x_to, y_to, kAdmitted);
    if (inside) {
      svg += fmt::sprintf(
          "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"white\" stroke=\"%s\" "
          "stroke-width=\"1.5\"/>",
          x_to, y_to, kAdmitted);
    }
    svg += "</g>\n";
  }
}

// Whether the panel holds a delayed admission, whose act DrawActs draws.
bool HasActs(const Lane& lane, const Panel& panel) {
  return std::any_of(lane.rows.begin(), lane.rows.end(), [&](const SimulatedRow& row) {
    return HasDelay(row) && panel.Holds(row.request.time_us);
  });
}

void DrawPanel(const Lane& lane, const LaneSummary& summary, const Picture& pic, const Panel& panel,
               const char* name, double top, const YScale& y, std::string& svg) {
  const double plot_top = top + kPlotTop;
  const bool zoom = std::string_view(name) == "zoom";
  svg += fmt::sprintf(
      "<g class=\"panel\" data-panel=\"%s\" data-lane=\"%s\" data-t0=\"%d\" data-t1=\"%d\" "
      "data-x0=\"%.1f\" data-x1=\"%.1f\">\n",
      name, AlgorithmName(lane.limit.algorithm()), panel.t0, panel.t1, panel.x0, panel.x1);
  svg += fmt::sprintf(
      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"plot\" fill=\"%s\"/>\n",
      panel.x0, plot_top, panel.x1 - panel.x0, kPlotHeight, zoom ? kZoomShade : "none");
  if (zoom) {
    DrawYFigures(lane.limit.limit(), summary.most, pic, panel.x0, plot_top, y, svg);
  }
  DrawXAxis(panel, pic, plot_top, svg);
  svg += fmt::sprintf(
      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\" "
      "stroke-dasharray=\"6 4\" data-series=\"limit\"/>\n",
      panel.x0, y(lane.limit.limit()), panel.x1, y(lane.limit.limit()), kLimit);
  for (size_t k = 0; k < pic.keys.size(); ++k) {
    if (auto it = summary.lines.find(pic.keys[k]); it != summary.lines.end()) {
      DrawKeyLine(it->second, kKeyColors[k], panel, y, svg);
    }
  }
  const Bars bars(lane, panel, plot_top + kPlotHeight + 6);
  DrawMarks(bars, plot_top + kPlotHeight + 6, svg);
  if (std::string_view(name) != "overview") {  // The panel that shows the requests apart.
    DrawActs(lane, summary, pic, bars, y, svg);
  }
  svg += "</g>\n";
}

void DrawLane(const Lane& lane, const Picture& pic, const Panel& overview,
              const std::optional<Panel>& zoom, double top, std::string& svg) {
  const int64_t limit = lane.limit.limit();
  const LaneSummary summary = Summarize(lane);
  const double plot_top = top + kPlotTop;
  const YScale y{.plot_bottom = plot_top + kPlotHeight,
                 .y_max = static_cast<double>(std::max(limit, summary.most)) * 1.25};
  svg += fmt::sprintf(
      "<text x=\"%.1f\" y=\"%.1f\" class=\"title\">%s: admitted %d, rejected %d; most admitted "
      "for one key in any %s: %d (limit %d)</text>\n",
      kLeft, top + 14, Escape(lane.limit.ToString()), summary.admitted, summary.rejected,
      FormatDuration(lane.limit.period()), summary.most, limit);
  svg += fmt::sprintf("<text x=\"%.1f\" y=\"%.1f\" class=\"note\" data-lane=\"%s\">%s</text>\n",
                      kLeft, top + 30, AlgorithmName(lane.limit.algorithm()),
                      Escape(LaneNote(lane.limit, summary.most)));
  DrawYAxis(limit, summary.most, pic, plot_top, y, svg);
  if (zoom) {
    // The zoomed span, shaded in the overview as the zoom panel's background is.
    svg += fmt::sprintf(
        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" "
        "data-series=\"zoom\"/>\n",
        overview.X(zoom->t0), plot_top, overview.X(zoom->t1) - overview.X(zoom->t0),
        kPlotHeight + 6 + kMarksHeight, kZoomShade);
  }
  DrawPanel(lane, summary, pic, overview, zoom ? "overview" : "run", top, y, svg);
  if (zoom) {
    DrawPanel(lane, summary, pic, *zoom, "zoom", top, y, svg);
  }
}

}  // namespace

std::string RenderSvg(const std::vector<Lane>& lanes) {
  const Span span = RunSpan(lanes);
  const std::optional<Burst> burst = FindBurst(lanes, span);
  Picture pic{.keys = DrawnKeys(lanes), .origin = span.t0, .unit = UnitFor(span.t1 - span.t0)};
  pic.period = lanes.empty() ? "period" : FormatDuration(lanes.front().limit.period());
  for (const Lane& lane : lanes) {
    if (FormatDuration(lane.limit.period()) != pic.period) {
      pic.period = "period";
    }
  }
  Panel overview{.t0 = span.t0, .t1 = span.t1, .x0 = kLeft, .x1 = kWidth - kRight};
  // Each lane's zoom: the burst's, or longer for a lane whose admissions act after a delay.
  std::vector<std::optional<Panel>> zooms(lanes.size());
  bool acts = false;
  bool longer = false;  // A lane's zoom runs on past the burst's.
  for (size_t i = 0; i < lanes.size(); ++i) {
    if (burst) {
      overview.x1 = kOverviewRight;
      const Span z = LaneZoomSpan(lanes[i], ZoomSpan(*burst, span), span);
      longer = longer || z.t1 != ZoomSpan(*burst, span).t1;
      zooms[i] = Panel{.t0 = z.t0, .t1 = z.t1, .x0 = kZoomLeft, .x1 = kWidth - kRight};
    }
    acts = acts || HasActs(lanes[i], zooms[i] ? *zooms[i] : overview);
  }

  std::string legend;
  const double top = DrawLegend(pic, burst.has_value(), acts, legend);
  const double caption = burst ? 18 : 0;
  const double lanes_top = top + caption + 8;
  const double height = lanes_top + kLaneHeight * static_cast<double>(lanes.size()) + 24;
  std::string svg = fmt::sprintf(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
      kWidth, height, kWidth, height);
  svg +=
      "<style>.title{font-weight:bold}.note{fill:#333;font-style:italic}.axis{fill:#444}"
      ".axis-title{fill:#222;font-size:11px}.scale{fill:#555;font-size:10px}.plot{stroke:#bbb}"
      ".grid{stroke:#e4e4e4}</style>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += legend;
  if (burst) {
    svg += fmt::sprintf(
        "<text x=\"%.1f\" y=\"%.1f\" class=\"caption\">Left: the whole run. Right: the burst "
        "(%d requests in %s), zoomed%s.</text>\n",
        kLeft, top + 12, burst->requests, FormatDuration(Micros(burst->last - burst->first)),
        longer ? "; a lane with delays (leaky_bucket) runs on until its last admission acts" : "");
  }
  for (size_t i = 0; i < lanes.size(); ++i) {
    DrawLane(lanes[i], pic, overview, zooms[i], lanes_top + kLaneHeight * static_cast<double>(i),
             svg);
  }
  svg += fmt::sprintf(
      "<text x=\"%.1f\" y=\"%.1f\" class=\"axis-title\" data-axis=\"x\" "
      "text-anchor=\"middle\">time since the first request (%s)</text>\n",
      (kLeft + kWidth - kRight) / 2, height - 8, pic.unit.name);
  svg += "</svg>\n";
  return svg;
}

}  // namespace sluice::tools
