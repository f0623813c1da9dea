#!/usr/bin/env python3
"""sluiced's connection handling and life cycle, at the socket level: Expect: 100-continue,
a request still arriving when SIGTERM comes, one server per port, flags refused, and
`sluice check` and `sluice acquire` against it. Python 3 standard library only.

    python3 tests/integration/lifecycle_test.py --sluiced build/bin/sluiced --sluice build/bin/sluice
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

ADHOC = b'{"key": "k", "limit": 5, "period": "1s"}'


def request_head(length, extra=b""):
    return (b"POST /v1/check HTTP/1.1\r\nHost: sluiced\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n" % length + extra + b"\r\n")


class LifecycleTest(unittest.TestCase):
    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="sluice-lifecycle-test.")
        self.server = None

    def tearDown(self):
        if self.server is not None and self.server.proc.poll() is None:
            self.server.stop(signal.SIGKILL)

    def connect(self):
        conn = socket.create_connection(("127.0.0.1", self.server.port), timeout=60)
        self.addCleanup(conn.close)
        return conn

    def test_expect_100_continue_is_answered_at_once(self):
        self.server = sluiced.Sluiced(self.workdir)
        conn = self.connect()
        conn.sendall(request_head(len(ADHOC), b"Expect: 100-continue\r\n"))
        # The interim answer comes before the body is sent: that is the proof (not how soon).
        interim = conn.recv(4096)
        self.assertTrue(interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), interim)
        conn.sendall(ADHOC)
        self.assertTrue(conn.recv(4096).startswith(b"HTTP/1.1 200 OK"))

    def test_expect_100_continue_with_the_body_already_sent_gets_the_answer_alone(self):
        self.server = sluiced.Sluiced(self.workdir)
        conn = self.connect()
        conn.sendall(request_head(len(ADHOC), b"Expect: 100-continue\r\n") + ADHOC)
        [(status, body)] = self.read_answers(conn, 1)  # No interim 100 before it.
        self.assertEqual(status, 200, body)

    def read_answers(self, conn, count):
        """Reads `count` answers from `conn`: [(status, body)], in the order they came."""
        data, answers = b"", []
        while len(answers) < count:
            head_end = data.find(b"\r\n\r\n")
            if head_end >= 0:
                head = data[:head_end].decode()
                length = int(next(line.split(":", 1)[1] for line in head.split("\r\n")
                                  if line.lower().startswith("content-length:")))
                if len(data) >= head_end + 4 + length:
                    body = data[head_end + 4:head_end + 4 + length]
                    answers.append((int(head.split(" ", 2)[1]), body))
                    data = data[head_end + 4 + length:]
                    continue
            chunk = conn.recv(65536)
            self.assertTrue(chunk, "connection closed after %d answers" % len(answers))
            data += chunk
        self.assertEqual(data, b"", "more than %d answers" % count)
        return answers

    def test_requests_pipelined_or_split_anywhere_are_answered_in_order(self):
        # sluiced parses what one read brought before it reads on: a request may come whole,
        # several together, or in pieces cut anywhere (the head, the body, the next request).
        self.server = sluiced.Sluiced(self.workdir)
        conn = self.connect()
        body = b'{"key": "split", "limit": 100, "period": "1h"}'
        request = request_head(len(body)) + body
        remaining = []

        def expect(count):
            for status, answer in self.read_answers(conn, count):
                self.assertEqual(status, 200, answer)
                remaining.append(json.loads(answer)["remaining"])

        conn.sendall(request * 3)  # Pipelined, in one segment.
        expect(3)
        for cut in (5, len(request_head(len(body))) - 3, len(request_head(len(body))),
                    len(request) - 1):
            conn.sendall(request[:cut])
            time.sleep(0.05)
            conn.sendall(request[cut:] + request[:cut])  # The rest, and half of the next.
            time.sleep(0.05)
            conn.sendall(request[cut:])
            expect(2)
        for byte in range(len(request)):  # One byte at a time.
            conn.sendall(request[byte:byte + 1])
        expect(1)
        self.assertEqual(remaining, list(range(99, 99 - len(remaining), -1)))
        self.assertEqual(len(remaining), 12)

    def test_sigterm_lets_a_request_still_arriving_finish(self):
        self.server = sluiced.Sluiced(self.workdir)
        conn = self.connect()
        # A whole request and the start of another in one segment: the first's answer shows
        # the server has read the second's start, however late a loaded machine ran it.
        conn.sendall(request_head(len(ADHOC)) + ADHOC + request_head(len(ADHOC)) + ADHOC[:10])
        [(status, body)] = self.read_answers(conn, 1)
        self.assertEqual(status, 200, body)
        self.server.proc.send_signal(signal.SIGTERM)
        self.await_refused()  # The drain has begun.
        conn.sendall(ADHOC[10:])
        answer = conn.recv(4096)
        self.assertTrue(answer.startswith(b"HTTP/1.1 200 OK"), answer)
        self.assertIn(b"Connection: close", answer)
        self.assertEqual(self.server.proc.wait(timeout=60), 0)

    def await_grpc_port(self):
        """The gRPC port of self.server, from its log's line (written after the HTTP one)."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = re.findall(r"on grpc://127\.0\.0\.1:(\d+)", self.server.output())
            if found:
                return int(found[0])
            self.assertIsNone(self.server.proc.poll(), self.server.output())
            time.sleep(0.02)
        self.fail("no gRPC line in the log within 120 s")

    def await_refused(self):
        """Waits (60 s at most) until the server refuses new connections: it is draining."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.server.port), timeout=60).close()
            except ConnectionRefusedError:
                return
            time.sleep(0.01)
        self.fail("still accepting connections 60 s after SIGTERM")

    def test_a_second_server_cannot_take_the_same_port(self):
        self.server = sluiced.Sluiced(self.workdir)
        second = subprocess.run(
            [sluiced.BINARY, "--http", f"127.0.0.1:{self.server.port}", "--grpc", "127.0.0.1:0"],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(second.returncode, 2)
        self.assertIn("Address already in use", second.stderr)
        # The first still answers every request itself: its limit holds.
        statuses = [self.server.check("solo", domain="none")[0] for _ in range(3)]
        self.assertEqual(statuses, [200, 200, 200])

    def test_a_second_server_on_the_same_grpc_port_stops_before_it_listens(self):
        # As a newcomer meets it: `make run` twice, the second with another --http, both on the
        # default gRPC port. It once said "listening on http://...", then gRPC's raw error.
        self.server = sluiced.Sluiced(self.workdir)
        grpc_port = self.await_grpc_port()
        second = subprocess.run(
            [sluiced.BINARY, "--http", "127.0.0.1:0", "--grpc", f"127.0.0.1:{grpc_port}"],
            capture_output=True, text=True, timeout=60, env={"PATH": os.environ["PATH"]})
        said = second.stdout + second.stderr
        self.assertEqual(second.returncode, 2, said)
        self.assertNotIn("listening", said)
        [line] = said.splitlines()  # One line, and no gRPC log of its own.
        self.assertIn(f"127.0.0.1:{grpc_port}: Address already in use", line)
        self.assertIn("--grpc", line)
        self.assertEqual(second.stderr, said)  # An error, on stderr.
        statuses = [self.server.check("solo", domain="none")[0] for _ in range(3)]
        self.assertEqual(statuses, [200, 200, 200])

    def test_bad_flags_are_refused(self):
        for flags, says in ((["--log-level", "bogus"], "--log-level"),
                            (["--http", "127.0.0.1:99999"], "not a port number"),
                            (["--store", "mongodb://x"], "--store"),
                            (["--snapshot-interval", "5s"], "needs --snapshot"),
                            (["--config", "/nonexistent.yaml"], "/nonexistent.yaml")):
            http = [] if "--http" in flags else ["--http", "127.0.0.1:0"]
            run = subprocess.run([sluiced.BINARY, *http, "--grpc", "127.0.0.1:0", *flags],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(run.returncode, 2, flags)
            self.assertIn(says, run.stderr, flags)

    def test_store_failures_are_logged_not_only_counted(self):
        # A Redis that is not there: every decision fails (503), and the log says so, once for
        # the first and then at most every 10 s, not once per request.
        port = sluiced.free_port()
        self.server = sluiced.Sluiced(self.workdir, "--store", f"redis://127.0.0.1:{port}",
                                      "--redis-timeout", "50ms")
        start = time.monotonic()
        for _ in range(5):
            status = self.server.request("POST", "/v1/check", ADHOC, timeout=60).status
            self.assertEqual(status, 503)
        elapsed = time.monotonic() - start
        log = self.server.output()
        self.assertRegex(log, r"the store failed 1 decision\(s\); the last: ")
        self.assertLessEqual(log.count("the store failed"), 1 + elapsed // 10, log)

    def test_sighup_without_config_is_said(self):
        self.server = sluiced.Sluiced(self.workdir)
        self.server.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 120  # A watchdog for a line never written.
        while ("no --config to reload" not in self.server.output()
               and time.monotonic() < deadline):
            time.sleep(0.05)
        self.assertIn("no --config to reload", self.server.output())
        self.assertEqual(self.server.check("still", domain="none")[0], 200)

    def test_sluice_check_asks_the_server(self):
        self.server = sluiced.Sluiced(self.workdir)
        url = f"http://127.0.0.1:{self.server.port}/"  # A trailing slash is fine.
        args = [sluiced.SLUICE, "check", "--server", url, "--key", "cli", "--algorithm", "gcra",
                "--limit", "1", "--period", "1m"]
        first = subprocess.run(args, capture_output=True, text=True, timeout=60)
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertIn('"allowed":true', first.stdout)
        second = subprocess.run(args, capture_output=True, text=True, timeout=60)
        self.assertEqual(second.returncode, 1, second.stderr)
        self.server.stop()
        gone = subprocess.run(args, capture_output=True, text=True, timeout=60)
        self.assertEqual(gone.returncode, 2)
        self.assertIn("cannot connect", gone.stderr)

    def test_sluice_acquire_waits_then_exits_0_or_75(self):
        self.server = sluiced.Sluiced(self.workdir)
        url = f"http://127.0.0.1:{self.server.port}"
        # One every 10 s: the second waits for its slot 10 s after the first's, the third's
        # turn is 20 s off. The second may wait 15 s at most: admitted, it was given the slot
        # 10 s after the first's (asked after the first's answer, its wait was at most 10 s),
        # not the one 20 s after (a wait of more than 15 s, refused at once with 75), which
        # the server's arithmetic says, not the time the machine took.
        args = [sluiced.SLUICE, "acquire", "--server", url, "--key", "cli-acquire", "--algorithm",
                "gcra", "--limit", "1", "--period", "10s"]
        first_start = time.monotonic()
        first = subprocess.run(args, capture_output=True, text=True, timeout=60)
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertEqual(first.stdout, "")  # Quiet: `sluice acquire ... && curl ...`.
        second = subprocess.run(args + ["--max-wait", "15s"], capture_output=True, text=True,
                                timeout=60)
        second_done = time.monotonic()
        self.assertEqual(second.returncode, 0, second.stderr)  # Not the slot after ...
        self.assertGreaterEqual(second_done - first_start, 10)  # ... but it waited for its own.
        third = subprocess.run(args + ["--max-wait", "100ms"], capture_output=True, text=True,
                               timeout=60)
        self.assertEqual(third.returncode, 75, third.stderr)
        self.assertRegex(third.stderr, r"retry after 1?\d\.\d{3}s")  # Up to 20 s off.
        never = subprocess.run(args + ["--cost", "2"], capture_output=True, text=True,
                               timeout=60)
        self.assertEqual(never.returncode, 1, never.stderr)
        self.assertIn("no wait would help", never.stderr)
        bad = subprocess.run(args + ["--max-wait", "soon"], capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(bad.returncode, 2)
        self.assertIn("--max-wait", bad.stderr)

    def test_sigterm_ends_waiting_acquires_with_503(self):
        self.server = sluiced.Sluiced(self.workdir)
        body = b'{"key": "k-stop", "algorithm": "gcra", "limit": 1, "period": "20s", "max_wait": "30s"}'
        head = (b"POST /v1/acquire HTTP/1.1\r\nHost: sluiced\r\nContent-Type: application/json"
                b"\r\nContent-Length: %d\r\n\r\n" % len(body))
        first = self.connect()
        first.sendall(head + body)
        self.assertTrue(first.recv(4096).startswith(b"HTTP/1.1 200 OK"))
        waiting = self.connect()
        # A health check and the acquire in one segment: the check's answer shows the server
        # has read the acquire, which then waits 20 s for its turn.
        waiting.sendall(b"GET /healthz HTTP/1.1\r\nHost: sluiced\r\n\r\n" + head + body)
        [(status, _)] = self.read_answers(waiting, 1)
        self.assertEqual(status, 200)
        self.server.proc.send_signal(signal.SIGTERM)
        answer = waiting.recv(4096)
        self.assertTrue(answer.startswith(b"HTTP/1.1 503"), answer)
        self.assertIn(b"stopping", answer)
        # A 503 saying "stopping", not the 200 of its turn 20 s off: it did not wait for it.
        self.assertEqual(self.server.proc.wait(timeout=60), 0)


if __name__ == "__main__":
    sluiced.main(sluice=True)
