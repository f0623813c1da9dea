#!/usr/bin/env python3
"""Concurrency limits across a fleet: two sluiced on one redis-server, a rule of
`concurrency: 2` with leases of 2 s. Workers that take both slots and are killed before they
give them back: their leases expire by themselves and the slots return. A lease given back
through one server frees its slot for a worker waiting on the other.

    python3 tests/integration/leases_test.py --sluiced build/bin/sluiced --sluice build/bin/sluice

Python 3 standard library only; needs redis-server.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import sluiced
from redis_test import Redis

ARGS = None
TTL = 2.0
RULES = f"""
domain: jobs
descriptors:
  - key: job
    concurrency: 2
    lease_ttl: {TTL:g}s
"""


class LeasesTest(unittest.TestCase):
    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="sluice-leases-test.")
        with open(os.path.join(self.workdir, "rules.yaml"), "w") as f:
            f.write(RULES)
        self.redis = Redis(self.workdir)
        self.a = sluiced.Sluiced(self.workdir, "--store", self.redis.url)
        self.b = sluiced.Sluiced(self.workdir, "--store", self.redis.url)

    def tearDown(self):
        codes = [server.stop() for server in (self.a, self.b)]
        self.redis.stop()
        self.assertEqual(codes, [0, 0])
        shutil.rmtree(self.workdir, ignore_errors=True)

    def command(self, server, verb, *args):
        return [ARGS.sluice, verb, "--server", f"http://127.0.0.1:{server.port}", *args]

    def acquire(self, server, max_wait):
        return self.command(server, "acquire", "--domain", "jobs", "--descriptor", "job=mail",
                            "--max-wait", max_wait)

    def free_slots(self, server):
        """The slots free now, by a cost-0 check (which takes nothing)."""
        run = subprocess.run(
            self.command(server, "check", "--domain", "jobs", "--descriptor", "job=mail",
                         "--cost", "0"), capture_output=True, text=True, timeout=10)
        return json.loads(run.stdout)["remaining"]

    def test_killed_workers_leases_expire_and_the_slots_return(self):
        # Two workers take both slots and hang, as a worker that crashed would hold them.
        workers, files = [], []
        for i in range(2):
            files.append(os.path.join(self.workdir, f"lease{i}"))
            script = (f'lease=$({" ".join(self.acquire(self.a, "5s"))}) || exit $?; '
                      f'echo "$lease" > {files[-1]}.tmp && mv {files[-1]}.tmp {files[-1]}; '
                      f'exec sleep 60')
            workers.append(subprocess.Popen(["bash", "-c", script]))
        deadline = time.monotonic() + 10
        while not all(os.path.exists(f) for f in files) and time.monotonic() < deadline:
            time.sleep(0.01)
        taken = time.monotonic()
        self.assertTrue(all(os.path.exists(f) for f in files), "the workers took no leases")
        for worker in workers:
            worker.kill()
            worker.wait(timeout=5)
        self.assertEqual(self.free_slots(self.b), 0)

        # The slots stay taken until the leases expire: told so at once, with the time left.
        run = subprocess.run(self.acquire(self.b, "0s"), capture_output=True, text=True,
                             timeout=10)
        self.assertEqual(run.returncode, 75, run.stderr)
        retry = float(run.stderr.split("retry after ")[1].rstrip("s\n"))
        self.assertGreater(retry, 0)
        self.assertLessEqual(retry, TTL)

        # Then they come back by themselves: a worker waiting on either server gets one.
        start = time.monotonic()
        first = subprocess.run(self.acquire(self.b, "5s"), capture_output=True, text=True,
                               timeout=10)
        answered = time.monotonic()
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertRegex(first.stdout, r"^[0-9a-f]{32}\.\S+\n$")
        # Not before the leases' end (taken was after they were granted), nor long after it.
        self.assertGreaterEqual(answered - taken, TTL - 0.3)
        self.assertLess(answered - start, TTL + 0.5)
        # Both dead leases were granted before `taken`, so both have expired by taken + TTL,
        # however late the second of them came: then exactly one slot is free.
        time.sleep(max(0.0, taken + TTL + 0.01 - time.monotonic()))
        self.assertEqual(self.free_slots(self.a), 1)
        second = subprocess.run(self.acquire(self.a, "0s"), capture_output=True, text=True,
                                timeout=10)
        self.assertEqual(second.returncode, 0, second.stderr)
        # A dead worker's lease, long expired, is not there to give back.
        with open(files[0]) as f:
            dead = f.read().strip()
        gone = subprocess.run(self.command(self.a, "release", dead), capture_output=True,
                              text=True, timeout=10)
        self.assertEqual(gone.returncode, 1, gone.stderr)

        # A lease given back through server a frees its slot for a worker waiting on b, which
        # learns of it by asking Redis again (every 100 ms) rather than at the lease's end.
        waiter = subprocess.Popen(self.acquire(self.b, "10s"), stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
        self.assertIsNone(waiter.poll(), "the waiter did not wait for a slot")
        released = time.monotonic()
        back = subprocess.run(self.command(self.a, "release", first.stdout.strip()),
                              capture_output=True, text=True, timeout=10)
        self.assertEqual(back.returncode, 0, back.stderr)
        out, _ = waiter.communicate(timeout=10)
        self.assertEqual(waiter.returncode, 0)
        self.assertTrue(out.strip())
        self.assertLess(time.monotonic() - released, 1.0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluiced", required=True)
    parser.add_argument("--sluice", required=True)
    ARGS, rest = parser.parse_known_args()
    sluiced.BINARY = os.path.abspath(ARGS.sluiced)
    ARGS.sluice = os.path.abspath(ARGS.sluice)
    unittest.main(argv=[sys.argv[0], *rest])
