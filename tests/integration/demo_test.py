#!/usr/bin/env python3
"""The first demo a newcomer runs (README, `make run`): examples/try.sh against sluiced with
examples/sluice.yaml prints five 200s, then a 429, every time. Run 20 times in a row, each on
a fresh sluiced as `make run` starts it: its rule (user bob) once was a fixed window aligned
to the second, and six curls crossed its edge in about one run in four (six 200s). Python 3
standard library only; needs curl (scripts/install-deps).

    python3 tests/integration/demo_test.py --sluiced build/bin/sluiced
"""

import os
import shutil
import subprocess
import tempfile
import unittest

import sluiced

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")


class DemoTest(unittest.TestCase):
    def test_five_200s_then_a_429_twenty_times_in_a_row(self):
        workdir = tempfile.mkdtemp(prefix="sluice-demo-test.")
        try:
            for run in range(20):
                server = sluiced.Sluiced(workdir, "--config",
                                         os.path.join(EXAMPLES, "sluice.yaml"))
                try:
                    out = subprocess.run(
                        ["bash", os.path.join(EXAMPLES, "try.sh")], capture_output=True,
                        text=True, timeout=120,
                        env={**os.environ, "HTTP": f"127.0.0.1:{server.port}"})
                finally:
                    self.assertEqual(server.stop(), 0, server.output()[-2000:])
                self.assertEqual(out.returncode, 0, out.stderr)
                statuses = [line.split()[0] for line in out.stdout.splitlines()]
                self.assertEqual(statuses, ["200"] * 5 + ["429"],
                                 f"run {run + 1} of 20:\n{out.stdout}")
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sluiced.main()
