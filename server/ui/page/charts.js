// The operator's page's charts: one per rule limit, admitted (a blue area) and denied (a
// dashed orange line) per second over the last 15 minutes, drawn as SVG built element by
// element (never from text: a rule's name is data, not markup). Units on both axes.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const CHART = { width: 560, height: 170, left: 52, right: 10, top: 10, bottom: 34 };

function svgElement(name, attributes) {
  const element = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attributes || {})) {
    element.setAttribute(key, String(value));
  }
  return element;
}

// The y axis for values up to `value`: a round step (1, 2 or 5 times a power of ten, at least
// 1 request/s) and the top, four steps at most, so that every tick is a round number.
function yScale(value) {
  const target = Math.max(value, 1) / 4;
  const power = Math.pow(10, Math.floor(Math.log10(target)));
  let step = 10 * power;
  for (const m of [1, 2, 5]) {
    if (m * power >= target) {
      step = m * power;
      break;
    }
  }
  step = Math.max(1, step);
  return { step, top: step * Math.max(1, Math.ceil(Math.max(value, 1) / step)) };
}

function formatRate(value) {
  for (const [size, suffix] of [[1e9, "G"], [1e6, "M"], [1e3, "k"]]) {
    if (value >= size) {
      const scaled = value / size;
      return (scaled >= 10 ? scaled.toFixed(0) : scaled.toFixed(1)) + suffix;
    }
  }
  return String(Math.round(value * 10) / 10);
}

// The average of the last `n` values.
function recentAverage(values, n) {
  const tail = values.slice(-n);
  return tail.length === 0 ? 0 : tail.reduce((a, b) => a + b, 0) / tail.length;
}

// The path of `values` (one a second, the last at the right edge) scaled into the plot.
function seriesPath(values, x, y, closed) {
  let d = "";
  values.forEach((value, i) => {
    d += (i === 0 ? "M" : "L") + x(i).toFixed(1) + " " + y(value).toFixed(1) + " ";
  });
  if (closed && values.length > 0) {
    d += "L" + x(values.length - 1).toFixed(1) + " " + y(0) + " L" + x(0).toFixed(1) + " " + y(0) + " Z";
  }
  return d;
}

// Draws one rule limit's chart into `svg` (emptied first).
function drawChart(svg, series) {
  const { width, height, left, right, top, bottom } = CHART;
  const plotWidth = width - left - right;
  const plotHeight = height - top - bottom;
  const n = series.admitted.length;
  const { step, top: peak } = yScale(Math.max(...series.admitted, ...series.denied));
  const x = (i) => left + (n <= 1 ? plotWidth : (i * plotWidth) / (n - 1));
  const y = (v) => top + plotHeight - (v / peak) * plotHeight;
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);

  // y: requests per second, a tick every round step.
  for (let value = 0; value <= peak; value += step) {
    svg.append(svgElement("line", { class: value === 0 ? "axis" : "grid", x1: left, x2: width - right, y1: y(value), y2: y(value) }));
    const label = svgElement("text", { x: left - 6, y: y(value) + 4, "text-anchor": "end" });
    label.textContent = formatRate(value);
    svg.append(label);
  }
  const yTitle = svgElement("text", { x: 12, y: top + plotHeight / 2, transform: `rotate(-90 12 ${top + plotHeight / 2})`, "text-anchor": "middle" });
  yTitle.textContent = "requests/s";
  svg.append(yTitle);

  // x: minutes before now.
  const minutes = Math.round(n / 60);
  const tickEvery = minutes > 10 ? 5 : minutes > 4 ? 2 : 1;
  for (let m = 0; m <= minutes; m += tickEvery) {
    const xi = x(n - 1 - m * 60);
    svg.append(svgElement("line", { class: "axis", x1: xi, x2: xi, y1: top + plotHeight, y2: top + plotHeight + 4 }));
    const label = svgElement("text", { x: xi, y: top + plotHeight + 16, "text-anchor": "middle" });
    label.textContent = m === 0 ? "now" : `−${m}`;
    svg.append(label);
  }
  const xTitle = svgElement("text", { x: left + plotWidth / 2, y: height - 3, "text-anchor": "middle" });
  xTitle.textContent = "minutes ago";
  svg.append(xTitle);
  svg.append(svgElement("line", { class: "axis", x1: left, x2: left, y1: top, y2: top + plotHeight }));

  svg.append(svgElement("path", { class: "admitted", d: seriesPath(series.admitted, x, y, true) }));
  svg.append(svgElement("path", { class: "denied", d: seriesPath(series.denied, x, y, false) }));
}

// Keeps one figure per rule limit in `container`, in name order, each redrawn from `window`
// (GET /ui/api/series). A figure stays the same element from one refresh to the next, so that
// keyboard focus stays where it was.
function renderCharts(container, window) {
  const wanted = new Set(window.series.map((s) => s.name));
  for (const figure of [...container.children]) {
    if (!wanted.has(figure.dataset.name)) {
      figure.remove();
    }
  }
  const existing = new Map([...container.children].map((f) => [f.dataset.name, f]));
  window.series.forEach((series, index) => {
    let figure = existing.get(series.name);
    if (!figure) {
      figure = document.createElement("figure");
      figure.className = "chart";
      figure.dataset.name = series.name;
      figure.tabIndex = 0;
      const caption = document.createElement("figcaption");
      caption.append(document.createElement("span"), document.createElement("span"));
      caption.children[1].className = "now";
      figure.append(caption, svgElement("svg", { class: "chart", role: "img", "aria-hidden": "true" }));
    }
    if (container.children[index] !== figure) {
      container.insertBefore(figure, container.children[index] || null);
    }
    const admitted = recentAverage(series.admitted, 10);
    const denied = recentAverage(series.denied, 10);
    const summary = `${formatRate(admitted)} admitted/s, ${formatRate(denied)} denied/s over the last 10 s`;
    figure.querySelector("figcaption span").textContent = series.name + " ";
    figure.querySelector("figcaption .now").textContent = summary;
    const peak = Math.max(0, ...series.admitted, ...series.denied);
    figure.setAttribute("aria-label", `${series.name}: ${summary}; peak ${formatRate(peak)} requests/s in the last 15 minutes`);
    drawChart(figure.querySelector("svg"), series);
  });
}
