#!/usr/bin/env python3
"""A change of limit across a fleet on Redis: three sluiced on one redis-server, reloaded one
by one under load, first lowering a limit, then raising it; then one restarted with the limit
lowered again, which carries from the figures the fleet keeps in Redis. No key gets a fresh budget: a
server that has reloaded carries what each key used (converted), and one that has not yet goes
on counting on the key as it was (Redis keeps it, marked as carried), so that in the hour the
test runs in no key is admitted more than the larger of the limits in force. Python 3 standard
library only.

    python3 tests/integration/change_fleet_test.py --sluiced build/bin/sluiced
"""
import collections
import os
import random
import shutil
import signal
import tempfile
import threading
import time
import unittest

import sluiced
from redis_cluster import cli
from redis_test import Redis

RULES = """
domain: fleet
descriptors:
  - key: user
    rate_limit: {name: users, unit: hour, requests_per_unit: %d}
"""
USERS = ["u%d" % i for i in range(8)]


def wait_for(predicate, what, timeout=120.0):
    """Polls `predicate` until it holds; a watchdog only (an event ends the wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("%s within %d s" % (what, timeout))


class Load:
    """Threads sending checks for random users to random servers until stopped, counting what
    each user was admitted."""

    def __init__(self, servers, threads=4):
        self.servers = servers
        self.admitted = collections.Counter()
        self.sent = 0
        self.errors = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(seed,)) for seed in range(threads)]
        for t in self.threads:
            t.start()

    def _run(self, seed):
        rnd = random.Random(seed)
        while not self.stopping.is_set():
            user = rnd.choice(USERS)
            try:
                status, answer = rnd.choice(self.servers).check(user, domain="fleet")
            except Exception as e:  # noqa: BLE001 - reported by the test, not lost
                with self.lock:
                    self.errors.append(repr(e))
                return
            with self.lock:
                self.sent += 1
                if status == 200:
                    self.admitted[user] += 1
                elif status != 429:
                    self.errors.append("HTTP %d: %r" % (status, answer))

    def await_more(self, n):
        """Waits until the threads have sent `n` more checks."""
        with self.lock:
            target = self.sent + n
        wait_for(lambda: self.sent >= target or self.errors, "%d more checks" % n)

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join()
        return self.admitted


class FleetChangeTest(unittest.TestCase):

    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="sluice-change-fleet.")
        self.redis = Redis(self.workdir)
        self.servers = []
        for i in range(3):
            workdir = os.path.join(self.workdir, "s%d" % i)
            os.mkdir(workdir)
            self.write_rules(workdir, 10)
            self.servers.append(self.start(workdir))

    def start(self, workdir):
        return sluiced.Sluiced(workdir, "--store", self.redis.url, "--watch-interval", "0",
                               *sluiced.with_redis_timeout([]))

    def tearDown(self):
        codes = [server.stop() for server in self.servers if server.proc.poll() is None]
        self.redis.stop()
        self.assertEqual(codes, [0] * len(codes))
        shutil.rmtree(self.workdir, ignore_errors=True)

    @staticmethod
    def write_rules(workdir, n):
        path = os.path.join(workdir, "rules.yaml")
        with open(path + ".new", "w") as f:
            f.write(RULES % n)
        os.replace(path + ".new", path)

    def reload(self, server, n):
        before = server.metric("sluice_config_reloads_total")
        self.write_rules(server.workdir, n)
        server.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: server.metric("sluice_config_reloads_total") == before + 1,
                 "server on port %d reloaded" % server.port)
        self.assertEqual(server.rules_limit("fleet.user")[0]["limit"], n)

    def rolling_reload(self, n):
        """Reloads the servers one by one to `n` per hour while the load runs; returns what it
        admitted per user."""
        load = Load(self.servers)
        try:
            load.await_more(40)
            for server in self.servers:
                self.reload(server, n)
                load.await_more(60)  # Old and new rules side by side, on every user.
        finally:
            admitted = load.stop()
        self.assertEqual(load.errors, [])
        return admitted

    def count(self, n, user):
        """What the Redis key of `user` under n per hour counts (docs/redis.md, "Keys"; the
        caller's key joins the domain, the descriptor's key and value)."""
        keys = cli(self.redis.port, "KEYS", "sluice:f%d/3600000000:{*fleet*user*%s}" % (n, user))
        self.assertNotIn("\n", keys)  # One key. (Not splitlines: it splits on \x1d to \x1f.)
        value = cli(self.redis.port, "GET", keys) if keys else ""
        return int(value.split()[1]) if value else 0

    def test_a_rolling_reload_gives_no_key_a_fresh_budget(self):
        sluiced.away_from_edge(3600, 600)  # One hour's window for the whole test.
        used = collections.Counter()
        for i, user in enumerate(USERS):
            for j in range(6):
                status, answer = self.servers[(i + j) % 3].check(user, domain="fleet")
                self.assertEqual(status, 200, answer)
                used[user] += 1
        # Lowered to 4: a server that has reloaded carries the count it finds (at least the 6
        # used before) and denies; one that has not yet admits what is left of 10 on the key
        # as it was, never 10 afresh. Every admission is on that key.
        used.update(self.rolling_reload(4))
        for user in USERS:
            self.assertLessEqual(used[user], 10, "%s admitted past the old limit" % user)
            self.assertEqual(self.count(10, user), used[user], user)
            self.assertGreaterEqual(self.count(4, user), 6, user)
            for server in self.servers:
                status, answer = server.check(user, domain="fleet")
                self.assertEqual(status, 429, "%s on port %d: %r" % (user, server.port, answer))
        # Raised to 20: a server that has reloaded starts each key from what the lowered limit
        # counted (nothing afresh) and admits up to 20 in all; the others deny.
        lowered = {user: self.count(4, user) for user in USERS}
        raised = self.rolling_reload(20)
        for user in USERS:
            self.assertEqual(self.count(20, user), lowered[user] + raised[user], user)
            self.assertLessEqual(self.count(20, user), 20, user)
            status, answer = self.servers[0].check(user, domain="fleet")
            self.assertEqual(answer["remaining"], max(0, 20 - self.count(20, user)), answer)
        # Restarted with the limit lowered to 8 (a rolling restart's first server): it has no
        # rules in force to carry from, and reads the figures the fleet last loaded from Redis.
        self.assertEqual(self.servers[2].stop(), 0)
        self.write_rules(self.servers[2].workdir, 8)
        self.servers[2] = self.start(self.servers[2].workdir)
        for user in USERS:
            status, answer = self.servers[2].check(user, domain="fleet")
            self.assertEqual(self.count(8, user), self.count(20, user) + (status == 200), user)
            self.assertEqual(status, 200 if self.count(20, user) < 8 else 429, answer)


if __name__ == "__main__":
    sluiced.main(verbosity=2)
