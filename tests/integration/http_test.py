#!/usr/bin/env python3
"""Integration tests for sluiced's HTTP API, black box, over real sockets.

    python3 tests/integration/http_test.py --sluiced build/bin/sluiced [unittest options]

Starts its own sluiced on a free loopback port with a temporary copy of
tests/integration/rules.yaml (--threads 2 --watch-interval 100ms), waits for /healthz, runs the
tests, then stops it with SIGTERM and requires exit code 0. A few tests start sluiced
instances of their own (SIGHUP reload, broken config at start-up, draining on SIGTERM).

Every test uses descriptor values of its own, so tests never share a counter. The fixed windows
of the rules are an hour or longer, and a test that counts waits out the last two seconds
before an hour boundary rather than straddle one.

Python 3.11 standard library only.
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import sluiced

HERE = os.path.dirname(os.path.abspath(__file__))
RULES_FILE = os.path.join(HERE, "rules.yaml")
DOMAIN = "itest"

SLUICED = os.path.join(HERE, "..", "..", "build", "bin", "sluiced")  # --sluiced's default.
SERVER = None  # The shared server, started in setUpModule.

DURATION_RE = re.compile(r"^\d+(\.\d{3}|\.\d{6}|\.\d{9})?s$")


# ----------------------------------------------------------------------------------------------
# Helpers


free_port = sluiced.free_port


def write_atomically(path, text):
    """Replaces `path` in one rename, so a watcher never reads a half-written file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def avoid_window_edge(margin=2.0):
    """Waits past the next hour boundary when it is less than `margin` seconds away.

    Every fixed window of rules.yaml (hour, day) ends on an hour boundary, so a test that
    starts here cannot see its counts reset half way.
    """
    left = 3600 - time.time() % 3600
    if left < margin:
        time.sleep(left + 0.05)


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


def setUpModule():
    global SERVER
    with open(RULES_FILE) as f:
        SERVER = sluiced_with_rules(f.read()).start()


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
        for name in ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Policy",
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
        self.assertEqual(resp.json(), {"status": "ok"})

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


# ----------------------------------------------------------------------------------------------
# POST /v1/check, rules mode


