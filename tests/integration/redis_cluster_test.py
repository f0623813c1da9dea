#!/usr/bin/env python3
"""sluiced on a Redis Cluster of 3 masters with a replica each (redis_cluster.py), with rules
whose requests span several hash slots: a user limit beside a client-address limit, an
elastic pool, two concurrency limits.

- A sequential trace answers as a memory-store sluiced does, figure for figure (allowed,
  remaining, borrowed, leases and releases).
- Three sluiced under concurrent load never admit more than a limit, and every count in
  Redis is exactly what was admitted (nothing left charged by a give-back).
- CLUSTER FAILOVER on a replica during load: under --redis-on-failure deny nothing is
  admitted that was not counted, nothing hangs, the new master answers within a generous
  bound; the counts lost (asynchronous replication) are printed.

Python 3 standard library only.

    python3 tests/integration/redis_cluster_test.py --sluiced build/bin/sluiced
"""

import argparse
import collections
import http.client
import json
import random
import shutil
import sys
import tempfile
import threading
import time
import unittest

import redis_cluster
import sluiced

RULES = """
domain: {domain}
pools:
  spare: {{requests_per_unit: {pool}, unit: day}}
descriptors:
  - key: user
    mode: elastic
    pool: spare
    rate_limit: {{unit: day, requests_per_unit: {user}}}
  - key: remote_address
    rate_limit: {{unit: day, requests_per_unit: {ip}}}
  - key: job
    concurrency: 2
    lease_ttl: 1h
  - key: host
    concurrency: 3
    lease_ttl: 1h
"""

CLUSTER = None
WORKDIR = None

# The slots one request of body() may span (its user, its address, the pool), each a call to
# Redis that may take up to --redis-timeout.
SLOTS = 3


def latency_bound(timeout):
    """The longest an answer may take with --redis-timeout `timeout` seconds: every slot's call
    timing out, and two more (a redirect, a give-back), and 30 s for a loaded machine."""
    return (SLOTS + 2) * timeout + 30


def rules(domain, user=4, ip=7, pool=6):
    return RULES.format(domain=domain, user=user, ip=ip, pool=pool)


def body(domain, user, ip, job=None, host=None, cost=1):
    descriptors = [{"entries": [{"key": "user", "value": user}]},
                   {"entries": [{"key": "remote_address", "value": ip}]}]
    if job is not None:
        descriptors.append({"entries": [{"key": "job", "value": job}]})
    if host is not None:
        descriptors.append({"entries": [{"key": "host", "value": host}]})
    return {"domain": domain, "descriptors": descriptors, "cost": cost}


def post(server, path, payload, timeout=latency_bound(30) + 30):
    """(status, answer) of one POST; a fresh connection each time."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(payload), {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def figures(answer):
    """What must agree between two stores: the decision and each limit's count."""
    return (answer.get("allowed"), answer.get("remaining"),
            [(l.get("name"), l.get("allowed"), l.get("remaining"), l.get("borrowed", False),
              l.get("pool", False)) for l in answer.get("limits", [])],
            "lease" in answer)


def start(domain, *flags, **limits):
    server = sluiced.Sluiced.with_rules(rules(domain, **limits), *flags, threads=2)
    return server.start()


def on_cluster(domain, *flags, timeout=sluiced.REDIS_TIMEOUT, **limits):
    """A sluiced on the cluster, waiting `timeout` for Redis: 30 s but where a node is frozen,
    so that a loaded machine's slowness is never taken for a failure."""
    return start(domain, "--store", CLUSTER.url(), "--redis-timeout", timeout, *flags, **limits)


