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


if __name__ == "__main__":
    main(__doc__)
