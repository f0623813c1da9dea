#!/usr/bin/env python3
"""Integration tests for sluiced's HTTP API: hot reload (the watched file, SIGHUP) and the
process (a broken or missing config at start-up, draining on SIGTERM).

    python3 tests/integration/http_reload_test.py --sluiced build/bin/sluiced [unittest options]

Runs the tests against a sluiced of its own, as http_test.py does (http_fixture.py starts it);
some tests start sluiced instances of their own.
Python 3.11 standard library only.
"""

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import sluiced
from http_fixture import (RULES_FILE, SERVER, SluicedTest, main, parse_raw_response,
                          read_until_close, setUpModule, sluiced_with_rules, tearDownModule)

free_port = sluiced.free_port


# ----------------------------------------------------------------------------------------------
# Hot reload


def write_atomically(path, text):
    """Replaces `path` in one rename, so a watcher never reads a half-written file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def rules_with_reloadable_limit(n):
    with open(RULES_FILE) as f:
        text = f.read()
    old = ("name: reloadable_limit\n      unit: hour\n      requests_per_unit: 2\n")
    assert old in text, "rules.yaml no longer has the reloadable rule as the test expects"
    return text.replace(old, old.replace("requests_per_unit: 2", "requests_per_unit: %d" % n))


BROKEN_YAML = "domain: itest\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, [\n"


def wait_for(predicate, timeout):
    """Polls `predicate` until true; the seconds it took, or None on timeout."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.02)
    return None