class CheckRulesModeTest(SluicedTest):

    def test_fixed_window_allows_up_to_the_limit_then_denies(self):
        for expected in (2, 1, 0):
            resp = self.check1("user", "t-basic")
            body = self.assertAllowed(resp, remaining=expected)
            self.assertEqual(set(body), {"allowed", "remaining", "reset_after_us",
                                         "retry_after_us", "delay_us", "over_soft", "limits"})
            self.assertEqual(body["retry_after_us"], 0)
            self.assertEqual(body["delay_us"], 0)
            self.assertGreater(body["reset_after_us"], 0)
            self.assertLessEqual(body["reset_after_us"], 3600 * 10**6)
            self.assertIs(body["over_soft"], False)
            self.assertEqual(len(body["limits"]), 1, body)
            limit = body["limits"][0]
            self.assertEqual(limit["name"], "itest.user")
            self.assertEqual(limit["algorithm"], "fixed_window")
            self.assertEqual(limit["limit"], 3)
            self.assertEqual(limit["period"], "1h")
            self.assertEqual(limit["mode"], "hard")
            self.assertIs(limit["allowed"], True)
            self.assertEqual(limit["remaining"], expected)
            # Headers.
            self.assertEqual(resp.header("RateLimit-Limit"), "3", resp)
            self.assertEqual(resp.header("RateLimit-Remaining"), str(expected), resp)
            self.assertEqual(resp.header("RateLimit-Policy"), "3;w=3600", resp)
            reset = resp.header("RateLimit-Reset")
            self.assertRegex(reset or "", r"^\d+$", resp)
            self.assertEqual(int(reset), ceil_seconds(body["reset_after_us"]), resp)
            self.assertTrue(1 <= int(reset) <= 3600, resp)
            self.assertIsNone(resp.header("Retry-After"), resp)

        resp = self.check1("user", "t-basic")
        body = self.assertDenied(resp)
        self.assertEqual(body["remaining"], 0)
        self.assertEqual(body["limits"][0]["allowed"], False)
        self.assertEqual(resp.header("RateLimit-Remaining"), "0")
        self.assertEqual(resp.header("RateLimit-Limit"), "3")
        retry = self.assertRetryAfter(resp)
        self.assertLessEqual(retry, 3600)
        # Still denied: a denial does not reset anything.
        self.assertDenied(self.check1("user", "t-basic"))
        # Another value of the same key has a quota of its own.
        self.assertAllowed(self.check1("user", "t-basic-other"), remaining=2)

    def test_all_or_nothing_denied_request_does_not_consume_other_descriptor(self):
        for _ in range(3):
            self.assertAllowed(self.check1("user", "t-aon"))
        resp = self.check([[("user", "t-aon")], [("bulk", "t-aon")]])
        body = self.assertDenied(resp)
        self.assertEqual([l["name"] for l in body["limits"]], ["itest.user", "bulk"])
        self.assertRetryAfter(resp)
        # bulk (10 per hour) was not charged for the denied request.
        self.assertAllowed(self.check1("bulk", "t-aon"), remaining=9)

    def test_admitted_request_consumes_every_descriptor(self):
        resp = self.check([[("user", "t-both")], [("bulk", "t-both")]])
        body = self.assertAllowed(resp, remaining=2)  # The minimum of 2 and 9.
        self.assertEqual([l["remaining"] for l in body["limits"]], [2, 9])
        self.assertEqual(resp.header("RateLimit-Limit"), "3")  # The closest limit.
        self.assertEqual(resp.header("RateLimit-Policy"), "3;w=3600, 10;w=3600")
        self.assertAllowed(self.check1("user", "t-both"), remaining=1)
        self.assertAllowed(self.check1("bulk", "t-both"), remaining=8)

    def test_descriptor_matching_no_rule_is_unlimited(self):
        for _ in range(5):
            body = self.assertUnlimited(self.check1("no_rule_key", "t-nomatch"))
            self.assertEqual(body["limits"], [])

    def test_unknown_domain_is_unlimited(self):
        for _ in range(5):  # More than user's 3 per hour.
            resp = self.check([[("user", "t-unknown-domain")]], domain="no-such-domain")
            body = self.assertUnlimited(resp)
            self.assertEqual(body["limits"], [])
        # And it did not count against the same descriptor in the real domain.
        self.assertAllowed(self.check1("user", "t-unknown-domain"), remaining=2)

    def test_cost_greater_than_one(self):
        self.assertAllowed(self.check1("bulk", "t-cost", cost=4), remaining=6)
        self.assertAllowed(self.check1("bulk", "t-cost", cost=6), remaining=0)
        resp = self.check1("bulk", "t-cost", cost=1)
        self.assertDenied(resp)
        self.assertRetryAfter(resp)

    def test_cost_above_remaining_is_denied_without_consuming(self):
        self.assertAllowed(self.check1("bulk", "t-cost-partial", cost=7), remaining=3)
        body = self.assertDenied(self.check1("bulk", "t-cost-partial", cost=4))
        self.assertEqual(body["remaining"], 3)
        self.assertAllowed(self.check1("bulk", "t-cost-partial", cost=3), remaining=0)

    def test_cost_zero_does_not_consume(self):
        for _ in range(4):
            self.assertAllowed(self.check1("bulk", "t-cost0", cost=0), remaining=10)
        self.assertAllowed(self.check1("bulk", "t-cost0", cost=1), remaining=9)
        self.assertAllowed(self.check1("bulk", "t-cost0", cost=0), remaining=9)

    def test_cost_above_limit_is_never_allowed(self):
        resp = self.check1("bulk", "t-cost-huge", cost=11)
        body = self.assertDenied(resp)
        self.assertEqual(body["retry_after_us"], -1)
        self.assertIsNone(resp.header("Retry-After"), "no retry can cure this: %r" % resp)
        self.assertAllowed(self.check1("bulk", "t-cost-huge", cost=10), remaining=0)

    def test_several_limits_on_one_descriptor(self):
        resp = self.check1("multi", "t-multi")
        body = self.assertAllowed(resp, remaining=2)
        self.assertEqual([(l["name"], l["limit"], l["period"], l["remaining"])
                          for l in body["limits"]],
                         [("multi_hour", 5, "1h", 4), ("multi_day", 3, "1d", 2)])
        self.assertEqual(resp.header("RateLimit-Limit"), "3")  # multi_day is the closest.
        self.assertEqual(resp.header("RateLimit-Remaining"), "2")
        self.assertEqual(resp.header("RateLimit-Policy"), "5;w=3600, 3;w=86400")
        self.assertAllowed(self.check1("multi", "t-multi"), remaining=1)
        self.assertAllowed(self.check1("multi", "t-multi"), remaining=0)
        resp = self.check1("multi", "t-multi")
        body = self.assertDenied(resp)
        by_name = {l["name"]: l for l in body["limits"]}
        self.assertIs(by_name["multi_day"]["allowed"], False)
        self.assertIs(by_name["multi_hour"]["allowed"], True)
        # All or nothing: the hourly limit was not charged for the denied request.
        self.assertEqual(by_name["multi_hour"]["remaining"], 2)
        self.assertRetryAfter(resp)

    def test_wildcard_value(self):
        body = self.assertAllowed(self.check1("path", "/foo/a"), remaining=1)
        self.assertEqual([l["name"] for l in body["limits"]], ["foo_paths"])
        self.assertAllowed(self.check1("path", "/foo/a"), remaining=0)
        self.assertDenied(self.check1("path", "/foo/a"))
        # Each matching value is counted under its own key.
        self.assertAllowed(self.check1("path", "/foobar"), remaining=1)
        # The prefix itself ("/foo") matches; shorter or different values do not.
        self.assertAllowed(self.check1("path", "/foo"), remaining=1)
        self.assertEqual(self.assertUnlimited(self.check1("path", "/fo"))["limits"], [])
        self.assertEqual(self.assertUnlimited(self.check1("path", "/bar/foo"))["limits"], [])

    def test_nested_descriptors_need_equal_depth(self):
        body = self.assertAllowed(self.check([[("tenant", "t-n1"), ("op", "read")]]), remaining=1)
        self.assertEqual([l["name"] for l in body["limits"]], ["tenant_op"])
        self.assertAllowed(self.check([[("tenant", "t-n1"), ("op", "read")]]), remaining=0)
        self.assertDenied(self.check([[("tenant", "t-n1"), ("op", "read")]]))
        # Another tenant is another key.
        self.assertAllowed(self.check([[("tenant", "t-n2"), ("op", "read")]]), remaining=1)
        # Shallower, deeper, or the inner key alone: no rule.
        for entries in ([("tenant", "t-n1")],
                        [("tenant", "t-n1"), ("op", "read"), ("extra", "x")],
                        [("op", "read")],
                        [("op", "read"), ("tenant", "t-n1")]):
            with self.subTest(entries=entries):
                body = self.assertUnlimited(self.check([entries]))
                self.assertEqual(body["limits"], [])

    def test_exact_value_takes_precedence_over_key_only(self):
        for expected in range(5, -1, -1):  # vip has 6 per hour, more than user's 3.
            body = self.assertAllowed(self.check1("user", "vip"), remaining=expected)
            self.assertEqual([(l["name"], l["limit"]) for l in body["limits"]], [("vip", 6)])
        self.assertDenied(self.check1("user", "vip"))
        body = self.assertAllowed(self.check1("user", "vip2"), remaining=2)
        self.assertEqual([(l["name"], l["limit"]) for l in body["limits"]], [("itest.user", 3)])

    def test_unlimited_rule(self):
        for _ in range(5):
            body = self.assertUnlimited(self.check1("health", "t-unlimited"))
            self.assertEqual(body["limits"], [{"name": "health_unlimited", "unlimited": True}])

    def test_zero_requests_per_unit_always_denies_without_retry_after(self):
        for _ in range(3):
            resp = self.check1("blocked", "t-zero")
            body = self.assertDenied(resp)
            self.assertEqual(body["retry_after_us"], -1, resp)
            self.assertEqual(body["limits"][0]["name"], "blocked_zero")
            self.assertEqual(body["limits"][0]["limit"], 0)
            self.assertIsNone(resp.header("Retry-After"), "never allowed: %r" % resp)

    def test_zero_limit_denies_whole_request_without_consuming_others(self):
        resp = self.check([[("bulk", "t-zero-mix")], [("blocked", "t-zero-mix")]])
        self.assertDenied(resp)
        self.assertIsNone(resp.header("Retry-After"), resp)
        self.assertAllowed(self.check1("bulk", "t-zero-mix"), remaining=9)

    def test_replaces_drops_the_replaced_limit(self):
        self.assertAllowed(self.check1("rp_client", "t-rp"), remaining=0)
        self.assertDenied(self.check1("rp_client", "t-rp"))
        both = [[("rp_client", "t-rp")], [("rp_premium", "t-rp")]]
        for expected in (3, 2, 1, 0):
            body = self.assertAllowed(self.check(both), remaining=expected)
            self.assertEqual([l["name"] for l in body["limits"]], ["rp_premium"])
        self.assertDenied(self.check(both))
        # rp_general was not counted while replaced: another client value still has its 1.
        self.assertAllowed(self.check1("rp_client", "t-rp-other"), remaining=0)

    def test_shadow_mode_counts_but_never_denies(self):
        series = 'sluice_rule_shadow_denied_total{rule="trial_shadow"}'
        denied_series = 'sluice_rule_denied_total{rule="trial_shadow"}'
        text = SERVER.metrics()
        before = SERVER.metric(series, text) or 0
        denied_before = SERVER.metric(denied_series, text) or 0
        body = self.assertAllowed(self.check1("trial", "t-shadow"), remaining=0)
        self.assertEqual(body["limits"][0]["mode"], "shadow")
        self.assertIs(body["limits"][0]["allowed"], True)
        for _ in range(2):
            resp = self.check1("trial", "t-shadow")
            body = self.assertAllowed(resp)
            self.assertIs(body["limits"][0]["allowed"], False, resp)  # As decided.
            self.assertEqual(body["limits"][0]["mode"], "shadow")
            self.assertIsNone(resp.header("Retry-After"), resp)
        text = SERVER.metrics()
        self.assertEqual(SERVER.metric(series, text), before + 2)
        self.assertEqual(SERVER.metric(denied_series, text), denied_before)

    def test_shadow_limit_not_charged_when_request_denied(self):
        for _ in range(3):
            self.assertAllowed(self.check1("user", "t-shadow-mix"))
        self.assertDenied(self.check([[("user", "t-shadow-mix")], [("trial", "t-shadow-mix")]]))
        # The shadow limit (1 per hour) still has its one request.
        body = self.assertAllowed(self.check1("trial", "t-shadow-mix"), remaining=0)
        self.assertIs(body["limits"][0]["allowed"], True, body)

    def test_soft_mode_admits_past_the_limit_and_marks_it(self):
        for expected in (3, 2, 1, 0):
            resp = self.check1("soft", "t-soft")
            body = self.assertAllowed(resp, remaining=expected)
            self.assertIs(body["over_soft"], False, resp)
            self.assertEqual(body["limits"][0]["limit"], 4)  # The nominal limit.
            self.assertEqual(body["limits"][0]["mode"], "soft")
            self.assertEqual(resp.header("RateLimit-Limit"), "4")
        for _ in range(2):  # 50% more: 6 in all.
            resp = self.check1("soft", "t-soft")
            body = self.assertAllowed(resp, remaining=0)
            self.assertIs(body["over_soft"], True, resp)
            self.assertIs(body["limits"][0].get("over_soft"), True, resp)
        body = self.assertDenied(self.check1("soft", "t-soft"))
        self.assertIs(body["over_soft"], False)

    def test_elastic_mode_borrows_from_its_pool(self):
        borrowed_series = 'sluice_rule_borrowed_total{rule="job_elastic"}'
        borrowed_before = SERVER.metric(borrowed_series) or 0
        for expected in (1, 0):
            body = self.assertAllowed(self.check1("job", "t-job"), remaining=expected)
            self.assertEqual(len(body["limits"]), 1, body)
            self.assertNotIn("borrowed", body["limits"][0])
        for pool_remaining in (1, 0):  # The pool 'spare' has 2 per hour.
            body = self.assertAllowed(self.check1("job", "t-job"))
            own, pool = body["limits"]
            self.assertEqual(own["name"], "job_elastic")
            self.assertIs(own["borrowed"], True, body)
            self.assertIs(pool.get("pool"), True, body)
            self.assertEqual(pool["name"], "itest.pool_spare")
            self.assertEqual(pool["remaining"], pool_remaining)
        resp = self.check1("job", "t-job")
        self.assertDenied(resp)
        self.assertRetryAfter(resp)
        self.assertEqual(SERVER.metric(borrowed_series), borrowed_before + 2)

    def test_ipv6_addresses_grouped_per_64_ipv4_per_address(self):
        key = "remote_address"
        self.assertAllowed(self.check1(key, "2001:db8:aa:1::1"), remaining=1)
        self.assertAllowed(self.check1(key, "2001:db8:aa:1:ffff:ffff:ffff:fffe"), remaining=0)
        self.assertDenied(self.check1(key, "2001:db8:aa:1::77"))  # Same /64: shared.
        self.assertAllowed(self.check1(key, "2001:db8:aa:2::1"), remaining=1)  # Other /64.
        self.assertAllowed(self.check1(key, "10.9.8.1"), remaining=1)
        self.assertAllowed(self.check1(key, "10.9.8.1"), remaining=0)
        self.assertDenied(self.check1(key, "10.9.8.1"))
        self.assertAllowed(self.check1(key, "10.9.8.2"), remaining=1)  # IPv4: per address.


