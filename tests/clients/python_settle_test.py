#!/usr/bin/env python3
"""The Python client's receipts, settles and resets (issue 33) against a real sluiced: a check
with a receipt settled below, above and at 0; a receipt settling once and a forged one
refused; the metered block settling what it set, keeping the estimate, refunding on an
exception; the asyncio client; reset with no, a wrong and the right admin token, and with
admin endpoints off; a sluiced that cannot be reached; two sluiced sharing a secret and a
redis-server, where a receipt one gave settles on the other, once for both.

    python3 tests/clients/python_settle_test.py --sluiced build/bin/sluiced

Standard library only (ctest runs it on the python3 of PATH and on Debian's /usr/bin/python3).
"""

import asyncio
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "clients", "python"), os.path.join(ROOT, "tests", "integration")]

import redis_test  # noqa: E402
import sluice  # noqa: E402
import sluiced  # noqa: E402

# sliding_log over an hour: exact, and no window edge to cross while a test runs.
RULES = """domain: llm
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: sliding_log}
"""
ADMIN_TOKEN = "test-admin-token-0123456789"

SERVER = None  # With --secret-file and --admin-token-file.
NO_ADMIN = None  # Without --admin-token-file: admin endpoints off.
SECRETS = None


def setUpModule():
    global SERVER, NO_ADMIN, SECRETS
    SECRETS = tempfile.mkdtemp(prefix="sluice-settle-test-")
    secret = os.path.join(SECRETS, "secret")
    token = os.path.join(SECRETS, "admin-token")
    with open(secret, "w") as f:
        f.write("s" * 48 + "\n")
    with open(token, "w") as f:
        f.write(ADMIN_TOKEN + "\n")
    SERVER = sluiced.Sluiced.with_rules(RULES, "--secret-file", secret, "--admin-token-file",
                                        token).start()
    NO_ADMIN = sluiced.Sluiced.with_rules(RULES, "--secret-file", secret).start()


def tearDownModule():
    for server in (SERVER, NO_ADMIN):
        if server is not None:
            server.cleanup()
    shutil.rmtree(SECRETS, ignore_errors=True)


def url(server=None):
    return "http://127.0.0.1:%d" % (server or SERVER).port


def user(name):
    return dict(domain="llm", descriptors=[{"user": name}])


def adhoc(key, limit=10):
    return dict(key=key, algorithm="sliding_log", limit=limit, period="1h")


