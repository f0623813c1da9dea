#!/usr/bin/env python3
"""The picture examples/workers/run.py draws (out/workers.svg, `make workers`), read as XML from
calls made up here, without Redis or sluiced: figures with units on both axes, placed where
the data they name is drawn, and the dashed pace line labelled with the rules' pace. Python 3
standard library only.

    python3 tests/tools/workers_svg_test.py
"""

import argparse
import importlib.util
import os
import re
import unittest
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                   "workers", "run.py")


def load_run():
    spec = importlib.util.spec_from_file_location("workers_run", RUN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class WorkersPictureTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.workers = load_run()
        cls.args = argparse.Namespace(workers=4, per_second=5, per_day=100)
        # 100 calls 200 ms apart, round robin, as `make workers` makes them: 19.8 s.
        cls.calls = [(1_700_000_000.0 + i * 0.2, i % 4) for i in range(100)]
        cls.root = ET.fromstring(cls.workers.svg(cls.calls, cls.args))

    def axis(self, name):
        """The figures of axis `name`: [(value, x, y)], and its title's text."""
        figures = [(float(t.get("data-value")), float(t.get("x")), float(t.get("y")))
                   for t in self.root.iter(NS + "text")
                   if t.get("data-axis") == name and t.get("data-value") is not None]
        titles = ["".join(t.itertext()) for t in self.root.iter(NS + "text")
                  if t.get("data-axis") == name and t.get("class") == "axis-title"]
        return figures, titles

    def test_time_axis_has_figures_in_seconds(self):
        figures, titles = self.axis("x")
        self.assertEqual(len(titles), 1)
        self.assertIn("(s)", titles[0])
        values = [v for v, _, _ in figures]
        self.assertGreaterEqual(len(values), 4)
        self.assertEqual(values[0], 0)
        self.assertGreaterEqual(values[-1], 15)  # Most of the run's 19.8 s.
        self.assertLessEqual(values[-1], 19.8)
        # Each figure stands under the time it names: x is linear in the value, and the first
        # call's mark (time 0) is at the figure 0.
        (v0, x0, _), (v1, x1, _) = figures[0], figures[-1]
        for v, x, _ in figures:
            self.assertAlmostEqual(x, x0 + (v - v0) * (x1 - x0) / (v1 - v0), delta=0.2)
        first = [r for r in self.root.iter(NS + "rect") if r.get("fill") == "#2a7"][0]
        self.assertAlmostEqual(float(first.get("x")) + 1, x0, delta=0.2)

    def test_count_axis_has_figures_in_calls(self):
        figures, titles = self.axis("y")
        self.assertEqual(len(titles), 1)
        self.assertIn("calls", titles[0])
        values = [v for v, _, _ in figures]
        self.assertEqual(values[0], 0)
        self.assertEqual(values[-1], 100)
        self.assertGreaterEqual(len(values), 3)
        # Higher counts higher up, evenly.
        (v0, _, y0), (v1, _, y1) = figures[0], figures[-1]
        self.assertLess(y1, y0)
        for v, _, y in figures:
            self.assertAlmostEqual(y, y0 + (v - v0) * (y1 - y0) / (v1 - v0), delta=0.2)

    def test_the_pace_line_is_labelled_beside_it(self):
        lines = [e for e in self.root.iter(NS + "line") if e.get("data-series") == "pace"]
        self.assertEqual(len(lines), 1)
        line = lines[0]
        self.assertTrue(line.get("stroke-dasharray"))
        labels = [t for t in self.root.iter(NS + "text") if t.get("data-series") == "pace"]
        self.assertEqual(len(labels), 1)
        text = "".join(labels[0].itertext())
        self.assertIn("5 per second", text)
        self.assertIn("dashed", text)
        # Within 30 px of the line, measured straight down from the label's start.
        x1, y1, x2, y2 = (float(line.get(a)) for a in ("x1", "y1", "x2", "y2"))
        lx, ly = float(labels[0].get("x")), float(labels[0].get("y"))
        self.assertTrue(x1 <= lx <= x2)
        line_y = y1 + (lx - x1) * (y2 - y1) / (x2 - x1)
        self.assertLessEqual(abs(ly - line_y), 30)

    def test_a_mark_per_call(self):
        # tests/integration/workers_test.py counts the calls by this fill.
        marks = [r for r in self.root.iter(NS + "rect") if r.get("fill") == "#2a7"]
        self.assertEqual(len(marks), 100)
        self.assertEqual(len(re.findall('fill="#2a7"', self.workers.svg(self.calls, self.args))),
                         100)


if __name__ == "__main__":
    unittest.main()