# ----------------------------------------------------------------------------------------------
# POST /v1/check, ad hoc


class CheckAdHocTest(SluicedTest):

    def test_gcra_counts_down_then_denies_after_burst(self):
        request = {"key": "itest-adhoc-gcra", "algorithm": "gcra", "limit": 5, "period": "1s",
                   "burst": 5}
        for expected in (4, 3, 2, 1, 0):
            resp = SERVER.request("POST", "/v1/check", request)
            body = self.assertAllowed(resp, remaining=expected)
            limit = body["limits"][0]
            self.assertEqual((limit["name"], limit["algorithm"], limit["limit"], limit["period"]),
                             ("adhoc", "gcra", 5, "1s"))
            self.assertEqual(resp.header("RateLimit-Remaining"), str(expected))
            self.assertEqual(resp.header("RateLimit-Limit"), "5")
        resp = SERVER.request("POST", "/v1/check", request)
        body = self.assertDenied(resp)
        self.assertGreater(body["retry_after_us"], 0)
        self.assertLessEqual(body["retry_after_us"], 200_000)  # One emission interval.
        self.assertEqual(self.assertRetryAfter(resp), 1)
        # Another key has a burst of its own.
        other = dict(request, key="itest-adhoc-gcra-2")
        self.assertAllowed(SERVER.request("POST", "/v1/check", other), remaining=4)


# ----------------------------------------------------------------------------------------------
# POST /v1/acquire


