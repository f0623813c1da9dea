#!/usr/bin/env python3
"""Integration tests for the rules file as hostile input: an alias bomb (a few kilobytes that
expand to billions of descriptors) is refused at start-up with exit status 2 and an error naming
the limit, and on reload it is refused while the last good rules keep serving, the process
staying small; so is a chain of anchors that nests past the depth limit through its aliases.
Before the limits, 9 KB grew sluiced to 18 GB until the kernel killed it.

    python3 tests/integration/rules_file_test.py --sluiced build/bin/sluiced [unittest options]

Python 3.11 standard library only.
"""

import os
import re
import signal
import subprocess
import tempfile
import time
import unittest

import sluiced

GOOD_RULES = """domain: itest
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
"""


def descriptor_bomb(levels):
    """Issue 19's bomb: `levels` levels of 10 anchored descriptors with distinct values, each
    listing aliases of the 10 of the level below (10^levels descriptors when walked)."""
    lines = ["domain: itest", "descriptors:"]
    for i in range(10):
        lines.append("  - &l0_%d {key: k, value: v%d, rate_limit: {unit: second, "
                     "requests_per_unit: 1}}" % (i, i))
    for level in range(1, levels):
        for i in range(10):
            aliases = ", ".join("*l%d_%d" % (level - 1, j) for j in range(10))
            lines.append("  - &l%d_%d {key: k%d, value: v%d, descriptors: [%s]}"
                         % (level, i, level, i, aliases))
    return "\n".join(lines) + "\n"


def anchor_chain(links):
    """A chain of `links` anchors, each a list nested 62 deep around an alias of the one before:
    64 levels as written, 62 more for each link when walked (390 links, 55 KB: 24,000 levels,
    4.7 million nodes with every alias expanded, within the node limit)."""
    lines = ["domain: itest", "descriptors: []", "chain:", "  m0: &m0 x"]
    for i in range(1, links):
        lines.append("  m%d: &m%d %s*m%d%s" % (i, i, "[" * 62, i - 1, "]" * 62))
    return "\n".join(lines) + "\n"


def resident_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


class RulesFileTest(unittest.TestCase):

    def test_alias_bomb_at_start_up_is_refused(self):
        with tempfile.TemporaryDirectory(prefix="sluiced-itest-") as tmp:
            path = os.path.join(tmp, "bomb.yaml")
            with open(path, "w") as f:
                f.write(descriptor_bomb(9))
            try:
                proc = subprocess.run(
                    [sluiced.BINARY, "--http", "127.0.0.1:%d" % sluiced.free_port(), "--grpc",
                     "127.0.0.1:0", "--config", path],
                    capture_output=True, timeout=50, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                self.fail("sluiced was still loading the bomb after 50 s")
        stderr = proc.stderr.decode(errors="replace")
        self.assertEqual(proc.returncode, 2, stderr)
        self.assertRegex(stderr, re.escape(path) + r":\d+:\d+: the rules expand to more than "
                         r"5000000 YAML nodes")

    def refused_on_reload(self, text, what, check):
        """Starts sluiced on GOOD_RULES, rewrites its file to `text` and sends SIGHUP: the reload
        is refused, `check(server)` holds, and the last good rules serve: alice's second request
        of the hour is her last."""
        server = sluiced.Sluiced.with_rules(GOOD_RULES, "--watch-interval", "0")
        try:
            server.start(timeout=30)
            self.assertEqual(server.check("alice", domain="itest")[0], 200)
            with open(server.config + ".tmp", "w") as f:
                f.write(text)
            os.replace(server.config + ".tmp", server.config)
            server.proc.send_signal(signal.SIGHUP)
            refused = wait_for(
                lambda: server.proc.poll() is not None
                or server.metric("sluice_config_reload_failures_total") == 1, 50)
            self.assertIsNone(server.proc.poll(), "sluiced died:\n" + server.output())
            self.assertTrue(refused, "the %s was not refused within 50 s:\n%s"
                            % (what, server.output()))
            check(server)
            self.assertEqual(server.check("alice", domain="itest")[0], 200)
            self.assertEqual(server.check("alice", domain="itest")[0], 429)
            self.assertEqual(server.rules_limit("itest.user")[0]["limit"], 2)
            self.assertEqual(server.stop(), 0, server.output())
        finally:
            server.cleanup()

    def test_alias_bomb_on_reload_is_refused_and_the_rules_kept(self):
        self.refused_on_reload(
            descriptor_bomb(9), "bomb",
            lambda server: self.assertLess(resident_bytes(server.proc.pid), 512 << 20))

    def test_anchor_chain_on_reload_is_refused_and_the_rules_kept(self):
        # Before: the depth was bounded as written only, and the walk of the loaded tree
        # recursed through every level of the chain on the reload thread's stack, until
        # sluiced died of SIGSEGV.
        self.refused_on_reload(
            anchor_chain(390), "chain",
            lambda server: self.assertRegex(
                server.output(), re.escape(server.config) + r":6:73: an alias that nests deeper "
                r"than 64 levels of mappings and lists \(the depth limit"))

if __name__ == "__main__":
    sluiced.main()
