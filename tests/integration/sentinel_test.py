#!/usr/bin/env python3
"""sluiced on Redis through Sentinel: --store redis+sentinel://... finds the master, and
follows a failover a sentinel is told to make.

Starts Debian's redis-server as a master, its replica and one sentinel (quorum 1) on free
loopback ports, and two sluiced on the sentinel's URL: they share one quota on the master;
after SENTINEL FAILOVER they decide on the promoted replica (within 30 s), counting the switch
in /metrics. Python 3 standard library only.

    python3 tests/integration/sentinel_test.py --sluiced build/bin/sluiced
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import sluiced

RULES = """
domain: fleet
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000}
"""


def command(port, *args):
    """One Redis command, in RESP, and the first line of its answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(f"*{len(args)}\r\n".encode() +
                  b"".join(f"${len(a)}\r\n{a}\r\n".encode() for a in args))
        return s.recv(4096).decode(errors="replace")


class Process:
    """A redis-server (or, with a config file and --sentinel, a sentinel) of the test's own."""

    def __init__(self, workdir, name, *args, config=None):
        self.port = sluiced.free_port()
        log = os.path.join(workdir, name + ".log")
        self.proc = subprocess.Popen(
            ["redis-server", *([config] if config else []), "--port", str(self.port), "--bind",
             "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir, "--logfile", log,
             *args])
        deadline = time.monotonic() + 120  # A watchdog: a loaded machine starts slowly.
        while time.monotonic() < deadline:
            try:
                if command(self.port, "PING").startswith("+PONG"):
                    return
            except OSError:
                pass
            time.sleep(0.02)
        raise AssertionError(f"{name} did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


class SentinelTest(unittest.TestCase):
    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="sluice-sentinel-test.")
        with open(os.path.join(self.workdir, "rules.yaml"), "w") as f:
            f.write(RULES)
        self.master = Process(self.workdir, "master")
        self.replica = Process(self.workdir, "replica", "--replicaof", "127.0.0.1",
                               str(self.master.port))
        config = os.path.join(self.workdir, "sentinel.conf")
        with open(config, "w") as f:
            f.write(f"sentinel monitor mymaster 127.0.0.1 {self.master.port} 1\n"
                    "sentinel down-after-milliseconds mymaster 1000\n"
                    "sentinel failover-timeout mymaster 10000\n")
        self.sentinel = Process(self.workdir, "sentinel", "--sentinel", config=config)
        self.servers = []

    def tearDown(self):
        codes = [server.stop() for server in self.servers if server.proc.poll() is None]
        for process in (self.sentinel, self.replica, self.master):
            process.stop()
        self.assertEqual(codes, [0] * len(codes))
        shutil.rmtree(self.workdir, ignore_errors=True)

    def wait_for(self, what, condition, seconds=300):
        """Until `condition` holds: the event is what passes; the bound, generous enough for
        a failover on a loaded machine many times over, fails only one that never comes."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.05)
        self.fail(f"{what}: not within {seconds} s")

    def test_two_servers_share_a_quota_and_follow_a_failover(self):
        url = f"redis+sentinel://127.0.0.1:{self.sentinel.port}/mymaster"
        flags = sluiced.with_redis_timeout(["--store", url, "--redis-on-failure", "allow"])
        a = sluiced.Sluiced(self.workdir, *flags)
        b = sluiced.Sluiced(self.workdir, *flags)
        self.servers += [a, b]
        self.assertIn("Redis store redis+sentinel://127.0.0.1", a.output())
        # The sentinel must know the replica (in sync) before it can fail over to it.
        self.wait_for("the sentinel sees the replica", lambda: "flags\r\n$5\r\nslave\r\n" in
                      command(self.sentinel.port, "SENTINEL", "replicas", "mymaster") and
                      "master_link_status:up" in command(self.replica.port, "INFO",
                                                         "replication"))
        remaining = [server.check("ann", domain="fleet")[1]["remaining"] for server in (a, b, a)]
        self.assertEqual(remaining, [999, 998, 997])  # One quota, on the master.

        self.assertTrue(command(self.sentinel.port, "SENTINEL", "FAILOVER", "mymaster")
                        .startswith("+OK"))
        for server in (a, b):
            self.wait_for("a decision from the new master",
                          lambda: server.metric("sluice_redis_master_switches_total") == 1 and
                          server.check("ann", domain="fleet")[1]["remaining"] > 0)
        self.assertIn("role:master", command(self.replica.port, "INFO", "replication"))
        # Both now count on the new master, one quota again.
        first = a.check("ann", domain="fleet")[1]["remaining"]
        self.assertEqual(b.check("ann", domain="fleet")[1]["remaining"], first - 1)
        # /healthz: the new master up, the old one forgotten (not left lost).
        for server in (a, b):
            self.wait_for("/healthz ok after the failover", lambda: server.request(
                "GET", "/healthz").body == b'{"status":"ok","store":"redis","mode":"sentinel",'
                b'"redis":"up","on_failure":"allow"}')


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluiced", required=True)
    args, rest = parser.parse_known_args()
    sluiced.BINARY = os.path.abspath(args.sluiced)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
