#!/usr/bin/env python3
"""Integration tests for sluiced's HTTP API, black box, over real sockets: POST /v1/check in
rules mode and ad hoc, and the other endpoints (/healthz, /metrics, /v1/rules, 404 and 405).

    python3 tests/integration/http_test.py --sluiced build/bin/sluiced [unittest options]

Starts its own sluiced on a free loopback port with a temporary copy of
tests/integration/rules.yaml (--threads 2 --watch-interval 100ms), waits for /healthz, runs the
tests, then stops it with SIGTERM and requires exit code 0.

The rest of the API is tested beside this file: http_proxy_test.py (/json, /v1/auth),
http_acquire_test.py (/v1/acquire, leases), http_errors_test.py (bad input) and
http_reload_test.py (hot reload, start-up and shutdown).

Python 3.11 standard library only; the shared server and its helpers are in
http_fixture.py.
"""

import re

from http_fixture import (DOMAIN, SERVER, SluicedTest, ceil_seconds, main, parse_raw_response,
                          read_until_close, setUpModule, tearDownModule)


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
            # Headers (the current draft: docs/server.md).
            self.assertEqual(resp.header("RateLimit-Policy"), '"itest.user";q=3;w=3600', resp)
            match = re.fullmatch(r'"itest\.user";r=(\d+);t=(\d+)', resp.header("RateLimit") or "")
            self.assertIsNotNone(match, resp)
            self.assertEqual(int(match[1]), expected, resp)
            reset = int(match[2])
            self.assertEqual(reset, ceil_seconds(body["reset_after_us"]), resp)
            self.assertTrue(1 <= reset <= 3600, resp)
            self.assertIsNone(resp.header("RateLimit-Limit"), resp)  # draft-06's, not sent.
            self.assertIsNone(resp.header("Retry-After"), resp)

        resp = self.check1("user", "t-basic")
        body = self.assertDenied(resp)
        self.assertEqual(body["remaining"], 0)
        self.assertEqual(body["limits"][0]["allowed"], False)
        self.assertRegex(resp.header("RateLimit") or "", r'^"itest\.user";r=0;t=\d+$')
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
        self.assertRegex(resp.header("RateLimit"), r'^"itest\.user";r=2;')  # The closest.
        self.assertEqual(resp.header("RateLimit-Policy"),
                         '"itest.user";q=3;w=3600, "bulk";q=10;w=3600')
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
        # Said so in the headers: nothing remains for it, and no reset helps.
        self.assertEqual(resp.header("RateLimit"), '"bulk";r=0', resp)
        self.assertAllowed(self.check1("bulk", "t-cost-huge", cost=10), remaining=0)

    def test_several_limits_on_one_descriptor(self):
        resp = self.check1("multi", "t-multi")
        body = self.assertAllowed(resp, remaining=2)
        self.assertEqual([(l["name"], l["limit"], l["period"], l["remaining"])
                          for l in body["limits"]],
                         [("multi_hour", 5, "1h", 4), ("multi_day", 3, "1d", 2)])
        # multi_day is the closest; both are named.
        self.assertRegex(resp.header("RateLimit"), r'^"multi_day";r=2;t=\d+$')
        self.assertEqual(resp.header("RateLimit-Policy"),
                         '"multi_hour";q=5;w=3600, "multi_day";q=3;w=86400')
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
            self.assertEqual(resp.header("RateLimit-Policy"), '"soft_limit";q=4;w=3600')
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
        # Per hour: the burst does not refill (one every 12 minutes) while a loaded machine
        # sends the six requests.
        request = {"key": "itest-adhoc-gcra", "algorithm": "gcra", "limit": 5, "period": "1h",
                   "burst": 5}
        for expected in (4, 3, 2, 1, 0):
            resp = SERVER.request("POST", "/v1/check", request)
            body = self.assertAllowed(resp, remaining=expected)
            limit = body["limits"][0]
            self.assertEqual((limit["name"], limit["algorithm"], limit["limit"], limit["period"]),
                             ("adhoc", "gcra", 5, "1h"))
            self.assertRegex(resp.header("RateLimit"), r'^"adhoc";r=%d;t=\d+$' % expected)
            self.assertEqual(resp.header("RateLimit-Policy"), '"adhoc";q=5;w=3600')
        resp = SERVER.request("POST", "/v1/check", request)
        body = self.assertDenied(resp)
        self.assertGreater(body["retry_after_us"], 0)
        self.assertLessEqual(body["retry_after_us"], 720_000_000)  # One emission interval.
        self.assertRetryAfter(resp)
        # Another key has a burst of its own.
        other = dict(request, key="itest-adhoc-gcra-2")
        self.assertAllowed(SERVER.request("POST", "/v1/check", other), remaining=4)


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
            data, _ = read_until_close(sock, 60)
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


if __name__ == "__main__":
    main(__doc__)
