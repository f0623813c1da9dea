#!/usr/bin/env python3
"""Integration tests for sluiced's HTTP API: POST /v1/acquire (waiting for a turn) and the
leases of concurrency limits (POST /v1/release).

    python3 tests/integration/http_acquire_test.py --sluiced build/bin/sluiced [unittest options]

Runs the tests against a sluiced of its own, as http_test.py does (http_fixture.py starts it).
Python 3.11 standard library only.
"""

import json
import socket
import threading
import time

from http_fixture import DOMAIN, SERVER, SluicedTest, main, setUpModule, tearDownModule


# ----------------------------------------------------------------------------------------------
# POST /v1/acquire


class AcquireTest(SluicedTest):

    def acquire(self, body, timeout=60):
        return SERVER.request("POST", "/v1/acquire", body, timeout=timeout)

    def test_leaky_bucket_waiters_go_one_drain_apart(self):
        body = {"key": "t-acq-leaky", "algorithm": "leaky_bucket", "limit": 5, "period": "1s",
                "burst": 1, "max_wait": "30s"}
        answers = {}

        def ask(i):
            start = time.monotonic()
            resp = self.acquire(body)
            answers[i] = (resp, time.monotonic() - start, time.monotonic())

        first_sent = time.monotonic()
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done = []
        for i in range(5):
            resp, elapsed, finished = answers[i]
            body_i = self.assertAllowed(resp)
            self.assertEqual(body_i["delay_us"], 0, resp)  # Waited out already.
            waited = body_i["waited_us"] / 1e6
            self.assertGreaterEqual(elapsed + 0.05, waited, resp)
            self.assertLess(waited, 31, resp)  # Never past max_wait (and a timer's lateness).
            done.append(finished - first_sent)
        # Never faster than the drain, 200 ms a request, however the arrivals fell: the k-th
        # answer no earlier than k drains after the first request left (a loaded machine only
        # makes them later, so no upper bound but max_wait's).
        done.sort()
        for k in range(5):
            self.assertGreaterEqual(done[k], 0.2 * k - 0.001, done)

    def test_too_far_off_is_429_at_once(self):
        # A turn an hour off, max_wait 50 min: refused at once. A server that waited out the
        # max_wait first would answer 50 min later, past the request's timeout of 120 s (a
        # watchdog, which the answer at once meets on any machine).
        body = {"key": "t-acq-far", "algorithm": "gcra", "limit": 1, "period": "1h",
                "max_wait": "50m"}
        self.assertAllowed(self.acquire(body))
        resp = self.acquire(body, timeout=120)
        denied = self.assertDenied(resp)
        self.assertGreater(denied["retry_after_us"], 3_000_000_000, resp)
        self.assertRetryAfter(resp)

    def test_a_client_that_leaves_gives_up_its_place(self):
        # One every 10 s: the third's turn is 10 s after the first if the second gave up its
        # place, 20 s if not. The third may wait 15 s at most: admitted, it had the second's
        # place (a wait of at most 10 s, asked after the first's answer), which it could not
        # have had otherwise unless asked 5 s after the first (a wait above 15 s, refused at
        # once): the server's arithmetic says so, not the time the machine took.
        body = {"key": "t-acq-leave", "algorithm": "gcra", "limit": 1, "period": "10s",
                "max_wait": "30s"}
        first_start = time.monotonic()
        self.assertAllowed(self.acquire(body))
        # A second waits (raw socket), then leaves before its turn.
        raw = socket.create_connection(("127.0.0.1", SERVER.port), timeout=60)
        data = json.dumps(body).encode()
        raw.sendall(b"POST /v1/acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                    b"\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
        time.sleep(1)  # Most likely read by now (were it not, it never waited: no harm).
        raw.close()
        time.sleep(0.1)
        # A third takes its place and the slot it waited for.
        resp = self.acquire(dict(body, max_wait="15s"))
        third_done = time.monotonic()
        self.assertAllowed(resp)  # The place given up, not the turn 20 s off.
        self.assertGreaterEqual(third_done - first_start, 10, resp)  # Never before its turn.

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
    """Concurrency limits: `concurrency: 2` with leases of 2 s on descriptor `slot`, of an hour
    on `slot_long` (for the tests that must not see a lease expire on a slow machine)."""

    def take(self, value, max_wait="0s", timeout=60, key="slot"):
        return SERVER.request("POST", "/v1/acquire",
                              {"domain": DOMAIN, "max_wait": max_wait,
                               "descriptors": [{"entries": [{"key": key, "value": value}]}]},
                              timeout=timeout)

    def release(self, lease):
        return SERVER.request("POST", "/v1/release", {"lease": lease})

    def test_leases_are_taken_up_to_the_limit_and_given_back(self):
        first = self.assertAllowed(self.take("t-lease-1", key="slot_long"))
        second = self.assertAllowed(self.take("t-lease-1", key="slot_long"))
        self.assertNotEqual(first["lease"], second["lease"])
        self.assertEqual(first["lease_ttl_us"], 3_600_000_000, first)
        limit = second["limits"][0]
        self.assertEqual((limit["algorithm"], limit["limit"], limit["lease_ttl"]),
                         ("concurrency", 2, "1h"), second)
        resp = self.take("t-lease-1", key="slot_long")
        denied = self.assertDenied(resp)
        self.assertNotIn("lease", denied)
        self.assertGreater(denied["retry_after_us"], 0)
        self.assertLessEqual(denied["retry_after_us"], 3_600_000_000)  # When one would expire.
        self.assertRetryAfter(resp)
        resp = self.release(first["lease"])
        self.assertEqual((resp.status, resp.json()), (200, {"released": True}), resp)
        resp = self.release(first["lease"])
        self.assertEqual((resp.status, resp.json()), (200, {"released": False}), resp)
        self.assertAllowed(self.take("t-lease-1", key="slot_long"))
        # /v1/check takes a lease too; another value has slots of its own.
        resp = SERVER.request("POST", "/v1/check", {
            "domain": DOMAIN, "descriptors": [{"entries": [{"key": "slot", "value": "t-lease-2"}]}]})
        self.assertIn("lease", self.assertAllowed(resp, remaining=1))

    def test_a_waiting_acquire_is_answered_by_a_release(self):
        # The held leases live an hour and the waiter's max_wait is 30 s: allowed, it was woken
        # by the release. Nothing shows a waiter before its answer, so the release comes after a
        # pause; should a loaded machine read the waiter only after the release (then it waited
        # for nothing, proving nothing), again with a longer pause.
        for attempt, pause in enumerate((0.3, 2, 10, 30)):
            value = "t-lease-3-%d" % attempt
            held = [self.assertAllowed(self.take(value, key="slot_long"))["lease"]
                    for _ in range(2)]
            answers = []
            waiter = threading.Thread(
                target=lambda: answers.append(self.take(value, "30s", key="slot_long")))
            waiter.start()
            time.sleep(pause)
            self.assertEqual(answers, [])
            self.assertEqual(self.release(held[0]).json(), {"released": True})
            waiter.join(timeout=60)
            body = self.assertAllowed(answers[0])
            self.assertLess(body["waited_us"], 30_000_000, body)
            if body["waited_us"] >= pause / 2 * 1e6:  # It waited for the release.
                return
        self.fail("the waiter never arrived before the release")

    def test_a_lease_not_given_back_expires(self):
        start = time.monotonic()  # Before the leases: they expire 2 s after, no earlier.
        for _ in range(2):
            self.assertAllowed(self.take("t-lease-4"))
        body = self.assertAllowed(self.take("t-lease-4", "30s"))
        self.assertGreaterEqual(time.monotonic() - start, 2, body)
        self.assertLess(body["waited_us"], 30_000_000, body)

    def test_an_answer_no_rule_matched_says_unmatched(self):
        # A misspelt key, an unknown domain: admitted with no limit and no lease, and said.
        for domain, key in ((DOMAIN, "slots"), ("t-no-such-domain", "slot_long")):
            for path in ("/v1/acquire", "/v1/check"):
                resp = SERVER.request("POST", path, {
                    "domain": domain, "descriptors": [{"entries": [{"key": key, "value": "x"}]}]})
                body = self.assertAllowed(resp)
                self.assertEqual((body.get("unmatched"), body["remaining"], body["limits"]),
                                 (True, None, []), resp)
                self.assertNotIn("lease", body)
        # What a rule matched, an unlimited one included, and an ad hoc limit: not said.
        held = self.assertAllowed(self.take("t-lease-5", key="slot_long"))
        self.assertNotIn("unmatched", held)
        self.assertEqual(self.release(held["lease"]).json(), {"released": True})
        for body in ({"domain": DOMAIN,
                      "descriptors": [{"entries": [{"key": "health", "value": "t-unm"}]}]},
                     {"key": "t-unmatched", "limit": 5, "period": "1s"}):
            answer = self.assertAllowed(SERVER.request("POST", "/v1/acquire", body))
            self.assertNotIn("unmatched", answer)
            self.assertNotEqual(answer["limits"], [])

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


if __name__ == "__main__":
    main(__doc__)
