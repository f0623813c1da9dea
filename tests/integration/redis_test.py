#!/usr/bin/env python3
"""sluiced on the Redis store: a fleet of servers enforces one limit.

Starts Debian's redis-server on a free loopback port and sluiced processes on it: two servers
share one quota exactly; three, two with the denial cache, answer as Redis alone; a restarted server keeps the limits (Redis holds them); when Redis
stops, each failure policy answers as configured and service resumes when it is back; bad
Redis flags are refused at start. Python 3 standard library only.

    python3 tests/integration/redis_test.py --sluiced build/bin/sluiced
"""

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

import sluiced

RULES = """
domain: fleet
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
"""


free_port = sluiced.free_port


def metric(server, name):
    """The value of an unlabelled metric in `server`'s GET /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=30).read()
    for line in text.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


class Redis:
    """A redis-server of the test's own, stopped and started again on the same port.
    `options` go to redis-server as they are (a unix socket: "--unixsocket", PATH)."""

    def __init__(self, workdir, *options):
        self.workdir = workdir
        self.port = free_port()
        self.options = list(options)
        self.proc = None
        self.start(first=True)

    def start(self, first=False):
        """Starts redis-server on self.port and waits until it answers there, holding the port
        (sluiced.listens): at first start another port is tried if another test's server took
        this one meanwhile; on a restart the port must stay."""
        for _ in range(5):
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", self.workdir, "--logfile",
                 os.path.join(self.workdir, "redis.log"), *self.options])
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self.proc.poll() is None:
                if self._pong() and sluiced.listens(self.proc.pid, self.port):
                    return
                time.sleep(0.02)
            self.proc.kill()
            self.proc.wait()
            if not first:
                break
            self.port = free_port()
        raise AssertionError(f"redis-server did not start on port {self.port}")

    def _pong(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}"


class RedisCase(unittest.TestCase):
    """A redis-server of the test's own, `rules` in its work directory, and the sluiced
    processes `start` starts on it, stopped cleanly at the end."""

    rules = RULES

    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="sluice-redis-test.")
        with open(os.path.join(self.workdir, "rules.yaml"), "w") as f:
            f.write(self.rules)
        self.redis = Redis(self.workdir)
        self.servers = []

    def tearDown(self):
        codes = [server.stop() for server in self.servers if server.proc.poll() is None]
        self.redis.stop()
        # A clean exit, also under the sanitizers (which exit 66 after reporting).
        self.assertEqual(codes, [0] * len(codes))
        shutil.rmtree(self.workdir, ignore_errors=True)

    def start(self, *flags):
        """A sluiced on the Redis; waiting 30 s for it unless `flags` set --redis-timeout."""
        server = sluiced.Sluiced(self.workdir, "--store", self.redis.url,
                                 *sluiced.with_redis_timeout(flags))
        self.servers.append(server)
        return server


class RedisStoreTest(RedisCase):
    def test_two_servers_share_one_limit(self):
        a, b = self.start(), self.start()
        self.assertIn("Redis store redis://127.0.0.1", a.output())
        sluiced.assert_one_limit_shared(self, a, b)

    def test_a_restarted_server_keeps_the_limits(self):
        a = self.start()
        for _ in range(5):
            a.check("ann", domain="fleet")
        self.assertEqual(a.stop(), 0)
        again = self.start()
        status, answer = again.check("ann", domain="fleet")
        self.assertEqual(status, 429, answer)

    def test_redis_gone_each_policy_answers_and_service_resumes(self):
        deny = self.start("--redis-timeout", "2s")
        allow = self.start("--redis-on-failure", "allow")
        local = self.start("--redis-on-failure", "local")
        for server in (deny, allow, local):
            status, _ = server.check("ann", domain="fleet")
            self.assertEqual(status, 200)

        self.redis.stop()
        status, answer = deny.check("ann", domain="fleet")
        self.assertEqual(status, 503, answer)
        self.assertIn("Redis", answer["error"])
        for _ in range(7):
            status, _ = allow.check("ann", domain="fleet")
            self.assertEqual(status, 200)  # Fail open.
        # The Envoy API's counted limits too: the policy's answer is not a full counter.
        envoy = {"domain": "fleet", "descriptors": [{"entries": [{"key": "user", "value": "ann"}]}]}
        response = allow.request("POST", "/json", envoy)
        self.assertEqual((response.status, response.json()["overallCode"]), (200, "OK"),
                         response.body)
        # Local: a limiter in the process with the same rule, 5 per hour, from scratch.
        statuses = [local.check("ann", domain="fleet")[0] for _ in range(6)]
        self.assertEqual(statuses, [200] * 5 + [429])
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{local.port}/metrics",
                                         timeout=30).read().decode()
        self.assertIn("sluice_redis_fallbacks_total 6", metrics)
        self.assertIn("sluice_redis_connections_ready 0", metrics)
        self.assertIn("sluice_redis_servers_lost 1", metrics)

        self.redis.start()  # Empty: a new Redis has not seen ann.
        back = time.monotonic()
        while time.monotonic() - back < 60:  # Served again once reconnected (a watchdog).
            status, answer = deny.check("carl", domain="fleet")
            if status == 200:
                break
            time.sleep(0.01)
        self.assertEqual((status, answer["remaining"]), (200, 4))

    def test_a_loop_waiting_for_redis_keeps_serving(self):
        # One event loop: were it to wait for Redis, nothing else would be answered meanwhile.
        server = self.start("--redis-timeout", "60s")
        self.assertEqual(server.check("warm", domain="fleet")[0], 200)
        calls_before = metric(server, "sluice_redis_calls_total")
        self.redis.proc.send_signal(signal.SIGSTOP)
        try:
            answers = {}
            users = [f"u{i}" for i in range(8)]
            threads = [threading.Thread(
                target=lambda u=u: answers.__setitem__(u, server.check(u, domain="fleet",
                                                                      timeout=120)))
                for u in users]
            for t in threads:
                t.start()
            # All eight reach the store while Redis is stopped: none waits for another.
            deadline = time.monotonic() + 60
            while (metric(server, "sluice_redis_calls_total") < calls_before + len(users)
                   and time.monotonic() < deadline):
                time.sleep(0.01)
            self.assertEqual(metric(server, "sluice_redis_calls_total"), calls_before + len(users))
            health = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=30)
            self.assertEqual(health.status, 200)
            self.assertEqual(answers, {}, "answered while Redis was stopped")
        finally:
            self.redis.proc.send_signal(signal.SIGCONT)
        for t in threads:
            t.join(timeout=120)
        self.assertEqual({u: (status, answer["remaining"]) for u, (status, answer) in answers.items()},
                         {u: (200, 4) for u in users})

    def test_stopping_while_redis_owes_an_answer_exits_cleanly(self):
        # The drain ends before Redis's timeout: the answer owed comes to a stopped loop, and
        # the process waits for it before it exits. Meanwhile nothing else is served. 20 s: what
        # must happen before it (the checks below) has that long on a loaded machine.
        server = self.start("--redis-timeout", "20s", "--drain", "0s")
        idle = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        # sluiced serves before its connection to Redis is up (/healthz: "connecting", 503
        # under deny); on a loaded machine that takes a while. Wait for it on this connection.
        deadline = time.monotonic() + 60
        while True:
            idle.request("GET", "/healthz")
            status = json.loads(idle.getresponse().read())["status"]
            if status == "ok" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(status, "ok")
        self.redis.proc.send_signal(signal.SIGSTOP)
        try:
            outcome = []

            def ask():
                try:
                    outcome.append(server.check("late", domain="fleet"))
                except OSError as e:  # The connection closed with its loop.
                    outcome.append(e)

            waiting = threading.Thread(target=ask)
            waiting.start()
            deadline = time.monotonic() + 60
            while metric(server, "sluice_redis_calls_total") < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            server.proc.send_signal(signal.SIGTERM)
            # At once, while the process still waits for Redis: the idle keep-alive
            # connection is closed and new ones are refused.
            idle.sock.settimeout(30)
            self.assertEqual(idle.sock.recv(1), b"")
            with self.assertRaises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", server.port), timeout=30).close()
            self.assertIsNone(server.proc.poll(), "exited before Redis's answer was due")
            # It waited for the store's answer (the timeout, 30 s), not for ever: it exits by
            # itself, the bound of 120 s a watchdog.
            self.assertEqual(server.proc.wait(timeout=120), 0)
            waiting.join(timeout=60)
            self.assertEqual(len(outcome), 1)
            self.assertIsInstance(outcome[0], OSError, "answered after the drain")
        finally:
            self.redis.proc.send_signal(signal.SIGCONT)

    def test_denial_cache_decides_as_redis_alone(self):
        """Three servers, two with --redis-deny-cache, take turns on one user's hourly quota of
        5 with costs of 1 to 3: every answer is what Redis alone gives (count + cost <= 5
        within the hour), and the two answer some denials without asking Redis."""
        servers = [self.start("--redis-deny-cache", "100"), self.start("--redis-deny-cache", "100"),
                   self.start()]
        self.assertIn("denial cache 100 entries", servers[0].output())
        costs = [1, 2, 1, 3, 1, 1, 2, 1, 1, 3, 1, 1, 2, 1, 1, 1, 2, 3, 1, 1, 1]
        for attempt in range(2):  # Again if the hour turned meanwhile.
            hour = int(time.time()) // 3600
            user, count, got, want = f"dora{attempt}", 0, [], []
            for i, cost in enumerate(costs):
                response = servers[i % 3].request(
                    "POST", "/v1/check", {"domain": "fleet", "cost": cost,
                                          "descriptors": [{"entries": [
                                              {"key": "user", "value": user}]}]})
                got.append(response.status)
                allowed = count + cost <= 5
                count += cost if allowed else 0
                want.append(200 if allowed else 429)
            if int(time.time()) // 3600 == hour:
                break
        self.assertEqual(got, want)
        local = [metric(server, "sluice_redis_denials_answered_locally_total")
                 for server in servers]
        self.assertGreater(local[0] + local[1], 0)
        self.assertEqual(local[2], 0)
        # Answered locally, never sent: fewer script calls than calls.
        self.assertLess(metric(servers[0], "sluice_redis_script_calls_total"),
                        metric(servers[0], "sluice_redis_calls_total"))

    def test_bad_redis_flags_are_refused_at_start(self):
        cases = [
            (["--store", "redis://127.0.0.1:99999"], "port '99999'"),
            (["--store", "redis://u:hunter2@host/x"], "database 'x'"),
            (["--store", "mysql://x"], "expected memory, memcached://host:port[,host:port...] or redis://"),
            (["--store", self.redis.url, "--redis-on-failure", "panic"], "allow, deny or local"),
            (["--store", self.redis.url, "--redis-timeout", "soon"], "--redis-timeout"),
            (["--store", self.redis.url, "--snapshot", "x.snap"], "memory store"),
            (["--store", self.redis.url, "--redis-deny-cache", "-1"], "--redis-deny-cache"),
            (["--store", self.redis.url, "--redis-deny-cache-ttl", "0s"],
             "--redis-deny-cache-ttl '0s': must be at least 1ms"),
            (["--store", self.redis.url, "--redis-deny-cache-ttl", "later"],
             "--redis-deny-cache-ttl 'later'"),
        ]
        for flags, message in cases:
            proc = subprocess.run([sluiced.BINARY, "--http", "127.0.0.1:0", "--grpc",
                                   "127.0.0.1:0", *flags], capture_output=True, text=True,
                                  timeout=60)
            self.assertEqual(proc.returncode, 2, flags)
            self.assertIn(message, proc.stderr, flags)
            self.assertNotIn("hunter2", proc.stderr)


def main():
    sluiced.main(verbosity=2)


if __name__ == "__main__":
    main()