class ReloadTest(SluicedTest):

    def reloadable_limit(self, server):
        limits = server.rules_limit("itest.reloadable")
        return limits[0]["limit"] if limits else None

    def test_file_change_reloads_and_broken_file_keeps_rules(self):
        server = SERVER
        # A counter of a rule the reload does not change.
        for _ in range(3):
            self.assertAllowed(self.check1("user", "t-reload-keep"))
        self.assertDenied(self.check1("user", "t-reload-keep"))
        self.assertEqual(self.reloadable_limit(server), 2)
        text = server.metrics()
        reloads = server.metric("sluice_config_reloads_total", text)
        failures = server.metric("sluice_config_reload_failures_total", text)
        self.assertIsNotNone(reloads)
        self.assertIsNotNone(failures)
        try:
            write_atomically(server.config, rules_with_reloadable_limit(4))
            # Loaded within a few watch intervals of 100 ms on a quiet machine; 60 s is a
            # watchdog for a loaded one, not a bound.
            took = wait_for(lambda: self.reloadable_limit(server) == 4, 60.0)
            self.assertIsNotNone(took, "the changed limit was not loaded within 60 s")
            self.assertEqual(server.metric("sluice_config_reloads_total"), reloads + 1)
            for expected in (3, 2, 1, 0):
                self.assertAllowed(self.check1("reloadable", "t-reload-1"), remaining=expected)
            self.assertDenied(self.check1("reloadable", "t-reload-1"))
            # Unchanged rules keep their counts across the reload.
            self.assertDenied(self.check1("user", "t-reload-keep"))

            write_atomically(server.config, BROKEN_YAML)
            took = wait_for(lambda: server.metric("sluice_config_reload_failures_total")
                            > failures, 60.0)
            self.assertIsNotNone(took, "the broken file was not noticed within 60 s")
            time.sleep(0.3)  # Several more watch intervals.
            self.assertEqual(server.metric("sluice_config_reload_failures_total"), failures + 1,
                             "an unchanged broken file must be tried once, not every interval")
            self.assertEqual(self.reloadable_limit(server), 4)
            for expected in (3, 2, 1, 0):
                self.assertAllowed(self.check1("reloadable", "t-reload-2"), remaining=expected)
            self.assertDenied(self.check1("reloadable", "t-reload-2"))
            self.assertAllowed(self.check1("user", "t-reload-after-broken"), remaining=2)
            self.assertServing()
        finally:
            with open(RULES_FILE) as f:
                write_atomically(server.config, f.read())
            restored = wait_for(lambda: self.reloadable_limit(server) == 2, 60.0)
        self.assertIsNotNone(restored, "the original rules were not reloaded")

    def test_sighup_reloads(self):
        with open(RULES_FILE) as f:
            server = sluiced_with_rules(f.read(), watch_interval="0")  # No watching: SIGHUP only.
        try:
            server.start()
            self.assertEqual(self.reloadable_limit(server), 2)
            write_atomically(server.config, rules_with_reloadable_limit(5))
            time.sleep(0.5)
            self.assertEqual(self.reloadable_limit(server), 2, "reloaded without SIGHUP")
            server.proc.send_signal(signal.SIGHUP)
            took = wait_for(lambda: self.reloadable_limit(server) == 5, 60.0)
            self.assertIsNotNone(took, "SIGHUP did not reload the rules")
            self.assertEqual(server.metric("sluice_config_reloads_total"), 1)
            # A broken file on SIGHUP: refused, counted, rules kept, still serving.
            write_atomically(server.config, BROKEN_YAML)
            server.proc.send_signal(signal.SIGHUP)
            took = wait_for(
                lambda: server.metric("sluice_config_reload_failures_total") == 1, 60.0)
            self.assertIsNotNone(took, "the broken file was not counted as a failed reload")
            self.assertEqual(self.reloadable_limit(server), 5)
            self.assertIsNone(server.proc.poll(), "sluiced exited on a broken reload")
            rc = server.stop()
            self.assertEqual(rc, 0, server.output())
        finally:
            server.cleanup()

    def test_a_reload_that_changes_a_limit_keeps_what_each_key_used(self):
        # docs/server.md, "Changing a limit": lowered, a key over the new limit stays denied;
        # raised, a key gets only the difference; renamed and changed, a limit starts afresh.
        rules = ("domain: snap\ndescriptors:\n  - key: user\n"
                 "    rate_limit: {name: %s, unit: hour, requests_per_unit: %d}\n")
        server = sluiced_with_rules(rules % ("users", 10), watch_interval="0")
        try:
            server.start()
            for _ in range(8):
                self.assertEqual(server.check("ann")[0], 200)

            def reload(name, n):
                before = server.metric("sluice_config_reloads_total")
                write_atomically(server.config, rules % (name, n))
                server.proc.send_signal(signal.SIGHUP)
                took = wait_for(
                    lambda: server.metric("sluice_config_reloads_total") == before + 1, 60.0)
                self.assertIsNotNone(took, "SIGHUP did not reload the rules")

            reload("users", 5)
            status, answer = server.check("ann")
            self.assertEqual(status, 429, "8 used of the new 5: %s" % answer)
            self.assertEqual(server.check("bob")[1]["remaining"], 4)
            reload("users", 12)
            status, answer = server.check("ann")
            self.assertEqual((status, answer["remaining"]), (200, 3), "8 + 1 used of 12")
            # Renamed with other figures: nothing carries. (Renamed with the same figures, a
            # key's state is where it was: counts are stored by descriptor and figures.)
            reload("people", 20)
            status, answer = server.check("ann")
            self.assertEqual((status, answer["remaining"]), (200, 19), "a renamed limit")
            self.assertEqual(server.stop(), 0, server.output())
        finally:
            server.cleanup()



# ----------------------------------------------------------------------------------------------
# Process: start-up and shutdown