class ReceiptTest(unittest.TestCase):
    def setUp(self):
        self.client = sluice.Client(url(), timeout=30)
        self.addCleanup(self.client.close)

    def remaining(self, ask):
        return self.client.check(cost=0, **ask).remaining

    def test_a_settle_below_the_estimate_gives_the_difference_back(self):
        d = self.client.check(cost=30, receipt=True, **user("ann"))
        self.assertEqual((d.allowed, d.remaining), (True, 70))
        self.assertIsInstance(d.receipt, str)
        self.assertTrue(d.receipt_ttl > 0, d)
        s = d.settle(10)
        self.assertIsInstance(s, sluice.Settlement)
        self.assertTrue(s)
        self.assertEqual((s.settled, s.cost, s.given_back, s.charged, s.error),
                         (True, 10, 20, 0, None))
        [limit] = s.limits
        self.assertEqual((limit.name, limit.given_back, limit.charged, limit.remaining),
                         ("llm.user", 20, 0, 90))
        self.assertEqual(self.remaining(user("ann")), 90)

    def test_a_settle_above_the_estimate_charges_the_rest(self):
        ask = adhoc("settle-above")
        d = self.client.check(cost=2, receipt=True, **ask)
        self.assertEqual(d.remaining, 8)
        s = self.client.settle(d.receipt, 5)
        self.assertEqual((s.settled, s.cost, s.given_back, s.charged), (True, 5, 0, 3))
        self.assertEqual((s.limits[0].name, s.limits[0].charged), ("adhoc", 3))
        self.assertEqual(self.remaining(ask), 5)

    def test_a_refund_settles_once_and_a_forged_receipt_is_refused(self):
        ask = adhoc("settle-once")
        d = self.client.check(cost=4, receipt=True, **ask)
        s = d.settle(0)
        self.assertEqual((s.cost, s.given_back, s.charged), (0, 4, 0))
        self.assertEqual(self.remaining(ask), 10)
        with self.assertRaisesRegex(sluice.BadRequest, "settled already") as raised:
            d.settle(0)
        self.assertEqual(raised.exception.status, 400)
        self.assertEqual(self.remaining(ask), 10)  # The replay changed nothing.
        for forged, why in (("r1.bm90.YQ", "not a receipt"), ("", "empty"),
                            ("x" * 100, "not a receipt")):
            with self.subTest(forged=forged[:20]):
                with self.assertRaisesRegex(sluice.BadRequest, why):
                    self.client.settle(forged, 1)
        self.assertEqual(self.remaining(ask), 10)

    def test_a_changed_figure_is_refused_and_the_receipt_stays_whole(self):
        ask = adhoc("settle-tampered")
        d = self.client.check(cost=4, receipt=True, **ask)
        # One character of the payload (after "r1."), six bits of it, changed.
        i = len("r1.") + 8
        tampered = d.receipt[:i] + ("B" if d.receipt[i] == "A" else "A") + d.receipt[i + 1:]
        with self.assertRaisesRegex(sluice.BadRequest, "signature"):
            self.client.settle(tampered, 0)
        self.assertEqual(self.remaining(ask), 6)
        self.assertEqual(d.settle(0).given_back, 4)  # The true receipt was not used up.

    def test_nothing_to_settle_when_nothing_was_charged(self):
        ask = adhoc("settle-nothing", limit=1)
        free = self.client.check(cost=0, receipt=True, **ask)
        self.assertEqual((free.allowed, free.receipt), (True, None))
        self.assertIsNone(free.settle(3))
        self.assertTrue(self.client.check(receipt=True, **ask).allowed)
        denied = self.client.check(receipt=True, **ask)
        self.assertEqual((denied.allowed, denied.receipt), (False, None))
        self.assertIsNone(denied.settle(0))
        unmatched = self.client.check(receipt=True, domain="nobody", descriptors=[{"u": "x"}])
        self.assertEqual((unmatched.allowed, unmatched.receipt), (True, None))

    def test_mistakes_the_client_sees_raise_before_anything_is_sent(self):
        plain = self.client.check(**adhoc("settle-plain"))
        with self.assertRaisesRegex(ValueError, "receipt=True"):
            plain.settle(1)
        d = self.client.check(receipt=True, **adhoc("settle-mistakes"))
        with self.assertRaises(ValueError):
            d.settle(-1)
        for cost in (True, 1.5, "2"):
            with self.assertRaises(TypeError):
                d.settle(cost)
        with self.assertRaises(TypeError):
            self.client.settle(None, 1)
        with self.assertRaisesRegex(TypeError, "max_debt"):
            self.client.check(max_debt=5, **user("x"))
        self.assertEqual(d.settle(1).given_back, 0)  # The receipt is still whole.

    def test_an_acquire_with_a_receipt_and_an_ad_hoc_max_debt(self):
        ask = dict(adhoc("settle-acquire"), max_debt=2)
        d = self.client.acquire(max_wait=0, cost=10, receipt=True, **ask)
        self.assertEqual((d.allowed, d.remaining), (True, 0))
        s = d.settle(15)  # 5 more, past the limit: max_debt bounds it to 2.
        self.assertEqual((s.settled, s.charged, s.limits[0].remaining), (True, 2, 0))
        self.assertFalse(self.client.check(**ask).allowed)

    def test_a_sluiced_that_cannot_be_reached_settles_nothing(self):
        with sluice.Client("http://127.0.0.1:%d" % sluiced.free_port()) as gone:
            with self.assertLogs("sluice", "WARNING"):
                s = gone.settle("r1.some.receipt", 0)
            self.assertFalse(s)
            self.assertEqual((s.settled, s.cost), (False, 0))
            self.assertIn("Connection refused", s.error)
            with self.assertRaisesRegex(sluice.SluiceError, "did not reset"):
                gone.reset(admin_token=ADMIN_TOKEN, **user("x"))