class AcquireTest(SluicedTest):

    def acquire(self, body, timeout=10):
        return SERVER.request("POST", "/v1/acquire", body, timeout=timeout)

    def test_leaky_bucket_waiters_go_one_drain_apart_in_order(self):
        body = {"key": "t-acq-leaky", "algorithm": "leaky_bucket", "limit": 5, "period": "1s",
                "burst": 1, "max_wait": "5s"}
        answers = {}

        def ask(i):
            start = time.monotonic()
            resp = self.acquire(body)
            answers[i] = (resp, time.monotonic() - start)

        threads = []
        for i in range(5):
            threads.append(threading.Thread(target=ask, args=(i,)))
            threads[-1].start()
            time.sleep(0.02)  # Arrival order: 0, 1, 2, ...
        for t in threads:
            t.join()
        waits = []
        for i in range(5):
            resp, elapsed = answers[i]
            body_i = self.assertAllowed(resp)
            self.assertEqual(body_i["delay_us"], 0, resp)  # Waited out already.
            waits.append(body_i["waited_us"] / 1e6)
            self.assertGreaterEqual(elapsed + 0.05, waits[-1], resp)
        # 200 ms apart, in arrival order (each arrived 20 ms after the one before).
        for i in range(1, 5):
            self.assertAlmostEqual(waits[i] + 0.02 * i - waits[i - 1] - 0.02 * (i - 1), 0.2,
                                   delta=0.06, msg=waits)

    def test_too_far_off_is_429_at_once(self):
        body = {"key": "t-acq-far", "algorithm": "gcra", "limit": 1, "period": "10s",
                "max_wait": "1s"}
        self.assertAllowed(self.acquire(body))
        start = time.monotonic()
        resp = self.acquire(body)
        self.assertLess(time.monotonic() - start, 0.5)
        denied = self.assertDenied(resp)
        self.assertGreater(denied["retry_after_us"], 9_000_000, resp)
        self.assertRetryAfter(resp)

    def test_a_client_that_leaves_gives_up_its_place(self):
        body = {"key": "t-acq-leave", "algorithm": "gcra", "limit": 1, "period": "1s",
                "max_wait": "5s"}
        self.assertAllowed(self.acquire(body))
        # A second waits (raw socket), then leaves before its turn.
        raw = socket.create_connection(("127.0.0.1", SERVER.port), timeout=5)
        data = json.dumps(body).encode()
        raw.sendall(b"POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                    b"\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
        time.sleep(0.1)
        raw.close()
        time.sleep(0.1)
        # A third takes its place and the slot it waited for: answered within the second,
        # not a second later.
        start = time.monotonic()
        resp = self.acquire(body)
        elapsed = time.monotonic() - start
        self.assertAllowed(resp)
        self.assertLess(elapsed, 0.95, resp)

    def test_bad_max_wait_is_400(self):
        base = {"key": "t-acq-bad", "algorithm": "gcra", "limit": 1, "period": "1s"}
        self.assertBadRequest(self.acquire(dict(base, max_wait="soon")), "max_wait")
        self.assertBadRequest(self.acquire(dict(base, max_wait=5)), "max_wait", "string")
        self.assertBadRequest(self.acquire(dict(base, max_wait="2h")), "max_wait", "1h")
        self.assertBadRequest(SERVER.request("POST", "/v1/check", dict(base, max_wait="1s")),
                              "unknown field", "max_wait")
        resp = SERVER.request("GET", "/v1/acquire")
        self.assertEqual(resp.status, 405, resp)
        self.assertEqual(resp.header("Allow"), "POST", resp)

    def test_rules_mode_acquire(self):
        resp = self.acquire({"domain": DOMAIN, "max_wait": "0s",
                             "descriptors": [{"entries": [{"key": "user", "value": "t-acq-r"}]}]})
        body = self.assertAllowed(resp)
        self.assertIn("waited_us", body)


class LeaseTest(SluicedTest):
    """Concurrency limits: `concurrency: 2` with leases of 2 s on descriptor `slot`."""

    def take(self, value, max_wait="0s", timeout=10):
        return SERVER.request("POST", "/v1/acquire",
                              {"domain": DOMAIN, "max_wait": max_wait,
                               "descriptors": [{"entries": [{"key": "slot", "value": value}]}]},
                              timeout=timeout)

    def release(self, lease):
        return SERVER.request("POST", "/v1/release", {"lease": lease})

    def test_leases_are_taken_up_to_the_limit_and_given_back(self):
        first = self.assertAllowed(self.take("t-lease-1"))
        second = self.assertAllowed(self.take("t-lease-1"))
        self.assertNotEqual(first["lease"], second["lease"])
        self.assertEqual(first["lease_ttl_us"], 2_000_000, first)
        limit = second["limits"][0]
        self.assertEqual((limit["algorithm"], limit["limit"], limit["lease_ttl"]),
                         ("concurrency", 2, "2s"), second)
        resp = self.take("t-lease-1")
        denied = self.assertDenied(resp)
        self.assertNotIn("lease", denied)
        self.assertGreater(denied["retry_after_us"], 0)
        self.assertLessEqual(denied["retry_after_us"], 2_000_000)
        self.assertRetryAfter(resp)
        resp = self.release(first["lease"])
        self.assertEqual((resp.status, resp.json()), (200, {"released": True}), resp)
        resp = self.release(first["lease"])
        self.assertEqual((resp.status, resp.json()), (200, {"released": False}), resp)
        self.assertAllowed(self.take("t-lease-1"))
        # /v1/check takes a lease too; another value has slots of its own.
        resp = SERVER.request("POST", "/v1/check", {
            "domain": DOMAIN, "descriptors": [{"entries": [{"key": "slot", "value": "t-lease-2"}]}]})
        self.assertIn("lease", self.assertAllowed(resp, remaining=1))

    def test_a_waiting_acquire_is_answered_by_a_release(self):
        held = [self.assertAllowed(self.take("t-lease-3"))["lease"] for _ in range(2)]
        answers = []
        waiter = threading.Thread(target=lambda: answers.append(self.take("t-lease-3", "5s")))
        waiter.start()
        time.sleep(0.3)
        self.assertEqual(answers, [])
        self.assertEqual(self.release(held[0]).json(), {"released": True})
        waiter.join(timeout=5)
        body = self.assertAllowed(answers[0])
        # Woken by the release, long before the held lease would have expired (2 s).
        self.assertLess(body["waited_us"], 1_000_000, body)
        self.assertGreater(body["waited_us"], 250_000, body)

    def test_a_lease_not_given_back_expires(self):
        for _ in range(2):
            self.assertAllowed(self.take("t-lease-4"))
        start = time.monotonic()
        body = self.assertAllowed(self.take("t-lease-4", "5s"))
        self.assertGreater(time.monotonic() - start, 1.5)
        self.assertLess(body["waited_us"], 2_500_000, body)

    def test_bad_releases_are_400(self):
        self.assertBadRequest(SERVER.request("POST", "/v1/release", {}), "lease is missing")
        self.assertBadRequest(self.release(5), "lease", "string")
        self.assertBadRequest(SERVER.request("POST", "/v1/release", {"lease": "x", "id": 1}),
                              "unknown field", "id")
        self.assertBadRequest(self.release("not.a.lease!"), "not a lease token")
        self.assertBadRequest(SERVER.request("POST", "/v1/release", "{"), "malformed JSON")
        resp = SERVER.request("GET", "/v1/release")
        self.assertEqual((resp.status, resp.header("Allow")), (405, "POST"), resp)
        self.assertServing()


# ----------------------------------------------------------------------------------------------
# POST /json (envoyproxy/ratelimit's JSON)


class EnvoyJsonTest(SluicedTest):

    def assertStatusShape(self, status, code, requests_per_unit, unit, name, remaining):
        self.assertEqual(status["code"], code, status)
        expected = {"requestsPerUnit": requests_per_unit, "unit": unit}
        if name is not None:  # As envoyproxy/ratelimit: a limit without a name has none here.
            expected["name"] = name
        self.assertEqual(status["currentLimit"], expected)
        if remaining == 0:
            self.assertNotIn("limitRemaining", status)
        else:
            self.assertEqual(status.get("limitRemaining"), remaining, status)
        self.assertRegex(status["durationUntilReset"], DURATION_RE)
        self.assertGreater(float(status["durationUntilReset"][:-1]), 0)

    def test_statuses_in_request_order_then_over_limit(self):
        request = {"domain": DOMAIN, "descriptors": [
            {"entries": [{"key": "envoy", "value": "t-e1"}]},
            {"entries": [{"key": "no_rule_key", "value": "t-e1"}]},
            {"entries": [{"key": "envoy_sw", "value": "t-e1"}]},
        ]}
        for remaining, sw_remaining in ((2, 4), (1, 3), (0, 2)):
            resp = self.envoy(request)
            self.assertEqual(resp.status, 200, resp)
            body = resp.json()
            self.assertEqual(body["overallCode"], "OK")
            self.assertEqual(len(body["statuses"]), 3)
            self.assertStatusShape(body["statuses"][0], "OK", 3, "HOUR", "envoy_limit", remaining)
            self.assertLessEqual(float(body["statuses"][0]["durationUntilReset"][:-1]), 3600)
            self.assertEqual(body["statuses"][1], {"code": "OK"})
            self.assertStatusShape(body["statuses"][2], "OK", 5, "HOUR", "envoy_sliding",
                                   sw_remaining)
        resp = self.envoy(request)
        self.assertEqual(resp.status, 429, resp)
        body = resp.json()
        self.assertEqual(body["overallCode"], "OVER_LIMIT")
        self.assertStatusShape(body["statuses"][0], "OVER_LIMIT", 3, "HOUR", "envoy_limit", 0)
        self.assertEqual(body["statuses"][1], {"code": "OK"})
        # Each descriptor on its own: the one not over was still counted.
        self.assertStatusShape(body["statuses"][2], "OK", 5, "HOUR", "envoy_sliding", 1)

    def test_hits_addend_request_and_descriptor(self):
        resp = self.envoy({"domain": DOMAIN, "hitsAddend": 2, "descriptors": [
            {"entries": [{"key": "envoy", "value": "t-e3"}]},
            {"entries": [{"key": "envoy", "value": "t-e4"}], "hitsAddend": 3},
        ]})
        self.assertEqual(resp.status, 200, resp)
        statuses = resp.json()["statuses"]
        self.assertStatusShape(statuses[0], "OK", 3, "HOUR", "envoy_limit", 1)
        self.assertStatusShape(statuses[1], "OK", 3, "HOUR", "envoy_limit", 0)
        resp = self.envoy({"domain": DOMAIN, "descriptors": [
            {"entries": [{"key": "envoy", "value": "t-e4"}]}]})
        self.assertEqual(resp.status, 429, resp)
        self.assertEqual(resp.json()["statuses"][0]["code"], "OVER_LIMIT")
        # The string form protobuf JSON uses for 64-bit integers.
        resp = self.envoy({"domain": DOMAIN, "descriptors": [
            {"entries": [{"key": "envoy", "value": "t-e3"}], "hits_addend": "1"}]})
        self.assertEqual(resp.status, 200, resp)
        self.assertStatusShape(resp.json()["statuses"][0], "OK", 3, "HOUR", "envoy_limit", 0)

    def test_descriptor_hits_addend_zero_checks_without_counting(self):
        request = {"domain": DOMAIN, "descriptors": [
            {"entries": [{"key": "envoy", "value": "t-e0"}], "hitsAddend": 0}]}
        for _ in range(4):  # More than the limit of 3.
            resp = self.envoy(request)
            self.assertEqual(resp.status, 200, resp)
            self.assertStatusShape(resp.json()["statuses"][0], "OK", 3, "HOUR", "envoy_limit", 3)
        resp = self.envoy({"domain": DOMAIN, "descriptors": [
            {"entries": [{"key": "envoy", "value": "t-e0"}]}]})
        self.assertStatusShape(resp.json()["statuses"][0], "OK", 3, "HOUR", "envoy_limit", 2)

    def test_limit_override(self):
        request = {"domain": DOMAIN, "descriptors": [
            {"entries": [{"key": "no_rule_key", "value": "t-override"}],
             "limit": {"requestsPerUnit": 2, "unit": "HOUR"}}]}
        for code, remaining, status in (("OK", 1, 200), ("OK", 0, 200), ("OVER_LIMIT", 0, 429)):
            resp = self.envoy(request)
            self.assertEqual(resp.status, status, resp)
            body = resp.json()
            self.assertEqual(body["overallCode"], code)
            self.assertStatusShape(body["statuses"][0], code, 2, "HOUR", None, remaining)

    def test_unmatched_unlimited_and_unknown_domain(self):
        resp = self.envoy({"domain": DOMAIN, "descriptors": [
            {"entries": [{"key": "no_rule_key", "value": "t-e5"}]},
            {"entries": [{"key": "health", "value": "t-e5"}]}]})
        self.assertEqual(resp.status, 200, resp)
        self.assertEqual(resp.json(), {"overallCode": "OK", "statuses": [
            {"code": "OK"}, {"code": "OK", "limitRemaining": 4294967295}]})
        for _ in range(4):
            resp = self.envoy({"domain": "no-such-domain", "descriptors": [
                {"entries": [{"key": "envoy", "value": "t-e5"}]}]})
            self.assertEqual(resp.status, 200, resp)
            self.assertEqual(resp.json(), {"overallCode": "OK", "statuses": [{"code": "OK"}]})

    def test_bad_requests(self):
        entries = [{"entries": [{"key": "envoy", "value": "t-e6"}]}]
        cases = [
            ({"domain": "", "descriptors": entries}, "domain"),
            ({"descriptors": entries}, "domain"),
            ({"domain": DOMAIN, "descriptors": []}, "descriptors"),
            ({"domain": DOMAIN}, "descriptors"),
            ('{"domain": "itest", "descriptors": [', "malformed JSON"),
        ]
        for body, fragment in cases:
            with self.subTest(body=body):
                self.assertBadRequest(self.envoy(body), fragment)
        # None of them counted.
        resp = self.envoy({"domain": DOMAIN, "descriptors": entries})
        self.assertEqual(resp.status, 200, resp)
        self.assertEqual(resp.json()["statuses"][0]["limitRemaining"], 2)


# ----------------------------------------------------------------------------------------------
# GET /v1/auth


class AuthTest(SluicedTest):

    def test_allows_then_forbids_with_retry_after(self):
        for expected in (1, 0):
            resp = SERVER.request("GET", "/v1/auth", headers={"X-Auth-User": "t-auth1"})
            self.assertEqual(resp.status, 200, resp)
            self.assertEqual(resp.header("RateLimit-Limit"), "2", resp)
            self.assertEqual(resp.header("RateLimit-Remaining"), str(expected), resp)
            self.assertEqual(resp.header("RateLimit-Policy"), "2;w=3600", resp)
            self.assertRegex(resp.header("RateLimit-Reset") or "", r"^\d+$")
            self.assertIsNone(resp.header("Retry-After"))
        resp = SERVER.request("GET", "/v1/auth", headers={"x-auth-user": "t-auth1"})
        self.assertEqual(resp.status, 403, resp)
        self.assertEqual(resp.header("RateLimit-Remaining"), "0", resp)
        self.assertRetryAfter(resp)

    def test_missing_header_skips_its_descriptor(self):
        for _ in range(2):
            SERVER.request("GET", "/v1/auth", headers={"X-Auth-User": "t-auth2"})
        self.assertEqual(
            SERVER.request("GET", "/v1/auth", headers={"X-Auth-User": "t-auth2"}).status, 403)
        # Without X-Auth-User the user descriptor is skipped: only the API key counts.
        resp = SERVER.request("GET", "/v1/auth", headers={"X-Api-Key": "t-auth2-key"})
        self.assertEqual(resp.status, 200, resp)
        self.assertEqual([l["name"] for l in resp.json()["limits"]], ["auth_key_limit"])
        self.assertEqual(resp.header("RateLimit-Remaining"), "99")
        # With both, the exhausted user descriptor denies the whole request...
        resp = SERVER.request("GET", "/v1/auth", headers={"X-Api-Key": "t-auth2-key",
                                                          "X-Auth-User": "t-auth2"})
        self.assertEqual(resp.status, 403, resp)
        # ...without charging the API key.
        resp = SERVER.request("GET", "/v1/auth", headers={"X-Api-Key": "t-auth2-key"})
        self.assertEqual(resp.header("RateLimit-Remaining"), "98", resp)
        # No header at all: no descriptor, nothing limits the request.
        resp = SERVER.request("GET", "/v1/auth")
        self.assertEqual(resp.status, 200, resp)
        self.assertIsNone(resp.json()["remaining"])
        self.assertEqual(resp.json()["limits"], [])


# ----------------------------------------------------------------------------------------------
# Other endpoints


class EndpointsTest(SluicedTest):

    def test_healthz(self):
        self.assertServing()

    def test_metrics(self):
        series = 'sluice_rule_checks_total{rule="metered_limit"}'
        text = SERVER.metrics()
        self.assertIn("# TYPE sluice_rule_checks_total counter", text)
        self.assertIn("# TYPE sluice_decision_latency_seconds histogram", text)
        checks = SERVER.metric(series, text)
        self.assertIsNotNone(checks, "no %s in /metrics" % series)
        latency = SERVER.metric('sluice_decision_latency_seconds_bucket{le="+Inf"}', text)
        self.assertIsNotNone(latency)
        bad = SERVER.metric("sluice_bad_requests_total", text)
        self.assertIsNotNone(bad)

        for _ in range(3):
            self.assertAllowed(self.check1("metered", "t-metrics"))
        self.assertBadRequest(SERVER.request("POST", "/v1/check", "{"), "malformed JSON")

        resp = SERVER.request("GET", "/metrics")
        self.assertTrue(resp.header("Content-Type").startswith("text/plain"), resp)
        text = resp.body.decode()
        self.assertEqual(SERVER.metric(series, text), checks + 3)
        self.assertEqual(SERVER.metric('sluice_rule_admitted_total{rule="metered_limit"}', text),
                         checks + 3)
        self.assertGreaterEqual(
            SERVER.metric('sluice_decision_latency_seconds_bucket{le="+Inf"}', text), latency + 4)
        self.assertEqual(SERVER.metric("sluice_bad_requests_total", text), bad + 1)
        # Buckets are cumulative and end with +Inf == _count.
        buckets = [float(v) for v in re.findall(
            r'^sluice_decision_latency_seconds_bucket\{le="[^"]+"\} (\S+)$', text, re.M)]
        self.assertGreater(len(buckets), 1)
        self.assertEqual(buckets, sorted(buckets))
        self.assertEqual(buckets[-1], SERVER.metric("sluice_decision_latency_seconds_count", text))

    def test_transport_level_400s_count_as_bad_requests(self):
        # sluice_bad_requests_total is documented as "Requests refused as malformed (HTTP 400)".
        before = SERVER.metric("sluice_bad_requests_total")
        with SERVER.connect() as sock:
            sock.sendall(b"GARBAGE\r\n\r\n")
            data, _ = read_until_close(sock, 5)
        self.assertEqual(parse_raw_response(data)[0], 400, data)
        self.assertEqual(SERVER.metric("sluice_bad_requests_total"), before + 1,
                         "a malformed request line was answered 400 but not counted")

    def test_rules_lists_domain_and_rules(self):
        resp = SERVER.request("GET", "/v1/rules")
        self.assertEqual(resp.status, 200, resp)
        domains = resp.json()["domains"]
        self.assertEqual([d["domain"] for d in domains], [DOMAIN])
        rules = {r["path"]: r for r in domains[0]["rules"]}
        self.assertEqual(rules["itest.user"]["limits"],
                         [{"name": "itest.user", "algorithm": "fixed_window", "period": "1h",
                           "limit": 3, "mode": "hard"}])
        self.assertEqual(rules["itest.user_vip"]["limits"][0]["limit"], 6)
        self.assertEqual([l["name"] for l in rules["itest.multi"]["limits"]],
                         ["multi_hour", "multi_day"])
        self.assertIn("itest.path_/foo*", rules)
        self.assertIn("itest.tenant.op", rules)
        self.assertNotIn("itest.tenant", rules)  # No limit of its own.
        self.assertEqual(rules["itest.soft"]["mode"], "soft")
        self.assertEqual(rules["itest.soft"]["soft_percent"], 50)
        self.assertEqual(rules["itest.soft"]["limits"][0]["limit"], 4)
        self.assertEqual(rules["itest.job"]["pool"], "spare")
        self.assertEqual(rules["itest.trial"]["mode"], "shadow")
        self.assertEqual(rules["itest.rp_premium"]["limits"][0]["replaces"], ["rp_general"])
        self.assertEqual(rules["itest.health"]["limits"],
                         [{"name": "health_unlimited", "unlimited": True}])

    def test_unknown_path_is_404(self):
        for method, path in (("GET", "/nope"), ("POST", "/v1/checks"), ("GET", "/v1"),
                             ("GET", "/")):
            with self.subTest(method=method, path=path):
                resp = SERVER.request(method, path, body="{}" if method == "POST" else None)
                self.assertEqual(resp.status, 404, resp)
                self.assertIn("error", resp.json())

    def test_wrong_method_is_405(self):
        for method, path in (("GET", "/v1/check"), ("PUT", "/v1/check"), ("GET", "/json"),
                             ("POST", "/v1/auth"), ("POST", "/healthz"), ("DELETE", "/metrics"),
                             ("POST", "/v1/rules")):
            with self.subTest(method=method, path=path):
                resp = SERVER.request(method, path, body="{}" if method != "GET" else None)
                self.assertEqual(resp.status, 405, resp)
                self.assertIn(method, resp.json()["error"])

    def test_405_names_allowed_methods(self):
        # RFC 9110 section 15.5.6: a 405 response MUST carry an Allow header.
        for method, path, allowed in (("GET", "/v1/check", "POST"), ("POST", "/healthz", "GET")):
            with self.subTest(method=method, path=path):
                resp = SERVER.request(method, path, body="{}" if method != "GET" else None)
                self.assertEqual(resp.status, 405, resp)
                self.assertIsNotNone(resp.header("Allow"), "405 without Allow: %r" % resp)
                self.assertIn(allowed, resp.header("Allow"))


# ----------------------------------------------------------------------------------------------
# Bad input: a 400 naming the problem, and no change of state.


class BadInputTest(SluicedTest):

    def guard(self, value):
        return [{"entries": [{"key": "guard", "value": value}]}]

    def assertFullQuota(self, value):
        """The guard descriptor `value` was never counted (5 per hour)."""
        self.assertAllowed(self.check1("guard", value), remaining=4)
        self.assertServing()

    def assertRefused(self, body, value, *fragments):
        self.assertBadRequest(SERVER.request("POST", "/v1/check", body), *fragments)
        self.assertFullQuota(value)

    def test_malformed_json(self):
        body = json.dumps({"domain": DOMAIN, "descriptors": self.guard("t-bad-json")})
        self.assertRefused(body[:-1], "t-bad-json", "malformed JSON")
        self.assertRefused(body + "}", "t-bad-json2", "malformed JSON")

    def test_body_not_an_object(self):
        self.assertRefused([{"domain": DOMAIN, "descriptors": self.guard("t-bad-array")}],
                           "t-bad-array", "object")

    def test_domain_as_number(self):
        self.assertRefused({"domain": 5, "descriptors": self.guard("t-bad-domain")},
                           "t-bad-domain", "domain", "string")

    def test_cost_as_string(self):
        self.assertRefused({"domain": DOMAIN, "cost": "2", "descriptors": self.guard("t-bad-cs")},
                           "t-bad-cs", "cost", "integer")

    def test_cost_as_fraction(self):
        self.assertRefused({"domain": DOMAIN, "cost": 1.5, "descriptors": self.guard("t-bad-cf")},
                           "t-bad-cf", "cost", "integer")

    def test_negative_cost(self):
        self.assertRefused({"domain": DOMAIN, "cost": -1, "descriptors": self.guard("t-bad-neg")},
                           "t-bad-neg", "cost", "-1")

    def test_unknown_field(self):
        self.assertRefused({"domain": DOMAIN, "descriptors": self.guard("t-bad-field"),
                            "colour": "red"}, "t-bad-field", "unknown field", "colour")
        self.assertRefused({"domain": DOMAIN, "descriptors": [
            {"entries": [{"key": "guard", "value": "t-bad-field2", "extra": 1}]}]},
            "t-bad-field2", "unknown field", "descriptors[0].entries[0].extra")

    def test_entry_value_wrong_type(self):
        self.assertRefused({"domain": DOMAIN, "descriptors": self.guard("t-bad-vt") + [
            {"entries": [{"key": "guard", "value": 7}]}]},
            "t-bad-vt", "descriptors[1].entries[0].value", "string")

    def test_too_many_descriptors(self):
        self.assertRefused({"domain": DOMAIN, "descriptors": self.guard("t-bad-65") * 65},
                           "t-bad-65", "too many descriptors", "65", "64")
        # 64 is accepted (each distinct, so each counted once).
        resp = self.check([[("guard", "t-ok-64-%d" % i)] for i in range(64)])
        self.assertAllowed(resp, remaining=4)

    def test_too_many_entries(self):
        entries = [{"key": "e%d" % i, "value": "v"} for i in range(17)]
        self.assertRefused({"domain": DOMAIN,
                            "descriptors": self.guard("t-bad-17") + [{"entries": entries}]},
                           "t-bad-17", "descriptors[1]", "too many entries", "17", "16")

    def test_key_over_256_bytes(self):
        self.assertRefused({"domain": DOMAIN, "descriptors": self.guard("t-bad-key") + [
            {"entries": [{"key": "k" * 257, "value": "v"}]}]},
            "t-bad-key", "descriptors[1].entries[0].key", "256", "257")

    def test_value_over_1024_bytes(self):
        self.assertRefused({"domain": DOMAIN, "descriptors": self.guard("t-bad-val") + [
            {"entries": [{"key": "guard", "value": "v" * 1025}]}]},
            "t-bad-val", "descriptors[1].entries[0].value", "1024", "1025")

    def adhoc(self, key, **fields):
        body = {"key": key, "algorithm": "fixed_window", "limit": 5, "period": "1h"}
        body.update(fields)
        return body

    def assertAdHocFullQuota(self, key):
        self.assertAllowed(SERVER.request("POST", "/v1/check", self.adhoc(key)), remaining=4)
        self.assertServing()

    def test_adhoc_key_with_control_characters(self):
        for bad in ("t-ctl\x01", "t-ctl\n", "t-ctl\x1f"):
            with self.subTest(key=bad):
                self.assertBadRequest(SERVER.request("POST", "/v1/check", self.adhoc(bad)),
                                      "key", "control")
        self.assertAdHocFullQuota("t-ctl")

    def test_adhoc_unknown_algorithm(self):
        resp = SERVER.request("POST", "/v1/check", self.adhoc("t-alg", algorithm="fastest"))
        self.assertBadRequest(resp, "unknown algorithm", "fastest")
        self.assertAdHocFullQuota("t-alg")

    def test_adhoc_bad_period(self):
        resp = SERVER.request("POST", "/v1/check", self.adhoc("t-period", period="abc"))
        self.assertBadRequest(resp, "period", "abc")
        self.assertAdHocFullQuota("t-period")

    def test_adhoc_unknown_field(self):
        resp = SERVER.request("POST", "/v1/check", self.adhoc("t-adhoc-field", domain=DOMAIN))
        self.assertBadRequest(resp, "unknown field", "domain")
        self.assertAdHocFullQuota("t-adhoc-field")

    def assertTransport400(self, data, how, *fragments):
        status, headers, body = parse_raw_response(data)
        self.assertEqual(status, 400, "no 400 (connection ended by %s): %r" % (how, data[:300]))
        error = json.loads(body)["error"]
        for fragment in fragments:
            self.assertIn(fragment, error)
        self.assertEqual(headers.get("connection"), "close", data[:300])
        self.assertIn(how, ("eof", "reset"), "connection left open after the 400")

    def test_body_over_64_kib(self):
        body = json.dumps({"domain": DOMAIN, "descriptors": self.guard("t-big"),
                           "pad": "x" * 70_000}).encode()
        with SERVER.connect() as sock:
            try:
                sock.sendall(b"POST /v1/check HTTP/1.1\r\nHost: sluiced\r\n"
                             b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                             % len(body) + body)
            except OSError:
                pass  # The server may refuse before the body is all sent.
            data, how = read_until_close(sock, 5)
        self.assertTransport400(data, how, "body", "65536")
        self.assertFullQuota("t-big")

    def test_chunked_body_over_64_kib(self):
        body = json.dumps({"domain": DOMAIN, "descriptors": self.guard("t-big-chunked"),
                           "pad": "x" * 70_000}).encode()
        with SERVER.connect() as sock:
            try:
                sock.sendall(b"POST /v1/check HTTP/1.1\r\nHost: sluiced\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n"
                             + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
            except OSError:
                pass
            data, how = read_until_close(sock, 5)
        self.assertTransport400(data, how, "body", "65536")
        self.assertFullQuota("t-big-chunked")

    def test_headers_over_16_kib(self):
        with SERVER.connect() as sock:
            try:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: sluiced\r\nX-Pad: "
                             + b"a" * 20_000 + b"\r\n\r\n")
            except OSError:
                pass
            data, how = read_until_close(sock, 5)
        self.assertTransport400(data, how, "headers")
        self.assertServing()

    def test_garbage_request_line(self):
        for garbage in (b"GARBAGE\r\n\r\n", b"GET\x00/ HTTP/1.1\r\n\r\n",
                        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\x00" * 32):
            with self.subTest(garbage=garbage):
                with SERVER.connect() as sock:
                    sock.sendall(garbage)
                    data, how = read_until_close(sock, 5)
                self.assertTransport400(data, how, "malformed")
        self.assertServing()

    def test_half_sent_request_answered_400_after_read_timeout(self):
        # Content-Length 100 and only 10 bytes of body: the server's read timeout (10 s by
        # default) must end it with a 400 naming the problem, then close the connection.
        start = time.monotonic()
        with SERVER.connect() as sock:
            sock.sendall(b"POST /v1/check HTTP/1.1\r\nHost: sluiced\r\n"
                         b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
                         b'{"domain":')
            data, how = read_until_close(sock, 14)
        elapsed = time.monotonic() - start
        self.assertNotEqual(how, "timeout", "no answer within 14 s")
        self.assertGreater(elapsed, 8, "answered before the read timeout: %r" % data)
        self.assertTransport400(data, how, "not received")
        self.assertServing()


# ----------------------------------------------------------------------------------------------
# Hot reload


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
            took = wait_for(lambda: self.reloadable_limit(server) == 4, 3.0)
            self.assertIsNotNone(took, "the changed limit was not loaded within 3 s")
            self.assertLess(took, 1.5, "reload took %.2f s with --watch-interval 100ms" % took)
            self.assertEqual(server.metric("sluice_config_reloads_total"), reloads + 1)
            for expected in (3, 2, 1, 0):
                self.assertAllowed(self.check1("reloadable", "t-reload-1"), remaining=expected)
            self.assertDenied(self.check1("reloadable", "t-reload-1"))
            # Unchanged rules keep their counts across the reload.
            self.assertDenied(self.check1("user", "t-reload-keep"))

            write_atomically(server.config, BROKEN_YAML)
            took = wait_for(lambda: server.metric("sluice_config_reload_failures_total")
                            > failures, 3.0)
            self.assertIsNotNone(took, "the broken file was not noticed within 3 s")
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
            restored = wait_for(lambda: self.reloadable_limit(server) == 2, 3.0)
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
            took = wait_for(lambda: self.reloadable_limit(server) == 5, 3.0)
            self.assertIsNotNone(took, "SIGHUP did not reload the rules")
            self.assertEqual(server.metric("sluice_config_reloads_total"), 1)
            # A broken file on SIGHUP: refused, counted, rules kept, still serving.
            write_atomically(server.config, BROKEN_YAML)
            server.proc.send_signal(signal.SIGHUP)
            took = wait_for(
                lambda: server.metric("sluice_config_reload_failures_total") == 1, 3.0)
            self.assertIsNotNone(took, "the broken file was not counted as a failed reload")
            self.assertEqual(self.reloadable_limit(server), 5)
            self.assertIsNone(server.proc.poll(), "sluiced exited on a broken reload")
            rc = server.stop()
            self.assertEqual(rc, 0, server.output())
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
                    capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
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
                capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
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
            server.start(timeout=20)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(10)
            sock.connect(("127.0.0.1", server.port))
            with sock:
                sock.sendall(b"GET /v1/rules HTTP/1.1\r\nHost: sluiced\r\n\r\n")
                time.sleep(0.5)
                server.proc.send_signal(signal.SIGTERM)
                time.sleep(0.5)
                self.assertIsNone(server.proc.poll(),
                                  "sluiced exited with a response still being written")
                data, how = read_until_close(sock, 10)
            status, headers, body = parse_raw_response(data)
            self.assertEqual(status, 200, data[:300])
            self.assertEqual(len(body), int(headers["content-length"]),
                             "truncated response (connection ended by %s)" % how)
            self.assertEqual(len(json.loads(body)["domains"][0]["rules"]), 20_000)
            try:
                rc = server.proc.wait(10)
            except subprocess.TimeoutExpired:
                rc = "still running"
            self.assertEqual(rc, 0, server.output())
        finally:
            server.stop()
            server.cleanup()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sluiced", default=SLUICED, help="the sluiced binary to test")
    args, rest = parser.parse_known_args()
    sluiced.BINARY = os.path.abspath(args.sluiced)
    if not os.access(sluiced.BINARY, os.X_OK):
        sys.exit("no executable sluiced at %s (pass --sluiced PATH)" % sluiced.BINARY)
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
