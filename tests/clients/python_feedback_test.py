#!/usr/bin/env python3
"""A partner's feedback through the Python client (issue 36), against a real sluiced and a
real local HTTP partner: the requests adapter, the httpx transports (sync and async), the
answers that are not told, and a fleet of three sluiced on one redis-server with workers on
each, where one worker's 429 pauses all of them, the calls after the pause are spaced at the
limit's rate, and the count follows the partner's lower remaining.

    /usr/bin/python3 tests/clients/python_feedback_test.py --sluiced build/bin/sluiced

Needs Debian's python3-requests and python3-httpx (for /usr/bin/python3); every assertion is
a bound sluiced guarantees (a pause's length, at most the rate after it), never a speed.
"""

import asyncio
import http.server
import os
import shutil
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "clients", "python"), os.path.join(ROOT, "tests", "integration")]

import httpx  # noqa: E402
import redis_test  # noqa: E402
import requests  # noqa: E402
import sluice  # noqa: E402
import sluiced  # noqa: E402

RATE = 10  # The rule's rate, per second; its burst is as large, so a pause's drain shows.
RULES = f"""domain: jobs
descriptors:
  - key: partner
    rate_limit: {{unit: second, requests_per_unit: {RATE}, algorithm: gcra, burst: {RATE},
                 feedback: {{max_pause: 5s, pause: 1s}}}}
"""


class Partner:
    """A local HTTP partner: answers each call with `script(n)` (the call's number from 0):
    (status, headers). Keeps the monotonic time of each call and what it answered."""

    def __init__(self, script):
        self.script = script
        self.calls = []  # (time, status)
        self.lock = threading.Lock()
        partner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                with partner.lock:
                    n = len(partner.calls)
                    status, headers = partner.script(n)
                    partner.calls.append((time.monotonic(), status))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/orders"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def client_of(server):
    return sluice.Client(f"http://127.0.0.1:{server.port}", timeout=30)


LIMIT = {"domain": "jobs", "descriptors": [{"partner": "acme"}]}

SERVER = None


def setUpModule():
    global SERVER
    SERVER = sluiced.Sluiced.with_rules(RULES).start()


def tearDownModule():
    if SERVER is not None:
        SERVER.cleanup()


class AdapterTest(unittest.TestCase):
    def setUp(self):
        self.client = client_of(SERVER)
        self.addCleanup(self.client.close)
        # Each test its own partner value: no test's pause reaches another.
        self.limit = {"domain": "jobs", "descriptors": [{"partner": self.id()}]}

    def partner(self, script):
        p = Partner(script)
        self.addCleanup(p.close)
        return p

    def test_requests_adapter_a_429_pauses_the_next_call_for_its_retry_after(self):
        partner = self.partner(lambda n: (429, [("Retry-After", "2")]) if n == 0 else (200, []))
        session = requests.Session()
        self.addCleanup(session.close)
        session.mount("http://", sluice.adapters.requests_adapter(self.client, **self.limit))
        self.assertEqual(session.get(partner.url).status_code, 429)
        d = self.client.check(cost=0, **self.limit)
        self.assertFalse(d.allowed)
        self.assertGreater(d.retry_after, 1.0)
        self.assertEqual(session.get(partner.url).status_code, 200)
        (first, _), (second, _) = partner.calls
        self.assertGreaterEqual(second - first, 2.0 - 0.001)

    def test_httpx_transport_nothing_remaining_until_a_reset_is_a_pause(self):
        partner = self.partner(lambda n: (200, [("X-RateLimit-Remaining", "0"),
                                                ("X-RateLimit-Reset", "1")]) if n == 0
                               else (200, []))
        transport = sluice.adapters.httpx_transport(self.client, **self.limit)
        with httpx.Client(transport=transport) as http_client:
            http_client.get(partner.url)
            http_client.get(partner.url)
        (first, _), (second, _) = partner.calls
        self.assertGreaterEqual(second - first, 1.0 - 0.001)

    def test_httpx_async_transport(self):
        partner = self.partner(lambda n: (429, [("retry-after-ms", "1500")]) if n == 0
                               else (200, []))

        async def run():
            aclient = sluice.AsyncClient(f"http://127.0.0.1:{SERVER.port}", timeout=30)
            transport = sluice.adapters.httpx_async_transport(aclient, **self.limit)
            async with httpx.AsyncClient(transport=transport) as http_client:
                await http_client.get(partner.url)
                await http_client.get(partner.url)

        asyncio.run(run())
        (first, _), (second, _) = partner.calls
        self.assertGreaterEqual(second - first, 1.5 - 0.001)

    def test_a_lower_remaining_brings_ours_down(self):
        partner = self.partner(lambda n: (200, [("RateLimit", '"default";r=2;t=1')]))
        session = requests.Session()
        self.addCleanup(session.close)
        session.mount("http://", sluice.adapters.requests_adapter(self.client, **self.limit))
        session.get(partner.url)
        self.assertLessEqual(self.client.check(cost=0, **self.limit).remaining, 2)

    def test_answers_about_nothing_are_not_told_and_other_headers_never_sent(self):
        before = SERVER.metric("sluice_feedback_total")
        told = self.client.feedback(200, {"Set-Cookie": "session=secret", "X-Id": "1"},
                                    **self.limit)
        self.assertFalse(told)
        self.assertIsNone(told.error)
        self.assertEqual(SERVER.metric("sluice_feedback_total"), before)
        told = self.client.feedback(429, {"Set-Cookie": "session=secret",
                                          "Retry-After": "soon"}, **self.limit)
        self.assertTrue(told)
        # Retry-After was sent and read (its note), the cookie was not sent at all.
        self.assertTrue(any("retry-after" in note.lower() for note in told.notes), told.notes)
        self.assertFalse(any("secret" in note for note in told.notes))
        self.assertEqual(told.limits[0].pause, 1.0)  # The rule's pause: no time was read.

    def test_an_adapter_with_a_cost_tells_the_answer_without_it(self):
        partner = self.partner(lambda n: (429, [("Retry-After", "1")]))
        session = requests.Session()
        self.addCleanup(session.close)
        session.mount("http://", sluice.adapters.requests_adapter(self.client, cost=2,
                                                                  **self.limit))
        self.assertEqual(session.get(partner.url).status_code, 429)  # The answer, not a raise.
        self.assertFalse(self.client.check(cost=0, **self.limit).allowed)  # Told: paused.

    def test_a_limit_without_feedback_is_named(self):
        told = self.client.feedback(429, {"Retry-After": "1"}, domain="jobs",
                                    descriptors=[{"other": "x"}])
        self.assertTrue(told)
        self.assertEqual(told.limits, [])

    def test_an_ad_hoc_limit_with_feedback(self):
        ask = {"key": "adhoc-" + self.id(), "limit": 5, "period": "1s",
               "feedback": {"max_pause": "3s"}}
        told = self.client.feedback(429, {"Retry-After": "3600"}, **ask)
        self.assertEqual(told.limits[0].pause, 3.0)
        self.assertTrue(any("max_pause" in note for note in told.limits[0].notes))
        self.assertFalse(self.client.check(**ask).allowed)
        with self.assertRaises(sluice.BadRequest):
            self.client.feedback(429, {}, key="adhoc-none", limit=5, period="1s")