class MeteredTest(unittest.TestCase):
    def setUp(self):
        self.client = sluice.Client(url(), timeout=30)
        self.addCleanup(self.client.close)

    def remaining(self, ask):
        return self.client.check(cost=0, **ask).remaining

    def test_the_block_settles_the_cost_it_set(self):
        with self.client.metered(cost=20, **user("metered-set")) as m:
            self.assertIsInstance(m, sluice.Meter)
            self.assertEqual((m.estimate, m.cost, m.decision.remaining), (20, None, 80))
            self.assertIsNotNone(m.decision.receipt)
            m.cost = 35
        self.assertEqual((m.settlement.cost, m.settlement.given_back, m.settlement.charged),
                         (35, 0, 15))
        self.assertEqual(self.remaining(user("metered-set")), 65)

    def test_a_block_that_sets_no_cost_keeps_the_estimate(self):
        with self.client.metered(cost=7, **user("metered-none")) as m:
            pass
        self.assertIsNone(m.settlement)
        self.assertEqual(self.remaining(user("metered-none")), 93)

    def test_an_exception_refunds_unless_a_cost_was_set_or_keep_was_asked(self):
        for name, on_exception, set_cost, left in (("refund", "refund", None, 100),
                                                   ("keep", "keep", None, 90),
                                                   ("set", "refund", 4, 96)):
            with self.subTest(name=name):
                ask = user("metered-raise-" + name)
                with self.assertRaisesRegex(RuntimeError, "upstream failed"):
                    with self.client.metered(cost=10, on_exception=on_exception, **ask) as m:
                        if set_cost is not None:
                            m.cost = set_cost
                        raise RuntimeError("upstream failed")
                self.assertEqual(self.remaining(ask), left)

    def test_a_denial_raises_and_the_block_does_not_run(self):
        ask = user("metered-denied")
        with self.assertRaises(sluice.RateLimited) as raised:
            with self.client.metered(cost=101, **ask):
                self.fail("the block of a denied metered check ran")
        self.assertTrue(raised.exception.decision.never)
        with self.client.metered(cost=1, max_wait=0, **ask) as m:  # An acquire on entry.
            m.cost = 2
        self.assertEqual(m.settlement.charged, 1)

    def test_a_failed_settle_does_not_hide_the_blocks_exception(self):
        with self.assertLogs("sluice", "WARNING") as logged:
            with self.assertRaisesRegex(RuntimeError, "the block's own"):
                with self.client.metered(cost=3, **user("metered-settled")) as m:
                    self.client.settle(m.decision.receipt, 3)  # Settled: the exit's is refused.
                    m.cost = 1
                    raise RuntimeError("the block's own")
        self.assertIn("settled already", "".join(logged.output))
        self.assertIsNone(m.settlement)
        with self.assertRaises(ValueError):
            with self.client.metered(cost=1, **user("metered-settled")) as m:
                m.cost = -1  # Refused in the block, where the mistake is.

    def test_without_sluiced_under_allow_the_block_runs_and_nothing_is_settled(self):
        with sluice.Client("http://127.0.0.1:%d" % sluiced.free_port(), on_error="allow") as c:
            with c.metered(cost=5, **user("x")) as m:
                m.cost = 1
        self.assertEqual((m.decision.allowed, m.decision.receipt, m.settlement), (True, None, None))


class AsyncTest(unittest.TestCase):
    def test_the_asyncio_client_settles_and_meters(self):
        client = sluice.AsyncClient(url(), timeout=30)
        self.addCleanup(client.close)
        ask = user("async")

        async def main():
            d = await client.check(cost=10, receipt=True, **ask)
            s = await d.settle(4)
            self.assertEqual((s.given_back, s.limits[0].remaining), (6, 96))
            async with client.metered(cost=5, **ask) as m:
                m.cost = 0
            self.assertEqual(m.settlement.given_back, 5)
            d = await client.acquire(max_wait=0, cost=1, receipt=True, **ask)
            self.assertEqual((await client.settle(d.receipt, 0)).given_back, 1)
            with self.assertRaises(sluice.BadRequest):
                await client.settle(d.receipt, 0)
            self.assertEqual(await client.reset(admin_token=ADMIN_TOKEN, **ask), ["llm.user"])
            return (await client.check(cost=0, **ask)).remaining

        self.assertEqual(asyncio.run(main()), 100)


