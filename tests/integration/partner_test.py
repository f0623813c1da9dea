#!/usr/bin/env python3
"""examples/partner, shortened to one window of each partner limit (20 s a run): workers that
tell sluiced what the partner answers meet fewer of its 429s than workers that do not, and the
partner never accepts more than its limit either way (it enforces it). Bounds only: how many
calls a loaded machine makes in a run is not asserted.

    python3 tests/integration/partner_test.py --sluiced build/bin/sluiced

Python 3 standard library only.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import sluiced

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.join(HERE, "..", "..", "examples", "partner", "run.py")


class PartnerTest(unittest.TestCase):
    def test_feedback_spares_the_partner_its_429s(self):
        with tempfile.TemporaryDirectory() as out:
            svg = os.path.join(out, "partner.svg")
            run = subprocess.run(
                [sys.executable, RUN, "--sluiced", sluiced.BINARY, "--seconds", "20", "--svg",
                 svg, "--json"], capture_output=True, text=True, timeout=300)
            self.assertEqual(run.returncode, 0, run.stderr)
            figures = json.loads(run.stdout)
            with open(svg) as f:
                picture = f.read()
        without, told = figures["without feedback"], figures["with feedback"]
        # The partner accepts at most 60 in the first window and 30 in the second.
        for r in (without, told):
            self.assertLessEqual(r["accepted"], 90, r)
        # Without feedback the rules' 10/s meets the partner's 6/s: 429s in both windows.
        self.assertGreater(without["partner_429"], 0, without)
        self.assertLess(told["partner_429"], without["partner_429"], figures)
        # A bar per second of each run, and each run's totals written on it.
        self.assertEqual(len(re.findall(r'<rect [^>]*fill="#1b6ac9"', picture)), 2 * 20)
        self.assertIn("with feedback: %d calls" % told["calls"], picture)


if __name__ == "__main__":
    sluiced.main(verbosity=2)
