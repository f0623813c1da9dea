#!/usr/bin/env python3
"""The picture of `sluice simulate --svg`, read as XML: a legend with a swatch for every series
drawn, titles on both axes, colours that tell the limit from a rejection, the burst framed
wide enough that its requests stay apart (or are counted per bar), and a note in every lane
saying how much its algorithm can pass in one period (why token_bucket reaches 15 against a
limit of 10). The CSV is the same with or without --svg. Python 3 standard library only.

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
            framed = [p for p in self.panels(lane)
                      if int(p.get("data-t0")) <= first and last <= int(p.get("data-t1"))
                      and (last - first) * 3 >= int(p.get("data-t1")) - int(p.get("data-t0"))]
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
            self.assertGreaterEqual((last - first) * to_px / n, 4, lane)

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