class ResetTest(unittest.TestCase):
    def setUp(self):
        self.client = sluice.Client(url(), timeout=30)
        self.addCleanup(self.client.close)

    def test_reset_needs_the_admin_token(self):
        ask = user("reset-me")
        self.assertTrue(self.client.check(cost=60, **ask).allowed)
        for token, status in ((None, 401), ("wrong-token-0123456789", 403)):
            with self.subTest(token=token):
                with self.assertRaises(sluice.Forbidden) as raised:
                    self.client.reset(admin_token=token, **ask)
                self.assertEqual(raised.exception.status, status)
                self.assertIsInstance(raised.exception, PermissionError)
        self.assertEqual(self.client.check(cost=0, **ask).remaining, 40)  # Refused: untouched.
        self.assertEqual(self.client.reset(admin_token=ADMIN_TOKEN, **ask), ["llm.user"])
        self.assertEqual(self.client.check(cost=0, **ask).remaining, 100)

    def test_reset_of_an_ad_hoc_key(self):
        ask = adhoc("reset-adhoc", limit=2)
        self.client.check(cost=2, **ask)
        self.assertFalse(self.client.check(**ask).allowed)
        self.assertEqual(self.client.reset(admin_token=ADMIN_TOKEN, **ask), ["adhoc"])
        self.assertTrue(self.client.check(**ask).allowed)
        with self.assertRaises(TypeError):
            self.client.reset(admin_token=ADMIN_TOKEN, cost=1, **ask)

    def test_an_ad_hoc_block_and_the_reset_that_lifts_it(self):
        # gcra 2 per second: its own wait after a denial is half a second; the block's an hour.
        ask = dict(key="py-block", algorithm="gcra", limit=2, period="1s", block=3600)
        self.client.check(cost=2, **ask)
        denied = self.client.check(**ask)
        self.assertFalse(denied.allowed)
        self.assertGreater(denied.retry_after, 60)  # The block's wait, not gcra's.
        without_block = {k: v for k, v in ask.items() if k != "block"}
        self.client.reset(admin_token=ADMIN_TOKEN, **without_block)  # Another limit.
        self.assertGreater(self.client.check(**ask).retry_after, 60)
        self.client.reset(admin_token=ADMIN_TOKEN, **ask)
        self.assertTrue(self.client.check(**ask).allowed)
        with self.assertRaisesRegex(TypeError, "block and feedback are for ad hoc"):
            self.client.check(block="1h", **user("x"))

    def test_admin_endpoints_off_without_the_flag(self):
        with sluice.Client(url(NO_ADMIN), timeout=30) as client:
            with self.assertRaisesRegex(sluice.Forbidden, "admin endpoints are off") as raised:
                client.reset(admin_token=ADMIN_TOKEN, **user("reset-off"))
        self.assertEqual(raised.exception.status, 403)


@unittest.skipUnless(shutil.which("redis-server"), "needs redis-server")
class FleetTest(unittest.TestCase):
    """Two sluiced on one redis-server with one secret: what `client.settle(receipt, cost)`
    from another process meets in a fleet."""

    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="sluice-settle-fleet-")
        self.addCleanup(shutil.rmtree, self.workdir, True)
        with open(os.path.join(self.workdir, "rules.yaml"), "w") as f:
            f.write(RULES)
        self.redis = redis_test.Redis(self.workdir)
        self.addCleanup(self.redis.stop)
        self.clients = []
        for _ in range(2):
            server = sluiced.Sluiced(self.workdir, "--store", self.redis.url, "--secret-file",
                                     os.path.join(SECRETS, "secret"), "--admin-token-file",
                                     os.path.join(SECRETS, "admin-token"),
                                     *sluiced.with_redis_timeout([]))
            self.addCleanup(server.stop)
            client = sluice.Client(url(server), timeout=30)
            self.addCleanup(client.close)
            self.clients.append(client)

    def test_a_receipt_settles_on_another_server_once_for_both(self):
        one, other = self.clients
        ask = user("fleet")
        d = one.check(cost=40, receipt=True, **ask)
        self.assertEqual(d.remaining, 60)
        s = other.settle(d.receipt, 15)
        self.assertEqual((s.given_back, s.limits[0].remaining), (25, 85))
        self.assertEqual(one.check(cost=0, **ask).remaining, 85)
        for client in (one, other):
            with self.assertRaisesRegex(sluice.BadRequest, "settled already"):
                client.settle(d.receipt, 0)
        self.assertEqual(other.reset(admin_token=ADMIN_TOKEN, **ask), ["llm.user"])
        self.assertEqual(one.check(cost=0, **ask).remaining, 100)


if __name__ == "__main__":
    sluiced.main(verbosity=2)
