#!/usr/bin/env python3
"""Receipts and settles across a fleet (issue 33): three sluiced sharing one store and one
--secret-file, threads checking with "receipt": true on a random server and settling each
receipt on a random server at a random cost below or above what was charged.

Each request names a user (a fixed window of 80 a month, max_debt 2) and an app (gcra, burst 70
a month, max_debt 3), two of each drawn at random; 8 threads of 25 checks, enough to reach
the limits and meet max_debt. From the answers alone, per user and per app:

- the fixed window: the units the checks admitted, plus what the settles say they charged,
  minus what they say they gave back, are at most N + max_debt (the whole run sits in one
  window of 30 days: it does not start within 5 minutes of its end), and a cost-0 check's
  remaining afterwards is exactly N less that sum (0 when in debt): every figure true;
- the gcra: that sum is at most B + max_debt, plus one for each settle whose give-back fell
  short of what it asked (a bucket gives back only what is still ahead of the clock, and says
  it in whole units, floored: under one unit more is gone than it says), plus the refill over
  the run's duration (70 a month: a thousandth of a unit);
- a refund settled on one server is seen by the other two: a cost-0 check there answers the
  larger remaining, on both limits.

On one redis-server; on a Redis Cluster (redis_cluster.py), where a request's two limits hash
to different slots (split requests counted in /metrics, no give-back failed); and on memcached,
which skips itself with the reason when its store cannot settle (a receipt check or a settle
answered 5xx). Python 3 standard library only.

    python3 tests/integration/settle_fleet_test.py --sluiced build/bin/sluiced
"""

import collections
import os
import random
import shutil
import tempfile
import threading
import time
import unittest

import redis_cluster
import sluiced
from memcached_test import Memcached
from redis_test import Redis
from settle_fixture import MONTH, Connections, by_name, check_body, left, post, server_flags

# The window's limit and max_debt, the bucket's burst (and limit) and max_debt. The run's
# checks ask for about 400 units (8 x 25 of 2 units on average, settles as often above as
# below, up to 3 times the charge) over two users and two apps drawn at random: the limits
# are reached in the run's first half, and extras meet max_debt.
N, D_N, B, D_B = 80, 2, 70, 3
RULES = f"""
domain: fleet
descriptors:
  - key: user
    rate_limit: {{name: window, unit: month, requests_per_unit: {N}, max_debt: {D_N}}}
  - key: app
    rate_limit: {{name: bucket, algorithm: gcra, unit: month, requests_per_unit: {B},
                 burst: {B}, max_debt: {D_B}}}
"""
THREADS, ROUNDS = 8, 25


