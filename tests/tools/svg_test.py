#!/usr/bin/env python3
"""The picture of `sluice simulate --svg`, read as XML: a legend with a swatch for every series
drawn, titles on both axes, figures on the y axis of every panel (the zoom's too), colours
that tell the limit from a rejection, the burst framed wide enough that its requests stay
apart (or are counted per bar), leaky_bucket's zoom marking when each delayed admission acts,
and a note in every lane saying how much its algorithm can pass in one period (why
token_bucket reaches 15 against a limit of 10). The CSV is the same with or without --svg.
Python 3 standard library only.

    python3 tests/tools/svg_test.py --sluice build/bin/sluice --trace examples/burst.csv
"""

import argparse
import os
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
ALGORITHMS = ["fixed_window", "sliding_window", "sliding_log", "sliding_buckets",
              "token_bucket", "gcra", "leaky_bucket"]
ARGS = None


def simulate(trace, *flags):
    """Runs sluice simulate on `trace` (a path) and returns (csv, svg root)."""
    with tempfile.TemporaryDirectory(prefix="sluice-svg-test.") as scratch:
        svg = os.path.join(scratch, "out.svg")
        done = subprocess.run([ARGS.sluice, "simulate", *flags, "--svg", svg, trace],
                              capture_output=True, text=True, check=True)
        return done.stdout, ET.parse(svg).getroot()


def burst_of(trace, gap_us):
    """The longest run of requests each under gap_us after the one before: (first, last, n)."""
    with open(trace) as f:
        times = [int(line.split(",")[0]) for line in f.read().splitlines()[1:] if line]
    best, start = (0, 0, 0), 0
    for i in range(1, len(times) + 1):
        if i == len(times) or times[i] - times[i - 1] >= gap_us:
            if i - start > best[2]:
                best = (times[start], times[i - 1], i - start)
            start = i
    return best


def series_colour(element):
    return element.get("fill") if element.tag == NS + "rect" else element.get("stroke")


class PictureTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.flags = ["--compare", ",".join(ALGORITHMS), "--limit", "10", "--period", "1s",
                     "--buckets", "10"]
        cls.csv, cls.root = simulate(ARGS.trace, *cls.flags)

    def legend(self):
        legend = self.root.find(f".//{NS}g[@id='legend']")
        self.assertIsNotNone(legend, "no legend")
        return {item.get("data-series"): item for item in legend.iter(NS + "g")
                if item.get("class") == "legend-item"}

    def swatch(self, items, series):
        swatches = [e for e in items[series] if e.get("class") == "swatch"]
        self.assertEqual(len(swatches), 1, f"legend item {series} has no swatch")
        return swatches[0]

    def test_legend_has_a_swatch_and_a_label_per_series_drawn(self):
        items = self.legend()
        drawn = {e.get("data-series") for e in self.root.iter()
                 if e.get("data-series") and e.get("class") != "legend-item"}
        for series in {"limit", "admitted", "rejected", "key:client"}:
            self.assertIn(series, drawn)
        for series in drawn:
            self.assertIn(series, items, f"{series} is drawn but not in the legend")
            self.swatch(items, series)
            label = items[series].find(NS + "text")
            self.assertTrue(label is not None and label.text.strip(), series)

    def test_colours_are_distinct_and_match_the_legend(self):
        items = self.legend()
        colours = {s: series_colour(self.swatch(items, s))
                   for s in ("limit", "admitted", "rejected", "key:client")}
        self.assertEqual(len(set(colours.values())), 4, colours)
        # Not by hue alone: the limit is dashed, rejections hang below admissions.
        self.assertTrue(self.swatch(items, "limit").get("stroke-dasharray"))
        for element in self.root.iter():
            series = element.get("data-series")
            if series in colours and element.get("class") != "legend-item":
                self.assertEqual(series_colour(element), colours[series], series)
        for panel in self.panels():
            up = [float(r.get("y")) for r in self.marks(panel, "admitted")]
            down = [float(r.get("y")) for r in self.marks(panel, "rejected")]
            if up and down:
                self.assertLess(max(up), min(down))

    def test_both_axes_have_titles(self):
        titles = {t.get("data-axis"): "".join(t.itertext()) for t in self.root.iter(NS + "text")
                  if t.get("class") == "axis-title"}
        self.assertIn("time", titles.get("x", ""))
        self.assertIn("units in the trailing 1s", titles.get("y", ""))

    def panels(self, lane=None):
        return [g for g in self.root.iter(NS + "g") if g.get("class") == "panel"
                and (lane is None or g.get("data-lane") == lane)]

    def marks(self, panel, series):
        return [r for r in panel.iter(NS + "rect") if r.get("data-series") == series]

    def test_the_burst_is_framed_wide_and_its_requests_stay_apart(self):
        first, last, n = burst_of(ARGS.trace, 100_000)  # Faster than 10 per 1s.
        self.assertGreaterEqual(n, 10)
        for lane in ALGORITHMS:
            # leaky_bucket's zoom runs on until the burst's admissions act, up to B/N = 1s
            # after it (test_leaky_bucket_zoom_marks_when_each_delayed_admission_acts): the
            # burst fills less of it, its requests still apart, at 3 px each or more.
            leaky = lane == "leaky_bucket"
            framed = [p for p in self.panels(lane)
                      if int(p.get("data-t0")) <= first and last <= int(p.get("data-t1"))
                      and ((last - first) * 3 >= int(p.get("data-t1")) - int(p.get("data-t0"))
                           or (leaky and p.get("data-panel") == "zoom"))]
            self.assertTrue(framed, f"{lane}: no panel where the burst fills a third")
            panel = framed[0]
            bars = self.marks(panel, "admitted") + self.marks(panel, "rejected")
            x0, t0 = float(panel.get("data-x0")), int(panel.get("data-t0"))
            to_px = (float(panel.get("data-x1")) - x0) / (int(panel.get("data-t1")) - t0)
            # A bar stands for the requests from its left edge to the next bar's (3 px on).
            in_burst = [b for b in bars
                        if first - 3 / to_px < t0 + (float(b.get("x")) - x0) / to_px <= last]
            self.assertEqual(sum(int(b.get("data-count")) for b in in_burst), n, lane)
            self.assertTrue(all(b.get("data-count") == "1" for b in in_burst),
                            f"{lane}: the burst's requests are lumped in the zoom")
            self.assertGreaterEqual((last - first) * to_px / n, 3 if leaky else 4, lane)

    def y_figures(self, panel):
        """The y axis figures drawn for `panel`: {units: text y}, and the axis title's text."""
        figures = {int(t.get("data-units")): float(t.get("y")) for t in panel.iter(NS + "text")
                   if t.get("class") == "axis" and t.get("data-axis") == "y"}
        titles = ["".join(t.itertext()) for t in panel.iter(NS + "text")
                  if t.get("class") == "axis-title" and t.get("data-axis") == "y"]
        return figures, titles

    def test_zoom_panels_have_y_figures(self):
        zooms = [p for p in self.panels() if p.get("data-panel") == "zoom"]
        self.assertEqual(sorted(p.get("data-lane") for p in zooms), sorted(ALGORITHMS))
        for panel in zooms:
            lane = panel.get("data-lane")
            figures, titles = self.y_figures(panel)
            self.assertIn(0, figures, lane)
            self.assertIn(10, figures, lane)  # The limit.
            self.assertEqual(titles, ["units in the trailing 1s"], lane)
            # Beside the limit's dashed line, left of the panel.
            limit = [e for e in panel.iter(NS + "line") if e.get("data-series") == "limit"]
            self.assertEqual(len(limit), 1, lane)
            self.assertAlmostEqual(figures[10] - 4, float(limit[0].get("y1")), delta=0.2,
                                   msg=lane)
            self.assertLess(figures[0], figures[10] + 200)
            self.assertGreater(figures[0], figures[10], lane)
            for t in panel.iter(NS + "text"):
                if t.get("data-axis") == "y" and t.get("class") == "axis":
                    self.assertLess(float(t.get("x")), float(panel.get("data-x0")), lane)
        # token_bucket's figures name its peak too: 15.
        figures, _ = self.y_figures(
            [p for p in zooms if p.get("data-lane") == "token_bucket"][0])
        self.assertIn(15, figures)

    def delayed_admissions(self, lane):
        """(time, time it acts) of each admission with a delay in the CSV, for `lane`."""
        rows = [line.split(",") for line in self.csv.splitlines()[1:]]
        header = self.csv.splitlines()[0].split(",")
        at = {name: i for i, name in enumerate(header)}
        return {(int(r[at["time_us"]]), int(r[at["time_us"]]) + int(r[at["delay_us"]]))
                for r in rows if r[at["algorithm"]] == lane and r[at["allowed"]] == "1"
                and int(r[at["delay_us"]]) > 0 and int(r[at["cost"]]) > 0}

    def test_leaky_bucket_zoom_marks_when_each_delayed_admission_acts(self):
        first, last, _ = burst_of(ARGS.trace, 100_000)
        for lane in ALGORITHMS:
            zoom = [p for p in self.panels(lane) if p.get("data-panel") == "zoom"][0]
            t0, t1 = int(zoom.get("data-t0")), int(zoom.get("data-t1"))
            x0 = float(zoom.get("data-x0"))
            to_px = (float(zoom.get("data-x1")) - x0) / (t1 - t0)
            delayed = {(t, acts) for t, acts in self.delayed_admissions(lane) if t0 <= t <= t1}
            marks = [g for g in zoom.iter(NS + "g") if g.get("data-series") == "acts"]
            self.assertEqual({(int(g.get("data-t")), int(g.get("data-acts"))) for g in marks},
                             delayed, lane)
            if lane != "leaky_bucket":
                self.assertFalse(delayed, lane)  # Only leaky_bucket delays.
                continue
            # The burst's admissions queue up to B = 10, 1/N = 100 ms apart: the zoom shows
            # each of them act.
            in_burst = [(t, acts) for t, acts in delayed if first <= t <= last]
            self.assertGreaterEqual(len(in_burst), 9)
            self.assertTrue(all(acts <= t1 for _, acts in in_burst), (in_burst, t1))
            for g in marks:
                t, acts = int(g.get("data-t")), int(g.get("data-acts"))
                link = g.find(NS + "line")
                # The line leaves the request's bar (3 px wide).
                self.assertLessEqual(abs(float(link.get("x1")) - (x0 + (t - t0) * to_px)), 3)
                circle = g.find(NS + "circle")
                if acts > t1:
                    self.assertIsNone(circle)  # Acts after the zoom: the line to its edge.
                    continue
                # A mark where it acts, at the end of its line.
                self.assertAlmostEqual(float(circle.get("cx")), x0 + (acts - t0) * to_px,
                                       delta=0.2)
                self.assertEqual(circle.get("cx"), link.get("x2"))
                self.assertEqual(circle.get("cy"), link.get("y2"))
            # Acts 1/N apart on screen, not all at the burst as the decisions are.
            xs = sorted(float(g.find(NS + "circle").get("cx")) for g in marks
                        if g.find(NS + "circle") is not None)
            self.assertGreaterEqual(min(b - a for a, b in zip(xs, xs[1:])),
                                    100_000 * to_px * 0.99)

    def test_ticks_stay_apart_or_are_counted(self):
        for panel in self.panels():
            total = 0
            for series in ("admitted", "rejected"):
                xs = sorted(float(r.get("x")) for r in self.marks(panel, series))
                for a, b in zip(xs, xs[1:]):
                    self.assertGreaterEqual(b - a, 2.9, panel.attrib)
                total += sum(int(r.get("data-count")) for r in self.marks(panel, series))
            if panel.get("data-panel") != "zoom":  # The whole run: every request once.
                self.assertEqual(total, len(self.csv.splitlines()[1:]) // len(ALGORITHMS))

    def notes(self, root):
        return {t.get("data-lane"): "".join(t.itertext()) for t in root.iter(NS + "text")
                if t.get("class") == "note"}

    def test_every_lane_says_what_its_algorithm_can_pass(self):
        notes = self.notes(self.root)
        self.assertEqual(set(notes), set(ALGORITHMS))
        for lane in ("token_bucket", "gcra"):
            self.assertIn("burst B = 10", notes[lane])
            self.assertIn("B + N = 20", notes[lane])
            self.assertIn("here 15", notes[lane])  # The peak the line reaches.
        self.assertIn("burst B = 10", notes["leaky_bucket"])
        self.assertIn("2N = 20", notes["fixed_window"])
        _, root = simulate(ARGS.trace, "--compare", "token_bucket,gcra", "--limit", "10",
                           "--period", "1s", "--burst", "5")
        for lane, note in self.notes(root).items():
            self.assertIn("burst B = 5", note)
            self.assertIn("B + N = 15", note)

    def test_the_csv_is_the_same_with_or_without_the_picture(self):
        done = subprocess.run([ARGS.sluice, "simulate", *self.flags, ARGS.trace],
                              capture_output=True, text=True, check=True)
        self.assertEqual(done.stdout, self.csv)

    def test_without_a_burst_to_pull_apart_there_is_one_panel(self):
        even = [f"{1_000_000 + i * 50_000},{'ab'[i % 2]},1" for i in range(40)]
        one_instant = ["1000000,a,1"] * 5 + [f"{2_000_000 + i * 200_000},a,1" for i in range(9)]
        for name, rows in (("even", even), ("one instant", one_instant)):
            with self.subTest(name), tempfile.NamedTemporaryFile(
                    "w", suffix=".csv", delete=False) as f:
                f.write("time_us,key,cost\n" + "\n".join(rows) + "\n")
                f.close()
                try:
                    _, root = simulate(f.name, "--algorithm", "gcra", "--limit", "10",
                                       "--period", "1s")
                finally:
                    os.unlink(f.name)
                panels = [g.get("data-panel") for g in root.iter(NS + "g")
                          if g.get("class") == "panel"]
                self.assertEqual(panels, ["run"])
                series = {e.get("data-series") for e in root.iter() if e.get("data-series")}
                self.assertNotIn("zoom", series)
                self.assertIn("key:a", series)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", required=True)
    parser.add_argument("--trace", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0], *rest])