@unittest.skipUnless(shutil.which("redis-server"), "needs redis-server")
class FleetTest(unittest.TestCase):
    """Three sluiced on one redis-server, two workers on each."""

    PAUSE = 2.0

    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="sluice-feedback-fleet-")
        self.addCleanup(shutil.rmtree, self.workdir, True)
        with open(os.path.join(self.workdir, "rules.yaml"), "w") as f:
            f.write(RULES)
        self.redis = redis_test.Redis(self.workdir)
        self.addCleanup(self.redis.stop)
        self.clients = []
        for _ in range(3):
            server = sluiced.Sluiced(self.workdir, "--store", self.redis.url,
                                     *sluiced.with_redis_timeout([]))
            self.addCleanup(server.stop)
            client = client_of(server)
            self.addCleanup(client.close)
            self.clients.append(client)

    def test_one_workers_429_pauses_every_worker_then_calls_are_spaced(self):
        # The partner answers its 6th call 429 with Retry-After, every other 200.
        partner = Partner(lambda n: (429, [("Retry-After", "%g" % self.PAUSE)]) if n == 5
                          else (200, []))
        self.addCleanup(partner.close)
        grants = []  # (asked, granted): monotonic times of each acquire that went ahead.
        told = {}  # When the 429's feedback came back, and from which worker.
        stop = time.monotonic() + self.PAUSE + 3.0
        lock = threading.Lock()

        def worker(client):
            with requests.Session() as session:
                while time.monotonic() < stop:
                    asked = time.monotonic()
                    d = client.acquire(max_wait=10, **LIMIT)
                    if not d.allowed:
                        continue
                    granted = time.monotonic()
                    response = session.get(partner.url)
                    client.feedback(response.status_code, response.headers.items(), **LIMIT)
                    with lock:
                        grants.append((asked, granted))
                        if response.status_code == 429:
                            told["at"] = time.monotonic()
                            # Every server of the fleet sees the pause at once.
                            told["seen"] = [not c.check(cost=0, **LIMIT).allowed
                                            for c in self.clients]

        threads = [threading.Thread(target=worker, args=(c,)) for c in self.clients
                   for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertIn("at", told, "the partner's 429 was never met")
        self.assertEqual(told["seen"], [True, True, True])
        t429 = next(t for t, status in partner.calls if status == 429)
        pause_end = t429 + self.PAUSE  # sluiced's pause ends no sooner.
        # No acquire asked after the feedback went ahead before the pause's end.
        after = [granted for asked, granted in grants if asked > told["at"]]
        self.assertTrue(after, "no call after the pause")
        self.assertGreaterEqual(min(after), pause_end - 0.001)
        # In the second after it, at most the rate: the burst was drained by the pause.
        first_second = [g for g in after if g < pause_end + 1.0]
        self.assertLessEqual(len(first_second), RATE + 1)

    def test_the_count_follows_the_partners_lower_remaining(self):
        one, two, three = self.clients
        self.assertEqual(one.check(cost=0, **LIMIT).remaining, RATE)
        start = time.monotonic()
        told = two.feedback(200, [("X-RateLimit-Remaining", "3"), ("X-RateLimit-Reset", "1")],
                            **LIMIT)
        self.assertEqual(told.limits[0].lowered, RATE - 3)
        remaining = three.check(cost=0, **LIMIT).remaining
        # 3, and what the rate has refilled since (one per 1/RATE s), however slow this runs.
        self.assertLessEqual(remaining, 3 + int((time.monotonic() - start) * RATE))
        # Higher: nothing changes.
        self.assertEqual(one.feedback(200, [("X-RateLimit-Remaining", "9")], **LIMIT)
                         .limits[0].lowered, 0)


if __name__ == "__main__":
    sluiced.main(verbosity=2)