class ProcessTest(unittest.TestCase):

    def run_with_config(self, text):
        with tempfile.TemporaryDirectory(prefix="sluiced-itest-") as tmp:
            path = os.path.join(tmp, "broken.yaml")
            with open(path, "w") as f:
                f.write(text)
            try:
                proc = subprocess.run(
                    [sluiced.BINARY, "--http", "127.0.0.1:%d" % free_port(), "--grpc", "127.0.0.1:0", "--config", path],
                    capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                self.fail("sluiced kept running with a broken config")
            return path, proc

    def test_broken_config_at_start_up(self):
        cases = [
            # A YAML syntax error on line 4.
            ("domain: broken\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, [2}\n",
             4, None),
            # A rules error on line 5, column 13 (the unit's value).
            ("domain: broken\ndescriptors:\n  - key: a\n    rate_limit:\n"
             "      unit: fortnight\n      requests_per_unit: 2\n", 5, 13),
        ]
        for text, line, column in cases:
            with self.subTest(line=line):
                path, proc = self.run_with_config(text)
                stdout = proc.stdout.decode(errors="replace")
                stderr = proc.stderr.decode(errors="replace")
                self.assertNotEqual(proc.returncode, 0, stdout + stderr)
                self.assertEqual(proc.returncode, 2, "docs/server.md: exit status 2")
                m = re.search(re.escape(path) + r":(\d+):(\d+):", stderr)
                self.assertIsNotNone(
                    m, "stderr does not name %s:LINE:COLUMN\n--- stderr ---\n%s\n"
                    "--- stdout ---\n%s" % (path, stderr, stdout))
                self.assertEqual(int(m.group(1)), line, stderr)
                if column is not None:
                    self.assertEqual(int(m.group(2)), column, stderr)

    def test_missing_config_at_start_up(self):
        with tempfile.TemporaryDirectory(prefix="sluiced-itest-") as tmp:
            path = os.path.join(tmp, "absent.yaml")
            proc = subprocess.run(
                [sluiced.BINARY, "--http", "127.0.0.1:%d" % free_port(), "--grpc", "127.0.0.1:0", "--config", path],
                capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn(path, proc.stdout.decode() + proc.stderr.decode())

    def test_sigterm_answers_the_request_in_flight(self):
        # A /v1/rules answer of some 3 MB to a client with a 4 KiB receive buffer that does not
        # read: the response is still being written when SIGTERM arrives. sluiced must wait
        # for it (drain), deliver it whole, then exit 0.
        rules = ["domain: big", "descriptors:"]
        rules += ["  - {key: key_%05d, rate_limit: {name: rule_%05d_%s, unit: hour, "
                  "requests_per_unit: 1}}" % (i, i, "x" * 60) for i in range(20_000)]
        server = sluiced_with_rules("\n".join(rules) + "\n", watch_interval="0")
        try:
            server.start()  # 20,000 rules: seconds on a loaded machine.
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            # Watchdogs only, generous: under ASan beside six CPU hogs and two other test runs,
            # the first byte of this 3 MB answer took over 60 s.
            sock.settimeout(300)
            sock.connect(("127.0.0.1", server.port))
            with sock:
                sock.sendall(b"GET /v1/rules HTTP/1.1\r\nHost: sluiced\r\n\r\n")
                # The answer's first bytes have come: it is being written (and, unread, cannot
                # be finished) when SIGTERM arrives.
                self.assertTrue(sock.recv(1, socket.MSG_PEEK), "closed before answering")
                server.proc.send_signal(signal.SIGTERM)
                time.sleep(0.5)
                self.assertIsNone(server.proc.poll(),
                                  "sluiced exited with a response still being written")
                data, how = read_until_close(sock, 300)
            status, headers, body = parse_raw_response(data)
            self.assertEqual(status, 200, data[:300])
            self.assertEqual(len(body), int(headers["content-length"]),
                             "truncated response (connection ended by %s)" % how)
            self.assertEqual(len(json.loads(body)["domains"][0]["rules"]), 20_000)
            try:
                rc = server.proc.wait(300)
            except subprocess.TimeoutExpired:
                rc = "still running"
            self.assertEqual(rc, 0, server.output())
        finally:
            server.stop()
            server.cleanup()


if __name__ == "__main__":
    main(__doc__)
