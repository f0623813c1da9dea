#!/usr/bin/env python3
"""Hostile receipts against running sluiced (issue 33), on one redis-server: each refused
with 400 naming the reason, and nothing changed by it: a cost-0 check answers the same
remaining before and after, on every key the receipt names (or was made to name), and the
genuine receipt still settles afterwards (a refusal claims nothing).

- forged: a random signature, another receipt's signature, a token cut short;
- one figure changed, the signature kept (the payload decoded, a figure rewritten, encoded
  again): the expiry later and earlier (so an expiry cannot be stretched, nor a live receipt
  passed off as expired), the cost, a limit's charge and max_debt, a byte of the key;
- signed by a sluiced with another --secret-file on the same Redis;
- replayed: twice on one server, and once each on two servers sharing the store;
- a 10 MB body (400 and the connection closed: the body bound), empty and absent receipts,
  receipts that are no token, fields of the wrong type, costs out of range.

Real expiry takes a minute at least (a receipt's shortest life): the C++ tests play it on a
manual clock (tests/server/service/settle_test.cc, receipt_expiry_test.cc). Python 3
standard library only.

    python3 tests/integration/settle_receipts_test.py --sluiced build/bin/sluiced
"""

import json
import secrets
import socket
import threading

import sluiced
from redis_test import RedisCase
from settle_fixture import MONTH, Payload, b64encode, check_body, left, post, server_flags

RULES = """
domain: receipts
descriptors:
  - key: user
    rate_limit: {name: user, unit: month, requests_per_unit: 100}
"""
SIGNATURE = "signature does not match"


