"""The shared server, the base class and the helpers of the HTTP tests (http_test.py and the
http_*_test.py beside it), which test sluiced's HTTP API black box, over real sockets.

Each test module has a sluiced of its own, SERVER, on a free loopback port with a temporary
copy of tests/integration/rules.yaml (--threads 2 --watch-interval 100ms). The module imports
setUpModule, which starts it and waits for /healthz, and tearDownModule, which stops it with
SIGTERM and requires exit code 0; its tests derive from SluicedTest; main() runs them.

Every test uses descriptor values of its own, so tests never share a counter. The fixed windows
of the rules are an hour or longer, and a test that counts waits out the last two seconds
before an hour boundary rather than straddle one.

Python 3.11 standard library only.
"""

import argparse
import os
import socket
import sys
import time
import unittest

import sluiced

HERE = os.path.dirname(os.path.abspath(__file__))
RULES_FILE = os.path.join(HERE, "rules.yaml")
DOMAIN = "itest"

SLUICED = os.path.join(HERE, "..", "..", "build", "bin", "sluiced")  # --sluiced's default.


# ----------------------------------------------------------------------------------------------
# Helpers


def avoid_window_edge(margin=60.0):
    """Waits past the next hour boundary when it is less than `margin` seconds away.

    Every fixed window of rules.yaml (hour, day) ends on an hour boundary, so a test that
    starts here cannot see its counts reset half way (a minute: a loaded machine's test).
    """
    sluiced.away_from_edge(3600, margin)


def ceil_seconds(us):
    return (us + 999_999) // 1_000_000


def read_until_close(sock, timeout):
    """Everything the peer sends until it closes (or `timeout`). Returns (data, how it ended)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return data, "eof"
            data += chunk
    except socket.timeout:
        return data, "timeout"
    except ConnectionResetError:
        return data, "reset"


def parse_raw_response(data):
    """(status, headers dict lower-cased, body) of one raw HTTP/1.1 response."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return None, {}, b""
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body

def sluiced_with_rules(rules_text, watch_interval="100ms"):
    """sluiced as these tests run it, not started yet: `rules_text`, --threads 2 and
    --watch-interval."""
    return sluiced.Sluiced.with_rules(rules_text, "--watch-interval", watch_interval, threads=2)


# The shared server of the test module that imports it, started in setUpModule.
with open(RULES_FILE) as f:
    SERVER = sluiced_with_rules(f.read())


def setUpModule():
    SERVER.start()


def tearDownModule():
    """After every test: still serving, and SIGTERM stops it with exit code 0."""
    problems = []
    try:
        try:
            health = SERVER.request("GET", "/healthz")
            if health.status != 200:
                problems.append("/healthz answered %r before shutdown" % health)
        except OSError as e:
            problems.append("/healthz failed before shutdown: %r" % e)
        rc = SERVER.stop()
        if rc != 0:
            problems.append("sluiced exited with %r after SIGTERM, expected 0" % (rc,))
        if problems:
            raise AssertionError("; ".join(problems) + "\n" + SERVER.output())
    finally:
        SERVER.cleanup()


class SluicedTest(unittest.TestCase):
    maxDiff = None

    def setUp(self):
        avoid_window_edge()

    # Requests to the shared server.

    def check(self, descriptors, cost=None, domain=DOMAIN):
        """POST /v1/check in rules mode; descriptors: [[(key, value), ...], ...]."""
        body = {"domain": domain,
                "descriptors": [{"entries": [{"key": k, "value": v} for k, v in d]}
                                for d in descriptors]}
        if cost is not None:
            body["cost"] = cost
        return SERVER.request("POST", "/v1/check", body)

    def check1(self, key, value, cost=None):
        return self.check([[(key, value)]], cost=cost)

    def envoy(self, body):
        return SERVER.request("POST", "/json", body)

    # Assertions.

    def assertAllowed(self, resp, remaining=None):
        self.assertEqual(resp.status, 200, resp)
        body = resp.json()
        self.assertIs(body["allowed"], True, resp)
        if remaining is not None:
            self.assertEqual(body["remaining"], remaining, resp)
        return body

    def assertDenied(self, resp, status=429):
        self.assertEqual(resp.status, status, resp)
        body = resp.json()
        self.assertIs(body["allowed"], False, resp)
        return body

    def assertUnlimited(self, resp):
        self.assertEqual(resp.status, 200, resp)
        body = resp.json()
        self.assertIs(body["allowed"], True, resp)
        self.assertIsNone(body["remaining"], resp)
        for name in ("RateLimit", "RateLimit-Policy", "RateLimit-Limit", "RateLimit-Remaining",
                     "Retry-After"):
            self.assertIsNone(resp.header(name), "%s on an unlimited answer: %r" % (name, resp))
        return body

    def assertBadRequest(self, resp, *fragments):
        self.assertEqual(resp.status, 400, resp)
        self.assertEqual(resp.header("Content-Type"), "application/json", resp)
        error = resp.json().get("error")
        self.assertIsInstance(error, str, resp)
        for fragment in fragments:
            self.assertIn(fragment, error, resp)
        return error

    def assertServing(self):
        resp = SERVER.request("GET", "/healthz")
        self.assertEqual(resp.status, 200, resp)
        self.assertEqual(resp.json(), {"status": "ok", "store": "memory"})

    def assertRetryAfter(self, resp):
        """Retry-After: whole seconds, at least 1, the body's retry_after_us rounded up."""
        body = resp.json()
        value = resp.header("Retry-After")
        self.assertIsNotNone(value, "no Retry-After on a curable denial: %r" % resp)
        self.assertRegex(value, r"^\d+$")
        self.assertGreaterEqual(int(value), 1)
        self.assertGreater(body["retry_after_us"], 0, resp)
        self.assertEqual(int(value), max(1, ceil_seconds(body["retry_after_us"])), resp)
        return int(value)


def main(doc):
    """Runs the calling module's tests; `doc` is its docstring, for --help."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--sluiced", default=SLUICED, help="the sluiced binary to test")
    args, rest = parser.parse_known_args()
    sluiced.BINARY = os.path.abspath(args.sluiced)
    if not os.access(sluiced.BINARY, os.X_OK):
        sys.exit("no executable sluiced at %s (pass --sluiced PATH)" % sluiced.BINARY)
    unittest.main(argv=[sys.argv[0]] + rest)
