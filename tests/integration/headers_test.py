#!/usr/bin/env python3
"""sluiced's RateLimit headers chosen by --ratelimit-headers (or LIMIT_HEADERS_FORMAT), on a
real sluiced: the current draft by default, draft-06's and GitHub's X-RateLimit-* on request,
the same figures on /v1/check and /v1/auth; a bad value refused, naming the flag or the
variable. Python 3 standard library only.

    python3 tests/integration/headers_test.py --sluiced build/bin/sluiced
"""

import os
import re
import subprocess
import time
import unittest

import sluiced

RULES = """
domain: hdr
auth:
  - - {key: user, header: X-User}
descriptors:
  - key: user
    rate_limit: {algorithm: gcra, requests_per_unit: 10, unit: hour, burst: 20}
  - key: fixed
    rate_limit: {requests_per_unit: 3, unit: hour, name: per_hour}
"""


def check(server, key, value, cost=1):
    return server.request("POST", "/v1/check", {
        "domain": "hdr", "cost": cost, "descriptors": [{"entries": [{"key": key, "value": value}]}]})


class HeadersTest(unittest.TestCase):

    def start(self, *flags, env=None):
        server = sluiced.Sluiced.with_rules(RULES, *flags)
        self.addCleanup(server.cleanup)
        if env:
            saved = {name: os.environ.get(name) for name in env}
            os.environ.update(env)
            try:
                server.start()
            finally:
                for name, value in saved.items():
                    if value is None:
                        os.environ.pop(name)
                    else:
                        os.environ[name] = value
        else:
            server.start()
        return server

    def test_current_draft_by_default(self):
        server = self.start()
        resp = check(server, "user", "a")
        self.assertEqual(resp.status, 200, resp)
        # gcra 10/h burst 20: a quota of 20 per 2 h, 19 left.
        self.assertEqual(resp.header("RateLimit-Policy"), '"hdr.user";q=20;w=7200', resp)
        self.assertRegex(resp.header("RateLimit") or "", r'^"hdr\.user";r=19;t=\d+$')
        self.assertIsNone(resp.header("RateLimit-Limit"))
        # The same figures on /v1/auth.
        resp = server.request("GET", "/v1/auth", headers={"X-User": "a"})
        self.assertEqual(resp.status, 200, resp)
        self.assertRegex(resp.header("RateLimit") or "", r'^"hdr\.user";r=18;t=\d+$')
        # Cost above the burst: said so (nothing remains for it, no reset, no Retry-After).
        resp = check(server, "user", "a", cost=21)
        self.assertEqual(resp.status, 429, resp)
        self.assertEqual(resp.header("RateLimit"), '"hdr.user";r=0', resp)
        self.assertIsNone(resp.header("Retry-After"), resp)

    def test_draft_06_on_request(self):
        server = self.start("--ratelimit-headers", "draft-06")
        resp = check(server, "user", "b")
        self.assertEqual(resp.header("RateLimit-Limit"), "20", resp)
        self.assertEqual(resp.header("RateLimit-Remaining"), "19", resp)
        self.assertRegex(resp.header("RateLimit-Reset") or "", r"^\d+$")
        self.assertEqual(resp.header("RateLimit-Policy"), "20;w=7200", resp)
        self.assertIsNone(resp.header("RateLimit"))

    def test_x_ratelimit_from_the_environment(self):
        server = self.start(env={"LIMIT_HEADERS_FORMAT": "x-ratelimit"})
        before = time.time()
        for used in (1, 2, 3):
            resp = server.request("GET", "/v1/auth", headers={"X-User": "c"})
            self.assertEqual(resp.status, 200, resp)
            self.assertEqual(resp.header("X-RateLimit-Limit"), "20", resp)
            self.assertEqual(resp.header("X-RateLimit-Remaining"), str(20 - used), resp)
            self.assertEqual(resp.header("X-RateLimit-Used"), str(used), resp)
            # Epoch seconds: when the quota is whole again (the gcra refills one per 6 min).
            reset = int(resp.header("X-RateLimit-Reset"))
            self.assertGreaterEqual(reset, int(before) + used * 360)
            self.assertLessEqual(reset, time.time() + used * 360 + 1)
            self.assertIsNone(resp.header("RateLimit-Policy"))

    def test_bad_values_are_refused(self):
        for flags, env, says in ((["--ratelimit-headers", "draft-07"], None,
                                  "--ratelimit-headers"),
                                 ([], {"LIMIT_HEADERS_FORMAT": "github"}, "LIMIT_HEADERS_FORMAT")):
            proc = subprocess.run(
                [sluiced.BINARY, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", *flags],
                env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=60)
            self.assertNotEqual(proc.returncode, 0, proc)
            self.assertIn(says, proc.stderr)
            self.assertTrue(re.search(r"draft-ietf", proc.stderr), proc.stderr)


if __name__ == "__main__":
    sluiced.main()
