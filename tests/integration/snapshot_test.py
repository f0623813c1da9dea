#!/usr/bin/env python3
"""sluiced restarts without handing out fresh quotas: the memory store's snapshot.

A client uses up its limit; sluiced stops (SIGTERM: the snapshot is written at shutdown) or is
killed (SIGKILL: only the periodic snapshot survives); a new sluiced loads the snapshot and
the client is still limited. A snapshot that cannot be loaded stops the start, naming the file
and what is wrong, and is left as it is (as redis-server does with a bad RDB file), unless
--snapshot-discard-corrupt moves it aside; a path that cannot be written is refused at start,
and a snapshot that still cannot be written at shutdown makes the exit code 1. Python 3
standard library only.

    python3 tests/integration/snapshot_test.py --sluiced build/bin/sluiced
"""

import os
import glob
import signal
import subprocess
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

    def restart_with_a_changed_limit(self, keep_history):
        """ann uses 3 of 3 and bob 1; sluiced restarts with 5 an hour: their answers."""
        first = sluiced.Sluiced(self.workdir, "--snapshot", self.snapshot)
        self.use_up(first, "ann")
        first.check("bob")
        self.assertEqual(first.stop(), 0)
        self.assertTrue(os.path.exists(self.snapshot + ".limits"))
        if not keep_history:
            os.remove(self.snapshot + ".limits")
        with open(os.path.join(self.workdir, "rules.yaml"), "w") as f:
            f.write(RULES.replace("requests_per_unit: 3", "requests_per_unit: 5"))
        second = sluiced.Sluiced(self.workdir, "--snapshot", self.snapshot)
        try:
            return [second.check(user) for user in ("ann", "bob", "carl")]
        finally:
            self.assertEqual(second.stop(), 0)

    def test_a_restart_with_a_changed_limit_keeps_what_each_key_used(self):
        # The limits in force at the snapshot are written beside it (FILE.limits), so rules
        # changed while the server was down carry the counts (docs/server.md).
        (ann, bob, carl) = self.restart_with_a_changed_limit(keep_history=True)
        self.assertEqual((ann[0], ann[1]["remaining"]), (200, 1), "3 + 1 used of 5")
        self.assertEqual((bob[0], bob[1]["remaining"]), (200, 3), "1 + 1 used of 5")
        self.assertEqual((carl[0], carl[1]["remaining"]), (200, 4), "a key never seen")

    def test_without_the_snapshots_limits_a_changed_limit_starts_afresh(self):
        # The control for the test above: what every restart with changed rules did before.
        (ann, _, _) = self.restart_with_a_changed_limit(keep_history=False)
        self.assertEqual((ann[0], ann[1]["remaining"]), (200, 4))

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

    def refused(self, *flags):
        """Runs sluiced expecting it to refuse to start: its stderr."""
        run = subprocess.run([sluiced.BINARY, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
                              "--config", os.path.join(self.workdir, "rules.yaml"), *flags],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 2, run.stderr)
        return run.stderr

    def damaged_snapshots(self):
        """A good snapshot of eve's used-up quota, then (name, damage) pairs to apply to it."""
        first = sluiced.Sluiced(self.workdir, "--snapshot", self.snapshot)
        self.use_up(first, "eve")
        self.assertEqual(first.stop(), 0)
        with open(self.snapshot, "rb") as f:
            good = f.read()
        flipped = bytearray(good)
        flipped[len(flipped) // 2] ^= 0xFF
        return [("checksum mismatch", bytes(flipped)), ("truncated", good[:-1]),
                ("the file is empty", b""), ("not a sluice snapshot", b"hello, world\n")]

    def test_a_snapshot_that_cannot_be_loaded_stops_the_start_and_is_kept(self):
        for says, data in self.damaged_snapshots():
            with self.subTest(damage=says):
                with open(self.snapshot, "wb") as f:
                    f.write(data)
                err = self.refused("--snapshot", self.snapshot)
                self.assertIn(self.snapshot, err)
                self.assertIn(says, err)
                self.assertIn("--snapshot-discard-corrupt", err)
                with open(self.snapshot, "rb") as f:
                    self.assertEqual(f.read(), data)  # Untouched.

    def test_discard_corrupt_moves_the_snapshot_aside_and_starts_empty(self):
        [(_, data)] = self.damaged_snapshots()[:1]
        with open(self.snapshot, "wb") as f:
            f.write(data)
        second = sluiced.Sluiced(self.workdir, "--snapshot", self.snapshot,
                                 "--snapshot-discard-corrupt")
        try:
            [aside] = glob.glob(self.snapshot + ".corrupt-*")
            self.assertRegex(aside, r"\.corrupt-\d{8}T\d{6}Z$")
            self.assertIn("moved it aside to " + aside, second.output())
            with open(aside, "rb") as f:
                self.assertEqual(f.read(), data)
            self.assertFalse(os.path.exists(self.snapshot))
            status, _ = second.check("eve")
            self.assertEqual(status, 200)
        finally:
            self.assertEqual(second.stop(), 0)
        self.assertTrue(os.path.exists(self.snapshot))  # A new one, at shutdown.

    def test_a_snapshot_path_that_cannot_be_written_is_refused_at_start(self):
        # Root may write anywhere: a directory that does not exist, a file in place of a
        # directory, and a directory in place of the file fail for every user.
        blocker = os.path.join(self.workdir, "a-file")
        open(blocker, "w").close()
        os.mkdir(os.path.join(self.workdir, "a-dir"))
        for path, says in ((os.path.join(self.workdir, "missing", "s.snap"),
                            "No such file or directory"),
                           (os.path.join(blocker, "s.snap"), "Not a directory"),
                           (os.path.join(self.workdir, "a-dir"), "is a directory")):
            with self.subTest(path=path):
                err = self.refused("--snapshot", path)
                self.assertIn("--snapshot " + path, err)
                self.assertIn(says, err)

    def test_a_snapshot_that_cannot_be_written_at_shutdown_exits_1(self):
        server = sluiced.Sluiced(self.workdir, "--snapshot", self.snapshot)
        self.use_up(server, "gil")
        os.mkdir(self.snapshot)  # Now the file cannot be renamed into place.
        os.mkdir(os.path.join(self.snapshot, "inside"))
        code = server.stop()
        self.assertEqual(code, 1, server.output()[-2000:])
        self.assertIn("WITHOUT a snapshot", server.output())


if __name__ == "__main__":
    sluiced.main()
