#!/usr/bin/env python3
"""sluiced on the Memcached store (--store memcached://): a fleet of servers enforces one limit.

Starts Debian's memcached on free loopback ports and sluiced processes on them: two servers
share one quota exactly; keys spread over two memcached servers; when memcached is killed,
each failure policy answers as configured (refused at once: no call waits out the timeout),
and service resumes after its restart; an event loop waiting for memcached keeps serving;
eight client threads
of two servers on one hot key get exactly the limit admitted; bad URLs are refused
at start, and so is a rules file with a concurrency rule (also by --check-config). Python 3
standard library only.

    python3 tests/integration/memcached_test.py --sluiced build/bin/sluiced
"""

import os
import shutil
import signal
import socket
import subprocess
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
  - key: user
    value: hot_counter
    rate_limit: {unit: hour, requests_per_unit: 60}
  - key: user
    value: hot_gcra
    rate_limit: {algorithm: gcra, unit: hour, requests_per_unit: 10, burst: 40}
"""


class Memcached:
    """A memcached of the test's own, killed and started again (empty) on the same port."""

    def __init__(self):
        self.port = sluiced.free_port()
        self.proc = None
        self.start(first=True)

    def start(self, first=False):
        """Starts memcached on self.port and waits until it answers there, holding the port
        (sluiced.listens): at first start another port is tried if another test's server took
        this one meanwhile; on a restart the port must stay."""
        user = ["-u", "root"] if os.geteuid() == 0 else []
        for _ in range(5):
            self.proc = subprocess.Popen(["memcached", "-l", "127.0.0.1", "-p", str(self.port),
                                          "-U", "0", "-m", "64", "-t", "2", *user])
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self.proc.poll() is None:
                if self._version() and sluiced.listens(self.proc.pid, self.port):
                    return
                time.sleep(0.02)
            self.proc.kill()
            self.proc.wait()
            if not first:
                break
            self.port = sluiced.free_port()
        raise AssertionError(f"memcached did not start on port {self.port}")

    def _version(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"version\r\n")
                return s.recv(32).startswith(b"VERSION")
        except OSError:
            return False

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=60)

    def items(self):
        """The number of items it holds now (stats curr_items)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(b"stats\r\n")
            data = b""
            while not data.endswith(b"END\r\n"):
                data += s.recv(65536)
        for line in data.decode().splitlines():
            if line.startswith("STAT curr_items "):
                return int(line.split()[2])
        raise AssertionError("no curr_items in memcached's stats")

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"


class MemcachedCase(unittest.TestCase):
    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="sluice-memcached-test.")
        with open(os.path.join(self.workdir, "rules.yaml"), "w") as f:
            f.write(RULES)
        self.memcached = [Memcached()]
        self.servers = []

    def tearDown(self):
        codes = [server.stop() for server in self.servers if server.proc.poll() is None]
        for m in self.memcached:
            m.kill()
        # A clean exit, also under the sanitizers (which exit 66 after reporting).
        self.assertEqual(codes, [0] * len(codes))
        shutil.rmtree(self.workdir, ignore_errors=True)

    def url(self):
        return "memcached://" + ",".join(m.address for m in self.memcached)

    def start(self, *flags):
        """A sluiced on the memcached servers; waiting 30 s for them unless `flags` say."""
        server = sluiced.Sluiced(self.workdir, "--store", self.url(),
                                 *sluiced.with_redis_timeout(flags))
        self.servers.append(server)
        return server


class MemcachedStoreTest(MemcachedCase):
    def test_two_servers_share_one_limit(self):
        a, b = self.start(), self.start()
        self.assertIn("Memcached store memcached://127.0.0.1", a.output())
        sluiced.assert_one_limit_shared(self, a, b)

    def test_keys_spread_over_two_memcached_servers(self):
        self.memcached.append(Memcached())
        server = self.start()
        for i in range(40):
            self.assertEqual(server.check(f"user{i}", domain="fleet")[0], 200)
        counts = [m.items() for m in self.memcached]
        self.assertEqual(sum(counts), 40)
        self.assertTrue(all(c >= 5 for c in counts), counts)  # ketama: about half each.

    def test_memcached_killed_each_policy_answers_and_service_resumes(self):
        deny = self.start()  # The default timeout (30 s): a loaded machine's answer is in it.
        allow = self.start("--redis-on-failure", "allow")
        local = self.start("--redis-on-failure", "local")
        for server in (deny, allow, local):
            self.assertEqual(server.check("ann", domain="fleet")[0], 200)

        self.memcached[0].kill()
        status, answer = deny.check("ann", domain="fleet")
        self.assertEqual(status, 503, answer)
        self.assertIn("memcached", answer["error"])
        # Refused (a killed server's port refuses at once), not a timeout waited out, which
        # libmemcached words "A TIMEOUT OCCURRED". One call, one failure counted.
        self.assertNotIn("TIMEOUT", answer["error"], answer)
        self.assertEqual(deny.metric("sluice_memcached_failures_total"), 1)
        for _ in range(7):
            self.assertEqual(allow.check("ann", domain="fleet")[0], 200)  # Fail open.
        # Local: a limiter in the process with the same rule, 5 per hour, from scratch.
        statuses = [local.check("ann", domain="fleet")[0] for _ in range(6)]
        self.assertEqual(statuses, [200] * 5 + [429])
        self.assertEqual(local.metric("sluice_memcached_fallbacks_total"), 6)

        self.memcached[0].start()  # Empty: a new memcached has not seen ann.
        # Decided again is the event (the server is tried again after 1 s); the 120 s bound is
        # a watchdog for a server never tried again, not what makes this pass.
        back = time.monotonic()
        while time.monotonic() - back < 120:
            status, answer = deny.check("carl", domain="fleet")
            if status == 200:
                break
            self.assertEqual(status, 503, answer)  # Meanwhile, the policy's answer.
            time.sleep(0.01)
        self.assertEqual((status, answer["remaining"]), (200, 4))

    def test_a_loop_waiting_for_memcached_keeps_serving(self):
        server = self.start("--redis-timeout", "60s")
        self.assertEqual(server.check("warm", domain="fleet")[0], 200)
        self.memcached[0].proc.send_signal(signal.SIGSTOP)
        answers = {}
        users = [f"u{i}" for i in range(8)]
        threads = [threading.Thread(
            target=lambda u=u: answers.__setitem__(u, server.check(u, domain="fleet",
                                                                  timeout=120)))
            for u in users]
        try:
            for t in threads:
                t.start()
            # One event loop (--threads 1): it answers /metrics while the decisions wait, and
            # says there that the store has taken one to the stopped memcached (the warm one
            # and at least one more): the wait this test is about has begun. The 120 s are a
            # watchdog, never the cause of a pass.
            deadline = time.monotonic() + 120
            while (server.metric("sluice_memcached_calls_total") < 2
                   and time.monotonic() < deadline):
                time.sleep(0.01)
            self.assertGreaterEqual(server.metric("sluice_memcached_calls_total"), 2)
            health = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=30)
            self.assertEqual(health.status, 200)
            self.assertEqual(answers, {}, "answered while memcached was stopped")
        finally:
            self.memcached[0].proc.send_signal(signal.SIGCONT)
        for t in threads:
            t.join(timeout=120)
        self.assertEqual(sorted(status for status, _ in answers.values()), [200] * 8)

    def test_bad_urls_are_refused_at_start(self):
        for url in ("memcached://", "memcached://h:0", "memcached://u@h:1"):
            proc = subprocess.run([sluiced.BINARY, "--store", url, "--http", "127.0.0.1:0"],
                                  capture_output=True, text=True, timeout=60)
            self.assertNotEqual(proc.returncode, 0, url)
            self.assertIn("memcached URL", proc.stderr + proc.stdout, url)

    def test_threads_of_two_servers_on_one_hot_key_admit_exactly_the_limit(self):
        """Two sluiced, four client threads each, on one key of a fixed window (60 per hour)
        and one of gcra (burst 40, then one per 6 minutes): every thread asks until it is
        denied three times, so the admitted total must be the limit exactly: none over, and
        none short (a call that lost all its cas retries fails, 503 under deny, charging
        nothing; the threads go on until the limit denies them)."""
        sluiced.away_from_edge(3600, 120)  # The fixed window cannot end during the test.
        servers = [self.start(), self.start()]
        for user, limit in (("hot_counter", 60), ("hot_gcra", 40)):
            admitted, denied, failed = [], [], []

            def client(server):
                denials = 0
                for _ in range(1000):  # A watchdog: 60 admissions and 3 denials are needed.
                    status, answer = server.check(user, domain="fleet")
                    if status == 200:
                        admitted.append(answer["remaining"])
                    elif status == 429:
                        denied.append(1)
                        denials += 1
                        if denials == 3:
                            return
                    else:
                        failed.append((status, answer))

            threads = [threading.Thread(target=client, args=(server,))
                       for server in servers for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(len(admitted), limit, (user, failed[:3]))
            if user == "hot_counter":  # Each admission took its own place in the one quota.
                # (gcra's remaining also counts the time passed, a fraction of a request.)
                self.assertEqual(sorted(admitted), list(range(limit)), user)
            self.assertEqual(len(denied), 8 * 3, user)
            for server in servers:  # And the limit still holds.
                self.assertEqual(server.check(user, domain="fleet")[0], 429, user)
            print(f"{user}: {len(admitted)} admitted, {len(denied)} denied, "
                  f"{len(failed)} failed (cas retries exhausted), cas conflicts "
                  f"{sum(s.metric('sluice_memcached_cas_conflicts_total') for s in servers)}")

    def test_a_concurrency_rule_is_refused_at_start_and_by_check_config(self):
        path = os.path.join(self.workdir, "jobs.yaml")
        with open(path, "w") as f:
            f.write("domain: jobs\ndescriptors:\n  - key: mailer\n    concurrency: 3\n")
        why = ("jobs.yaml:4:18: rule 'jobs.mailer': a concurrency limit needs leases, and the "
               "Memcached store keeps no leases")
        for args in (["--config", path, "--http", "127.0.0.1:0"], ["--check-config", path]):
            proc = subprocess.run([sluiced.BINARY, "--store", self.url(), *args],
                                  capture_output=True, text=True, timeout=60)
            self.assertNotEqual(proc.returncode, 0, args)
            self.assertIn(why, proc.stderr + proc.stdout, args)
        # The memory store keeps leases: the same file is valid there.
        proc = subprocess.run([sluiced.BINARY, "--check-config", path], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)


if __name__ == "__main__":
    sluiced.main()
