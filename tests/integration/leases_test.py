#!/usr/bin/env python3
"""Concurrency limits across a fleet: two sluiced on one redis-server, a rule of
`concurrency: 2` with leases of 2 s. Workers that take both slots and are killed before they
give them back: their leases expire by themselves and the slots return. A lease given back
through one server frees its slot for a worker waiting on the other (leases of an hour there,
so that only the release can). Bounds are what the code guarantees, not a quiet machine's
timing: a slot never comes back before its lease's TTL (a lower bound, which a loaded machine
only makes easier to meet); how soon after it comes back is not asserted, only that it does
(within a max wait of minutes, a watchdog). The waiter on the other server is seen waiting
(its server asking Redis again) before the release, not guessed to be by a sleep.

    python3 tests/integration/leases_test.py --sluiced build/bin/sluiced --sluice build/bin/sluice

Python 3 standard library only; needs redis-server.
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
import unittest

import sluiced
from redis_test import Redis

TTL = 2.0
RULES = f"""
domain: jobs
descriptors:
  - key: job
    concurrency: 2
    lease_ttl: {TTL:g}s
  - key: job_long
    concurrency: 2
    lease_ttl: 1h
"""


class LeasesTest(unittest.TestCase):
    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="sluice-leases-test.")
        with open(os.path.join(self.workdir, "rules.yaml"), "w") as f:
            f.write(RULES)
        self.redis = Redis(self.workdir)
        flags = sluiced.with_redis_timeout(["--store", self.redis.url])
        self.a = sluiced.Sluiced(self.workdir, *flags)
        self.b = sluiced.Sluiced(self.workdir, *flags)

    def tearDown(self):
        codes = [server.stop() for server in (self.a, self.b)]
        self.redis.stop()
        self.assertEqual(codes, [0, 0])
        shutil.rmtree(self.workdir, ignore_errors=True)

    def command(self, server, verb, *args):
        return [sluiced.SLUICE, verb, "--server", f"http://127.0.0.1:{server.port}", *args]

    def acquire(self, server, max_wait, descriptor="job=mail"):
        return self.command(server, "acquire", "--domain", "jobs", "--descriptor", descriptor,
                            "--max-wait", max_wait)

    def free_slots(self, server):
        """The slots free now, by a cost-0 check (which takes nothing)."""
        run = subprocess.run(
            self.command(server, "check", "--domain", "jobs", "--descriptor", "job=mail",
                         "--cost", "0"), capture_output=True, text=True, timeout=60)
        return json.loads(run.stdout)["remaining"]

    def test_killed_workers_leases_expire_and_the_slots_return(self):
        # Two workers take both slots and hang, as a worker that crashed would hold them. Their
        # leases are granted after `spawned` and before `taken`: they expire between
        # spawned + TTL and taken + TTL, whenever a loaded machine ran the workers.
        workers, files = [], []
        spawned = time.monotonic()
        for i in range(2):
            files.append(os.path.join(self.workdir, f"lease{i}"))
            script = (f'lease=$({" ".join(self.acquire(self.a, "120s"))}) || exit $?; '
                      f'echo "$lease" > {files[-1]}.tmp && mv {files[-1]}.tmp {files[-1]}; '
                      f'exec sleep 60')
            workers.append(subprocess.Popen(["bash", "-c", script]))
        deadline = time.monotonic() + 180  # A watchdog.
        while not all(os.path.exists(f) for f in files) and time.monotonic() < deadline:
            time.sleep(0.01)
        taken = time.monotonic()
        self.assertTrue(all(os.path.exists(f) for f in files), "the workers took no leases")
        for worker in workers:
            worker.kill()
            worker.wait(timeout=60)
        free = self.free_slots(self.b)
        self.assertTrue(free == 0 or time.monotonic() - spawned >= TTL, free)

        # The slots stay taken until the leases expire: told so at once, with the time left
        # (unless a slow machine got here after they expired: then it took a slot, given back).
        run = subprocess.run(self.acquire(self.b, "0s"), capture_output=True, text=True,
                             timeout=60)
        if run.returncode == 0:
            self.assertGreaterEqual(time.monotonic() - spawned, TTL, "a slot before expiry")
            self.release(self.b, run.stdout.strip())
        else:
            self.assertEqual(run.returncode, 75, run.stderr)
            retry = float(run.stderr.split("retry after ")[1].rstrip("s\n"))
            self.assertGreater(retry, 0)
            self.assertLessEqual(retry, TTL)

        # Then they come back by themselves: a worker waiting on either server gets one (its
        # max wait a watchdog: a slot back after the TTL of 2 s, on any machine).
        start = time.monotonic()
        first = subprocess.run(self.acquire(self.b, "120s"), capture_output=True, text=True,
                               timeout=180)
        answered = time.monotonic()
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertRegex(first.stdout, r"^[0-9a-f]{32}\.\S+\n$")
        # Not before the leases' end.
        self.assertGreaterEqual(answered - spawned, TTL)
        # Both dead leases were granted before `taken`, so both have expired by taken + TTL,
        # however late the second of them came: then one slot is free (two once the first's
        # lease, granted after `start`, has expired too on a slow machine).
        time.sleep(max(0.0, taken + TTL + 0.01 - time.monotonic()))
        free = self.free_slots(self.a)
        self.assertTrue(free == 1 or (free == 2 and time.monotonic() - start >= TTL), free)
        second = subprocess.run(self.acquire(self.a, "0s"), capture_output=True, text=True,
                                timeout=60)
        self.assertEqual(second.returncode, 0, second.stderr)
        # A dead worker's lease, long expired, is not there to give back.
        with open(files[0]) as f:
            dead = f.read().strip()
        gone = subprocess.run(self.command(self.a, "release", dead), capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(gone.returncode, 1, gone.stderr)

    def release(self, server, lease):
        run = subprocess.run(self.command(server, "release", lease), capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(run.returncode, 0, run.stderr)

    def test_a_release_through_one_server_wakes_a_waiter_on_the_other(self):
        # Leases of an hour: only the release can free a slot while the test runs. The waiter
        # on b learns of it by asking Redis again (every 100 ms) rather than at the lease's end.
        # b serves nobody else: its calls to Redis are the waiter's, and a second one (the
        # first refused, with both slots held) means that it is waiting.
        held = []
        for _ in range(2):
            run = subprocess.run(self.acquire(self.a, "0s", "job_long=mail"),
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(run.returncode, 0, run.stderr)
            held.append(run.stdout.strip())
        asked = b_calls = self.b.metric("sluice_redis_script_calls_total")
        waiter = subprocess.Popen(self.acquire(self.b, "120s", "job_long=mail"),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 180  # A watchdog.
        while b_calls < asked + 2 and waiter.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
            b_calls = self.b.metric("sluice_redis_script_calls_total")
        self.assertIsNone(waiter.poll(), "the waiter had a slot with both held")
        self.assertGreaterEqual(b_calls, asked + 2, "the waiter never asked twice")
        self.release(self.a, held[0])
        out, err = waiter.communicate(timeout=180)
        self.assertEqual(waiter.returncode, 0, err)  # Within its max wait, not an hour.
        self.assertRegex(out, r"^[0-9a-f]{32}\.\S+\n$")


if __name__ == "__main__":
    sluiced.main(sluice=True)