class ReceiptsTest(RedisCase):
    rules = RULES

    def setUp(self):
        # Counts compared before and after must not straddle a window's end.
        sluiced.away_from_edge(MONTH, 120)
        super().setUp()

    def serve(self, secret="secret"):
        return self.start(*server_flags(self.workdir, secret=secret))

    def receipt(self, server, user, cost=2):
        """A genuine receipt for `cost` units of `user`, from `server`."""
        status, answer, _ = post(server, "/v1/check",
                                 check_body("receipts", cost, receipt=True, user=user))
        self.assertEqual(status, 200, answer)
        return answer["receipt"], answer

    def assertRefused(self, servers, payload, fragments, users, status=400):
        """A settle of `payload` on servers[0] answered `status` with an error naming each of
        `fragments`; every user in `users` left as it was, seen from every server."""
        before = [left(s, "receipts", user=u) for s in servers for u in users]
        code, answer, _ = post(servers[0], "/v1/settle", payload)
        self.assertEqual(code, status, (payload, answer))
        for fragment in fragments:
            self.assertIn(fragment, answer["error"], payload)
        self.assertEqual([left(s, "receipts", user=u) for s in servers for u in users], before,
                         f"changed by a refused settle: {payload}")

    def assertSettles(self, server, token, cost, given_back, charged=0):
        status, answer, _ = post(server, "/v1/settle", {"receipt": token, "cost": cost})
        self.assertEqual((status, answer.get("given_back"), answer.get("charged")),
                         (200, given_back, charged), answer)

    def refused_count(self, server):
        return server.metric("sluice_settles_refused_total") or 0

    def test_forged_and_changed_receipts_are_refused(self):
        a = self.serve()
        token, answer = self.receipt(a, "fay")
        other, _ = self.receipt(a, "gus")
        payload = Payload(token)
        # The token names what the check charged, and when it expires.
        self.assertEqual((payload.values["cost"], payload.values["count"]), (2, 1))
        self.assertEqual((payload.values["limits[0].name"], payload.values["limits[0].limit"],
                          payload.values["limits[0].units"]), (b"user", 100, 2))
        self.assertEqual(payload.values["expires"] - payload.values["issued"],
                         answer["receipt_ttl_us"])
        hour, expires = 3600 * 1_000_000, payload.values["expires"]
        forged = {
            "a random signature": payload.token(signature=b64encode(secrets.token_bytes(32))),
            "another receipt's signature": payload.token(signature=Payload(other).signature),
            "expiry an hour later": payload.with_figure("expires", expires + hour),
            "expired two hours ago": payload.with_figure("expires",
                                                         payload.values["issued"] - 2 * hour),
            "cost 200": payload.with_figure("cost", 200),
            "charge 100": payload.with_figure("limits[0].units", 100),
            "max_debt 90": payload.with_figure("limits[0].max_debt", 90),
            "key fay -> gay": payload.with_byte("limits[0].key",
                                                payload.values["limits[0].key"].rindex(b"fay"),
                                                ord("f") ^ ord("g")),
        }
        self.assertIn(b"gay", Payload(forged["key fay -> gay"]).values["limits[0].key"])
        refused = self.refused_count(a)
        for what, bad in forged.items():
            with self.subTest(what):
                self.assertNotEqual(bad, token)
                for cost in (0, 9):
                    self.assertRefused([a], {"receipt": bad, "cost": cost}, [SIGNATURE],
                                       ["fay", "gus", "gay"])
        # Cut short: no longer a token at all.
        self.assertRefused([a], {"receipt": token[:-10], "cost": 0}, ["receipt"], ["fay"])
        self.assertEqual(self.refused_count(a), refused + 2 * len(forged) + 1)
        # None of them claimed the receipt: it settles, once.
        self.assertSettles(a, token, 0, given_back=2)
        self.assertSettles(a, other, 3, given_back=0, charged=1)

    def test_a_receipt_signed_with_another_secret_is_refused(self):
        a, stranger = self.serve(), self.serve(secret="another-secret")
        token, _ = self.receipt(stranger, "hal")
        refused = self.refused_count(a)
        for cost in (0, 2, 7):
            self.assertRefused([a, stranger], {"receipt": token, "cost": cost}, [SIGNATURE],
                               ["hal"])
        self.assertEqual(self.refused_count(a), refused + 3)
        self.assertSettles(stranger, token, 1, given_back=1)  # Its own server's secret.

    def test_replays_are_refused_on_one_server_and_across_two(self):
        a, b = self.serve(), self.serve()
        twice, _ = self.receipt(a, "ida")
        self.assertSettles(a, twice, 0, given_back=2)
        for cost in (0, 5):
            self.assertRefused([a, b], {"receipt": twice, "cost": cost}, ["settled already"],
                               ["ida"])
        across, _ = self.receipt(b, "jon")
        self.assertSettles(a, across, 3, given_back=0, charged=1)
        for server in (b, a):
            self.assertRefused([server, a if server is b else b],
                               {"receipt": across, "cost": 0}, ["settled already"], ["jon"])
        self.assertEqual(self.refused_count(a) + self.refused_count(b), 4)

    def test_malformed_settles_are_refused(self):
        a = self.serve()
        token, _ = self.receipt(a, "kim")
        cases = [
            ({"receipt": "", "cost": 0}, ["receipt is empty"]),
            ({"cost": 0}, ["receipt is empty"]),
            ({"receipt": "hello", "cost": 0}, ["not a receipt from sluiced"]),
            ({"receipt": "r1.", "cost": 0}, ["not a receipt from sluiced"]),
            ({"receipt": "r1.!!!!.????", "cost": 0}, ["not a receipt from sluiced"]),
            ({"receipt": "r2" + token[2:], "cost": 0}, ["not a receipt from sluiced"]),
            ({"receipt": token.replace(".", "", 1), "cost": 0}, ["receipt"]),
        ]
        counted = len(cases)  # Each reaches the receipt's check, and is counted refused.
        cases += [
            ({"receipt": 123, "cost": 0}, ["receipt"]),
            ({"receipt": [token], "cost": 0}, ["receipt"]),
            ({"receipt": {"token": token}, "cost": 0}, ["receipt"]),
            ({"receipt": token, "cost": "0"}, ["cost"]),
            ({"receipt": token, "cost": 1.5}, ["cost"]),
            ({"receipt": token, "cost": -1}, ["cost"]),
            ({"receipt": token, "cost": 10**15 + 1}, ["cost"]),
            ({"receipt": token}, ["cost"]),
            ({"receipt": token, "cost": 0, "refund": True}, ["refund"]),
        ]
        refused = self.refused_count(a)
        for payload, fragments in cases:
            with self.subTest(payload=json.dumps(payload)[:80]):
                self.assertRefused([a], payload, fragments, ["kim"])
        for body in (b"", b"{", b'{"receipt": "' + token.encode() + b'", "cost": 0',
                     b"\xff\xfe"):
            with self.subTest(body=body[:20]):
                self.assertRefused([a], body, [], ["kim"])
        self.assertEqual(self.refused_count(a), refused + counted)
        self.assertSettles(a, token, 0, given_back=2)

    def test_ten_megabyte_settle_is_refused_and_the_connection_closed(self):
        a = self.serve()
        token, _ = self.receipt(a, "lou")
        before = left(a, "receipts", user="lou")
        body = json.dumps({"receipt": token, "cost": 0, "pad": "x" * (10 << 20)}).encode()
        data, how = b"", None
        with a.connect(timeout=120) as sock:
            # Sent from a thread while this one reads: the answer comes after 64 KiB, and
            # the rest of the body may meet a closed connection (an error the sender ignores).
            def send():
                try:
                    sock.sendall(b"POST /v1/settle HTTP/1.1\r\nHost: sluiced\r\n"
                                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                                 % len(body) + body)
                except OSError:
                    pass
            sender = threading.Thread(target=send)
            sender.start()
            try:
                while True:
                    chunk = sock.recv(65536)
                    if not chunk:
                        how = "eof"
                        break
                    data += chunk
            except ConnectionResetError:
                how = "reset"
            except socket.timeout:
                how = "timeout"
            try:
                sock.shutdown(socket.SHUT_RDWR)  # Ends the sender's sendall, if still at it.
            except OSError:
                pass  # Closed by the server already.
            sender.join()
        head, _, answer = data.partition(b"\r\n\r\n")
        self.assertTrue(head.startswith(b"HTTP/1.1 400"), data[:300])
        self.assertIn(b"connection: close", head.lower(), head)
        self.assertIn("65536", json.loads(answer)["error"])
        self.assertIn(how, ("eof", "reset"), "the connection stayed open after the 400")
        self.assertEqual(left(a, "receipts", user="lou"), before)
        self.assertSettles(a, token, 0, given_back=2)


if __name__ == "__main__":
    sluiced.main(verbosity=2)
