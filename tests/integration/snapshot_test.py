#!/usr/bin/env python3
"""sluiced restarts without handing out fresh quotas: the memory store's snapshot.

A client uses up its limit; sluiced stops (SIGTERM: the snapshot is written at shutdown) or is
killed (SIGKILL: only the periodic snapshot survives); a new sluiced loads the snapshot and
the client is still limited. A corrupt snapshot is reported and ignored: the server starts
empty. Python 3 standard library only.

    python3 tests/integration/snapshot_test.py --sluiced build/bin/sluiced
"""

import argparse
import os
import signal
import sys
import tempfile
import time
import unittest

import sluiced

# A limit long enough that nothing resets during the test.
RULES = """
domain: snap
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
"""


class SnapshotTest(unittest.TestCase):
    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="sluice-snapshot-test.")
        with open(os.path.join(self.workdir, "rules.yaml"), "w") as f:
            f.write(RULES)
        self.snapshot = os.path.join(self.workdir, "store.snap")

    def use_up(self, server, user):
        for i in range(3):
            status, answer = server.check(user)
            self.assertEqual(status, 200, answer)
        status, _ = server.check(user)
        self.assertEqual(status, 429)

    def test_graceful_restart_keeps_limits(self):
        first = sluiced.Sluiced(self.workdir, "--snapshot", self.snapshot)
        self.use_up(first, "ann")
        first.check("bob")  # bob has 2 left.
        self.assertFalse(os.path.exists(self.snapshot))  # Written only at shutdown.
        self.assertEqual(first.stop(), 0)
        self.assertTrue(os.path.exists(self.snapshot))

        second = sluiced.Sluiced(self.workdir, "--snapshot", self.snapshot)
        try:
            self.assertIn("loaded 2 key(s) from snapshot", second.output())
            status, answer = second.check("ann")
            self.assertEqual(status, 429, answer)
            status, answer = second.check("bob")
            self.assertEqual((status, answer["remaining"]), (200, 1))
            status, answer = second.check("carl")  # A key never seen: a full quota.
            self.assertEqual((status, answer["remaining"]), (200, 2))
        finally:
            self.assertEqual(second.stop(), 0)

    def test_without_a_snapshot_a_restart_forgets(self):
        # The control for the test above: the same steps without --snapshot.
        first = sluiced.Sluiced(self.workdir)
        self.use_up(first, "ann")
        self.assertEqual(first.stop(), 0)
        second = sluiced.Sluiced(self.workdir)
        try:
            status, _ = second.check("ann")
            self.assertEqual(status, 200)
        finally:
            second.stop()

    def test_periodic_snapshot_survives_a_crash(self):
        first = sluiced.Sluiced(self.workdir, "--snapshot", self.snapshot, "--snapshot-interval", "100ms")
        self.use_up(first, "dora")
        # Two snapshots written since (a file renamed over the last, so a new inode or time):
        # the second began after the last request, however late a loaded machine ran it.
        def version():
            try:
                stat = os.stat(self.snapshot)
            except FileNotFoundError:  # None written yet.
                return None
            return stat.st_ino, stat.st_mtime_ns
        seen, changes, deadline = version(), 0, time.monotonic() + 60
        while changes < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
            if version() != seen:
                seen, changes = version(), changes + 1
        self.assertEqual(changes, 2, "the snapshot was not rewritten twice in 60 s")
        self.assertEqual(first.stop(signal.SIGKILL), -signal.SIGKILL)
        second = sluiced.Sluiced(self.workdir, "--snapshot", self.snapshot)
        try:
            status, answer = second.check("dora")
            self.assertEqual(status, 429, answer)
        finally:
            second.stop()

    def test_corrupt_snapshot_is_reported_and_ignored(self):
        first = sluiced.Sluiced(self.workdir, "--snapshot", self.snapshot)
        self.use_up(first, "eve")
        self.assertEqual(first.stop(), 0)
        with open(self.snapshot, "r+b") as f:
            data = bytearray(f.read())
            data[len(data) // 2] ^= 0xFF
            f.seek(0)
            f.write(data)
        second = sluiced.Sluiced(self.workdir, "--snapshot", self.snapshot)
        try:
            self.assertIn("ignoring snapshot", second.output())
            status, _ = second.check("eve")
            self.assertEqual(status, 200)
        finally:
            self.assertEqual(second.stop(), 0)

    def test_truncated_and_empty_snapshots_are_ignored(self):
        first = sluiced.Sluiced(self.workdir, "--snapshot", self.snapshot)
        self.use_up(first, "fay")
        self.assertEqual(first.stop(), 0)
        size = os.path.getsize(self.snapshot)
        for length in (size - 1, 0):
            os.truncate(self.snapshot, length)
            server = sluiced.Sluiced(self.workdir, "--snapshot", self.snapshot)
            try:
                self.assertIn("ignoring snapshot", server.output())
                status, _ = server.check("fay")
                self.assertEqual(status, 200)
            finally:
                server.stop(signal.SIGKILL)  # Keep the damaged file as it is.


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluiced", required=True)
    args, rest = parser.parse_known_args()
    sluiced.BINARY = os.path.abspath(args.sluiced)
    unittest.main(argv=[sys.argv[0], *rest])