class FleetCase:
    """The load and the refund, on whatever store `store_url()` names (a mixin of TestCase)."""

    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="sluice-settle-fleet.")
        with open(os.path.join(self.workdir, "rules.yaml"), "w") as f:
            f.write(RULES)
        self.servers = []

    def tearDown(self):
        codes = [s.stop() for s in self.servers if s.proc.poll() is None]
        self.assertEqual(codes, [0] * len(codes))  # Clean exits, under the sanitizers too.
        shutil.rmtree(self.workdir, ignore_errors=True)

    def start_fleet(self, count=3):
        for _ in range(count):
            self.servers.append(sluiced.Sluiced(
                self.workdir, "--store", self.store_url(), "--redis-timeout",
                sluiced.REDIS_TIMEOUT, *server_flags(self.workdir)))
        return self.servers

    def load(self, users, apps):
        """THREADS threads of ROUNDS checks each (cost 1 to 3, a random user and app, with a
        receipt, on a random server), every admitted one settled on a random server at a cost
        drawn below or above its charge. Returns (checks, settles, errors): checks as (status,
        cost, user, app), settles as (charged at check, cost settled, answer, user, app)."""
        checks, settles, errors = [], [], []
        lock = threading.Lock()

        def run(n):
            rnd = random.Random(1000 + n)
            conns = Connections()
            try:
                for _ in range(ROUNDS):
                    cost, user, app = rnd.randint(1, 3), rnd.choice(users), rnd.choice(apps)
                    status, answer, _ = conns.post(
                        rnd.choice(self.servers), "/v1/check",
                        check_body("fleet", cost, receipt=True, user=user, app=app))
                    with lock:
                        checks.append((status, cost, user, app))
                    if status != 200 or "receipt" not in answer:
                        if status != 429:
                            errors.append(("check", status, answer))
                        continue
                    settled = rnd.choice([rnd.randint(0, cost - 1),
                                          rnd.randint(cost + 1, 3 * cost)])
                    status, answer, _ = conns.post(rnd.choice(self.servers), "/v1/settle",
                                                   {"receipt": answer["receipt"],
                                                    "cost": settled})
                    with lock:
                        if status == 200 and answer.get("settled") is True:
                            settles.append((cost, settled, answer, user, app))
                        else:
                            errors.append(("settle", status, answer))
            except Exception as e:  # A thread's failure fails the test, not just the thread.
                errors.append(("exception", repr(e)))
            finally:
                conns.close()

        threads = [threading.Thread(target=run, args=(n,)) for n in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return checks, settles, errors

    def kept(self, checks, settles):
        """Per ("window", user) and ("bucket", app): the units admitted, plus those the
        settles charged, less those they gave back; and per app the settles whose give-back
        fell short of what they asked. Each settle's figures checked on the way."""
        kept, short = collections.Counter(), collections.Counter()
        for status, cost, user, app in checks:
            if status == 200:
                kept["window", user] += cost
                kept["bucket", app] += cost
        for charged, cost, answer, user, app in settles:
            limits = by_name(answer)
            self.assertEqual(sorted(limits), ["bucket", "window"], answer)
            for name, limit in limits.items():
                kept[name, user if name == "window" else app] += (limit["charged"] -
                                                                  limit["given_back"])
                self.assertLessEqual(limit["charged"], max(0, cost - charged), answer)
                self.assertLessEqual(limit["given_back"], max(0, charged - cost), answer)
            # The window gives back exactly while its window counts: all of it, here.
            self.assertEqual(limits["window"]["given_back"], max(0, charged - cost), answer)
            short[app] += limits["bucket"]["given_back"] < max(0, charged - cost)
            self.assertEqual((answer["charged"], answer["given_back"]),
                             (min(l["charged"] for l in limits.values()),
                              min(l["given_back"] for l in limits.values())), answer)
        return kept, short

    def check_fleet(self):
        # One window of 30 days holds the whole run (the windows are floor(t/P) of Redis's
        # clock, this machine's): a run starting within 5 minutes of its end waits for it.
        sluiced.away_from_edge(MONTH, 300)
        case = type(self).__name__
        users, apps = [f"ann-{case}", f"amy-{case}"], [f"app-{case}", f"apq-{case}"]
        began = time.monotonic()
        checks, settles, errors = self.load(users, apps)
        self.assertEqual(errors, [])
        # The run's duration bounds the bucket's refill from above: it is no bound on time.
        refill = (time.monotonic() - began + 1) * B / MONTH
        statuses = collections.Counter(c[0] for c in checks)
        self.assertEqual(len(settles), statuses[200])
        kept, short = self.kept(checks, settles)
        clamped = sum(l["charged"] < cost - charged for charged, cost, a, _, _ in settles
                      for l in a["limits"])
        summary = (f"checks {dict(statuses)}; kept {dict(kept)}; short bucket give-backs "
                   f"{dict(short)}; extras cut by max_debt {clamped}")
        print(f"\n{case}: {summary}")
        for user in users:
            self.assertLessEqual(kept["window", user], N + D_N, summary)
            # Every figure was true: the window's count is what the answers add up to.
            for server in self.servers:
                self.assertEqual(left(server, "fleet", user=user, app="-")["window"],
                                 max(0, N - kept["window", user]), summary)
        for app in apps:
            self.assertLessEqual(kept["bucket", app], B + D_B + short[app] + refill, summary)
        # Both directions were taken, and the limits reached.
        self.assertGreater(statuses[429], 0, summary)
        self.assertTrue(any(by_name(s[2])["window"]["given_back"] > 0 for s in settles), summary)
        self.assertTrue(any(l["charged"] > 0 for s in settles for l in s[2]["limits"]), summary)
        self.check_refund_seen(f"bob-{case}", f"bobapp-{case}")

    def check_refund_seen(self, user, app):
        """A refund settled on one server: the other two answer the larger remaining."""
        a, b, c = self.servers
        # A first unit, so that the receipt's charge sits on top of a bucket already ahead of
        # the clock, where its give-back is whole.
        self.assertEqual(post(a, "/v1/check", check_body("fleet", 1, user=user, app=app))[0], 200)
        status, answer, _ = post(a, "/v1/check",
                                 check_body("fleet", 3, receipt=True, user=user, app=app))
        self.assertEqual(status, 200, answer)
        before = [left(s, "fleet", user=user, app=app) for s in (b, c)]
        self.assertEqual(before, [{"window": N - 4, "bucket": B - 4}] * 2)
        status, answer, _ = post(a, "/v1/settle", {"receipt": answer["receipt"], "cost": 0})
        self.assertEqual((status, answer["given_back"], answer["charged"]), (200, 3, 0), answer)
        after = [left(s, "fleet", user=user, app=app) for s in (b, c)]
        self.assertEqual(after, [{"window": N - 1, "bucket": B - 1}] * 2)


class RedisFleetTest(FleetCase, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.redis = Redis(self.workdir)

    def tearDown(self):
        try:
            super().tearDown()
        finally:
            self.redis.stop()

    def store_url(self):
        return self.redis.url

    def test_three_servers_settle_within_the_debt_and_see_refunds(self):
        self.start_fleet()
        self.check_fleet()


class ClusterFleetTest(FleetCase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster_dir = tempfile.mkdtemp(prefix="sluice-settle-cluster.")
        cls.cluster = redis_cluster.RedisCluster(cls.cluster_dir)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()
        shutil.rmtree(cls.cluster_dir, ignore_errors=True)

    def store_url(self):
        return self.cluster.url()

    def test_three_servers_settle_requests_over_several_slots(self):
        self.start_fleet()
        self.check_fleet()
        # The two limits of every request were in different slots: split, each settled.
        split = sum(s.metric("sluice_redis_split_requests_total") for s in self.servers)
        failed = sum(s.metric("sluice_redis_give_backs_failed_total") for s in self.servers)
        self.assertGreater(split, 0)
        self.assertEqual(failed, 0)


class MemcachedFleetTest(FleetCase, unittest.TestCase):
    def setUp(self):
        super().setUp()
        self.memcached = Memcached()

    def tearDown(self):
        try:
            super().tearDown()
        finally:
            self.memcached.kill()

    def store_url(self):
        return f"memcached://{self.memcached.address}"

    def test_three_servers_settle_within_the_debt_and_see_refunds(self):
        self.start_fleet()
        # Whether this store settles at all: a check with a receipt, settled at its cost.
        status, answer, _ = post(self.servers[0], "/v1/check",
                                 check_body("fleet", 1, receipt=True, user="probe", app="probe"))
        if status >= 500:
            self.skipTest(f"the Memcached store cannot charge for a receipt on this build: "
                          f"/v1/check with a receipt answered {status} {answer}")
        self.assertEqual(status, 200, answer)
        self.assertIn("receipt", answer)
        status, answer, _ = post(self.servers[1], "/v1/settle",
                                 {"receipt": answer["receipt"], "cost": 1})
        if status >= 500:
            self.skipTest(f"the Memcached store cannot settle on this build: /v1/settle "
                          f"answered {status} {answer}")
        self.assertEqual(status, 200, answer)
        self.check_fleet()


if __name__ == "__main__":
    sluiced.main(verbosity=2)
