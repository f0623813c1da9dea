#!/usr/bin/env python3
"""Integration tests for sluiced's HTTP API: the endpoints proxies call, POST /json
(envoyproxy/ratelimit's JSON) and GET /v1/auth (nginx's auth_request).

    python3 tests/integration/http_proxy_test.py --sluiced build/bin/sluiced [unittest options]

Runs the tests against a sluiced of its own, as http_test.py does (http_fixture.py starts it).
Python 3.11 standard library only.
"""

import re

from http_fixture import DOMAIN, SERVER, SluicedTest, main, setUpModule, tearDownModule

DURATION_RE = re.compile(r"^\d+(\.\d{3}|\.\d{6}|\.\d{9})?s$")


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
            self.assertEqual(resp.header("RateLimit-Policy"), '"auth_user_limit";q=2;w=3600',
                             resp)
            self.assertRegex(resp.header("RateLimit") or "",
                             r'^"auth_user_limit";r=%d;t=\d+$' % expected)
            self.assertIsNone(resp.header("Retry-After"))
        resp = SERVER.request("GET", "/v1/auth", headers={"x-auth-user": "t-auth1"})
        self.assertEqual(resp.status, 403, resp)
        self.assertRegex(resp.header("RateLimit") or "", r'^"auth_user_limit";r=0;t=\d+$')
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
        self.assertRegex(resp.header("RateLimit") or "", r'^"auth_key_limit";r=99;t=\d+$')
        # With both, the exhausted user descriptor denies the whole request...
        resp = SERVER.request("GET", "/v1/auth", headers={"X-Api-Key": "t-auth2-key",
                                                          "X-Auth-User": "t-auth2"})
        self.assertEqual(resp.status, 403, resp)
        # ...without charging the API key.
        resp = SERVER.request("GET", "/v1/auth", headers={"X-Api-Key": "t-auth2-key"})
        self.assertRegex(resp.header("RateLimit") or "", r'^"auth_key_limit";r=98;t=\d+$')
        # No header at all: no descriptor, nothing limits the request.
        resp = SERVER.request("GET", "/v1/auth")
        self.assertEqual(resp.status, 200, resp)
        self.assertIsNone(resp.json()["remaining"])
        self.assertEqual(resp.json()["limits"], [])


if __name__ == "__main__":
    main(__doc__)