class ClusterTest(unittest.TestCase):

    def setUp(self):
        self.servers = []

    def tearDown(self):
        for server in self.servers:
            server.cleanup()

    def serve(self, server):
        self.servers.append(server)
        return server

    def test_1_sequential_trace_answers_as_the_memory_store(self):
        memory = self.serve(start("seq"))
        redis = self.serve(on_cluster("seq"))
        rnd = random.Random(7)
        held = []  # (memory's lease, redis's lease)
        seen = collections.Counter()
        for step in range(260):
            if held and rnd.random() < 0.25:
                pair = held.pop(rnd.randrange(len(held)))
                got = [post(s, "/v1/release", {"lease": lease}) for s, lease in
                       zip((memory, redis), pair)]
                self.assertEqual(got[0], got[1], f"step {step}: release")
                continue
            payload = body("seq", f"u{rnd.randrange(4)}", f"10.1.0.{rnd.randrange(4)}",
                           job=f"j{rnd.randrange(2)}" if rnd.random() < 0.4 else None,
                           host=f"h{rnd.randrange(2)}" if rnd.random() < 0.4 else None,
                           cost=rnd.choice((0, 1, 1, 1, 2)))
            (ms, ma), (rs, ra) = post(memory, "/v1/check", payload), post(redis, "/v1/check",
                                                                           payload)
            self.assertEqual((ms, figures(ma)), (rs, figures(ra)), f"step {step}: {payload}")
            seen[ms] += 1
            seen["borrowed"] += any(l.get("borrowed") for l in ma.get("limits", []))
            if "lease" in ma:
                held.append((ma["lease"], ra["lease"]))
        self.assertGreater(seen[429], 20, seen)
        self.assertGreater(seen[200], 20, seen)
        self.assertGreater(seen["borrowed"], 0, seen)
        text = redis.metrics()
        self.assertGreater(redis.metric("sluice_redis_split_requests_total", text), 100)
        self.assertGreater(redis.metric("sluice_redis_give_backs_total", text), 0)
        self.assertEqual(redis.metric("sluice_redis_give_backs_failed_total", text), 0)

    def load(self, servers, domain, users, ips, seconds, answers, stop=None):
        """Threads posting requests over `users` x `ips` to `servers` until `stop` is set (or,
        a watchdog, `seconds` pass); each answer's (status, user, ip, borrowed, seconds) into
        `answers`."""
        def run(n):
            rnd = random.Random(n)
            until = time.monotonic() + seconds
            while time.monotonic() < until and not (stop and stop.is_set()):
                server = servers[n % len(servers)]
                user, ip = rnd.choice(users), rnd.choice(ips)
                began = time.monotonic()
                try:
                    status, answer = post(server, "/v1/check", body(domain, user, ip))
                except OSError as e:  # A hang shows as a timeout here.
                    answers.append(("error " + type(e).__name__, user, ip, False, 0))
                    continue
                borrowed = status == 200 and any(l.get("borrowed") for l in answer["limits"])
                answers.append((status, user, ip, borrowed, time.monotonic() - began))
        threads = [threading.Thread(target=run, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        return threads

    def counts_left(self, server, domain, users, ips):
        """remaining of every user, address and the pool, by a cost-0 check each."""
        left = {}
        for user in users:
            status, answer = post(server, "/v1/check", body(domain, user, ips[0], cost=0))
            self.assertEqual(status, 200, answer)
            left[user] = answer["limits"][0]["remaining"]
        for ip in ips:
            status, answer = post(server, "/v1/check", body(domain, users[0], ip, cost=0))
            self.assertEqual(status, 200, answer)
            left[ip] = answer["limits"][1]["remaining"]
        return left

    def test_2_three_servers_never_admit_more_than_a_limit(self):
        limits = {"user": 30, "ip": 40, "pool": 25}
        servers = [self.serve(on_cluster("load", **limits)) for _ in range(3)]
        users = [f"user{i}" for i in range(4)]
        ips = [f"10.2.0.{i}" for i in range(3)]
        answers = []
        # Until the ips have run out (every admission takes one of their 120 units, fewer than
        # the users' 145 with the pool) and 100 more were denied, however slowly a loaded
        # machine gets there; 120 s a watchdog.
        stop = threading.Event()
        threads = self.load(servers, "load", users, ips, 120, answers, stop)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = list(answers)
            if (sum(a[0] == 200 for a in done) >= 3 * limits["ip"] and
                    sum(a[0] == 429 for a in done) >= 100):
                break
            time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join()
        statuses = collections.Counter(a[0] for a in answers)
        self.assertEqual(set(statuses) - {200, 429}, set(), statuses)
        own = collections.Counter(a[1] for a in answers if a[0] == 200 and not a[3])
        borrowed = sum(1 for a in answers if a[0] == 200 and a[3])
        by_ip = collections.Counter(a[2] for a in answers if a[0] == 200)
        for user in users:
            self.assertLessEqual(own[user], limits["user"], user)
        for ip in ips:
            self.assertLessEqual(by_ip[ip], limits["ip"], ip)
        self.assertLessEqual(borrowed, limits["pool"])
        self.assertEqual(sum(by_ip.values()), 3 * limits["ip"], statuses)  # The ips ran out.
        # Exact counts: what Redis holds is what was admitted, every give-back complete.
        left = self.counts_left(servers[0], "load", users, ips)
        for user in users:
            self.assertEqual(left[user], limits["user"] - own[user], user)
        for ip in ips:
            self.assertEqual(left[ip], limits["ip"] - by_ip[ip], ip)
        failed = sum(s.metric("sluice_redis_give_backs_failed_total") for s in servers)
        self.assertEqual(failed, 0)

    def test_2b_leases_over_two_slots_never_above_a_capacity(self):
        """Workers on 3 servers take a lease on a job (2 at once) and a host (3 at once),
        each in a slot of its own, hold it a moment and release it: no more held at once than
        a capacity, counted from the grants the workers saw."""
        servers = [self.serve(on_cluster("lease")) for _ in range(3)]
        lock = threading.Lock()
        held = collections.Counter()
        most = collections.Counter()
        granted = collections.Counter()
        errors = []

        def work(n):
            # Until this worker has had 10 grants (a loaded machine takes longer), 120 s a
            # watchdog.
            rnd = random.Random(100 + n)
            until, mine = time.monotonic() + 120, 0
            while time.monotonic() < until and mine < 10:
                job, host = f"j{rnd.randrange(2)}", f"h{rnd.randrange(2)}"
                server = servers[n % 3]
                payload = body("lease", f"lu{n}", "10.5.0.1", job=job, host=host)
                payload["descriptors"] = payload["descriptors"][2:]  # The leases alone.
                status, answer = post(server, "/v1/check", payload)
                if status != 200:
                    if status != 429:
                        errors.append((status, answer))
                    continue
                mine += 1
                with lock:
                    for key in (job, host):
                        held[key] += 1
                        most[key] = max(most[key], held[key])
                        granted[key] += 1
                time.sleep(rnd.uniform(0, 0.02))
                with lock:  # Counted out before it goes back: never undercounted.
                    held[job] -= 1
                    held[host] -= 1
                status, answer = post(servers[rnd.randrange(3)], "/v1/release",
                                      {"lease": answer["lease"]})
                if status != 200 or answer != {"released": True}:
                    errors.append((status, answer))

        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        for key in ("j0", "j1"):
            self.assertLessEqual(most[key], 2, key)
        for key in ("h0", "h1"):
            self.assertLessEqual(most[key], 3, key)
        self.assertEqual(sum(granted.values()), 2 * 8 * 10, granted)  # A job and a host each.

    def failover_under_load(self, domain, frozen):
        """Two sluiced (deny) under load while the master of user `domain`0's slot fails over
        to its replica: CLUSTER FAILOVER, or (`frozen`) the master frozen (SIGSTOP) for half a
        second and then CLUSTER FAILOVER FORCE. Checks that nothing hangs and the slot is
        served again within 60 s; returns (statuses, counted minus admitted per user, and a
        line saying what happened)."""
        limits = {"user": 100000, "ip": 100000, "pool": 10}
        servers = [self.serve(on_cluster(domain, "--redis-on-failure", "deny",
                                         timeout="200ms" if frozen else sluiced.REDIS_TIMEOUT,
                                         **limits))
                   for _ in range(2)]
        users = [f"{domain}{i}" for i in range(6)]
        ips = [f"10.3.0.{i}" for i in range(4)]
        answers = []
        stop = threading.Event()
        threads = self.load(servers, domain, users, ips, 300, answers, stop)
        keys, deadline = [], time.monotonic() + 30  # The load's first count of users[0].
        while not keys and time.monotonic() < deadline:
            time.sleep(0.1)
            keys = [k for k in CLUSTER.find_keys(f"*{users[0]}*") if "lease" not in k]
        self.assertTrue(keys, f"no key of user {users[0]} in the cluster")
        old = CLUSTER.master_of(CLUSTER.keyslot(keys[0]))
        began = time.monotonic()
        served_after = None
        try:
            if frozen:
                CLUSTER.pause(old)
                time.sleep(0.5)  # The gap: calls to `old` time out.
            _, new = CLUSTER.failover(None, force=frozen, old=old)
            promoted = time.monotonic() - began
            while time.monotonic() < began + 60:
                status, _ = post(servers[0], "/v1/check", body(domain, users[0], ips[0], cost=0))
                if status == 200:
                    served_after = time.monotonic() - began
                    break
                time.sleep(0.05)
            time.sleep(1)
        finally:
            stop.set()
            CLUSTER.resume(old)
        bound = latency_bound(0.2 if frozen else 30)
        for t in threads:
            t.join(timeout=bound + 30)
            self.assertFalse(t.is_alive(), "a load thread hung")
        self.assertIsNotNone(served_after, "the new master never answered within 60 s")
        # deny: 503, no error. An answer that never came would be an error here (the client's
        # timeout, past every call's timeout: a watchdog); how long each took is not asserted.
        statuses = collections.Counter(a[0] for a in answers)
        self.assertEqual(set(statuses) - {200, 503}, set(), statuses)
        CLUSTER.await_healthy()
        for server in servers:  # /healthz: the cluster whole again, no node left lost.
            # (A guard against hanging, not a bound: a loaded machine takes its time.)
            health, deadline = None, time.monotonic() + 120
            while health != (200, "ok") and time.monotonic() < deadline:
                time.sleep(0.05)
                response = server.request("GET", "/healthz")
                answer = json.loads(response.body)
                health = (response.status, answer["status"])
            self.assertEqual((health, answer["mode"]), ((200, "ok"), "cluster"), answer)
        own = collections.Counter(a[1] for a in answers if a[0] == 200 and not a[3])
        left = self.counts_left(servers[1], domain, users, ips)
        diff = {u: (limits["user"] - left[u]) - own[u] for u in users}
        failed = sum(s.metric("sluice_redis_give_backs_failed_total") for s in servers)
        line = (f"{'frozen, forced' if frozen else 'manual'} failover {old} -> {new}: promoted "
                f"after {promoted:.2f} s, slot served after {served_after:.2f} s; answers "
                f"{dict(statuses)}; give-backs failed {failed:.0f}; counted minus admitted "
                f"per user {diff} (negative: counts lost)")
        print("\n" + line, file=sys.stderr)
        return statuses, diff

    def test_3_failover_during_load(self):
        """A manual failover waits for the replica to catch up: no count is lost."""
        _, diff = self.failover_under_load("fo", frozen=False)
        for user, d in diff.items():
            # A call that timed out or a give-back that failed leaves units counted
            # (positive); a count lost in the failover would be negative.
            self.assertGreaterEqual(d, 0, f"{user}: counts lost")

    def test_4_master_frozen_then_forced_failover(self):
        """During the gap the slot's calls time out and `deny` answers 503; then the new
        master serves; the old one, resumed, becomes a replica. What the frozen master had not
        replicated is lost: printed, not asserted."""
        statuses, _ = self.failover_under_load("ff", frozen=True)
        self.assertGreater(statuses[503], 0, "the gap went unseen")

def main():
    global CLUSTER, WORKDIR
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluiced", required=True)
    args, rest = parser.parse_known_args()
    sluiced.BINARY = args.sluiced
    WORKDIR = tempfile.mkdtemp(prefix="sluice-cluster-")
    CLUSTER = redis_cluster.RedisCluster(WORKDIR)
    try:
        unittest.main(argv=[sys.argv[0], *rest], verbosity=2)
    finally:
        CLUSTER.stop()
        shutil.rmtree(WORKDIR, ignore_errors=True)


if __name__ == "__main__":
    main()
