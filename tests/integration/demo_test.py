#!/usr/bin/env python3
"""The first demo a newcomer runs (README, `make run`): examples/try.sh against sluiced with
examples/sluice.yaml prints five 200s, then a 429, every time. Run 20 times in a row on one
sluiced, well within a minute: each run asks for a user of its own (its rule, a sliding_log
of 5 per minute, once had one user, bob, for every run, and a second run within the minute
printed six 429s). Python 3 standard library only; needs curl (scripts/install-deps).

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
        server = sluiced.Sluiced(workdir, "--config", os.path.join(EXAMPLES, "sluice.yaml"))
        try:
            for run in range(20):
                out = subprocess.run(
                    ["bash", os.path.join(EXAMPLES, "try.sh")], capture_output=True,
                    text=True, timeout=120,
                    env={**os.environ, "HTTP": f"127.0.0.1:{server.port}"})
                self.assertEqual(out.returncode, 0, out.stderr)
                statuses = [line.split()[0] for line in out.stdout.splitlines()]
                self.assertEqual(statuses, ["200"] * 5 + ["429"],
                                 f"run {run + 1} of 20:\n{out.stdout}")
                # The demo's own rule decided (not the 5 per second of any user).
                self.assertTrue(out.stdout.splitlines()[0].split()[1].startswith('"try"'),
                                out.stdout)
        finally:
            self.assertEqual(server.stop(), 0, server.output()[-2000:])
            shutil.rmtree(workdir, ignore_errors=True)

if __name__ == "__main__":
    sluiced.main()
