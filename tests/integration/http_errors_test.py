#!/usr/bin/env python3
"""Integration tests for sluiced's HTTP API: bad input, in the body and at the transport. Each
is a 400 naming the problem, and changes no state.

    python3 tests/integration/http_errors_test.py --sluiced build/bin/sluiced [unittest options]

Runs the tests against a sluiced of its own, as http_test.py does (http_fixture.py starts it).
Python 3.11 standard library only.
"""

import json
import time

from http_fixture import (DOMAIN, SERVER, SluicedTest, main, parse_raw_response, read_until_close,
                          setUpModule, tearDownModule)


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
            data, how = read_until_close(sock, 60)
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
            data, how = read_until_close(sock, 60)
        self.assertTransport400(data, how, "body", "65536")
        self.assertFullQuota("t-big-chunked")

    def test_headers_over_16_kib(self):
        with SERVER.connect() as sock:
            try:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: sluiced\r\nX-Pad: "
                             + b"a" * 20_000 + b"\r\n\r\n")
            except OSError:
                pass
            data, how = read_until_close(sock, 60)
        self.assertTransport400(data, how, "headers")
        self.assertServing()

    def test_garbage_request_line(self):
        for garbage in (b"GARBAGE\r\n\r\n", b"GET\x00/ HTTP/1.1\r\n\r\n",
                        b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\x00" * 32):
            with self.subTest(garbage=garbage):
                with SERVER.connect() as sock:
                    sock.sendall(garbage)
                    data, how = read_until_close(sock, 60)
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
            data, how = read_until_close(sock, 60)  # A watchdog, for a loaded machine.
        elapsed = time.monotonic() - start
        self.assertNotEqual(how, "timeout", "no answer within 60 s")
        self.assertGreater(elapsed, 8, "answered before the read timeout: %r" % data)
        self.assertTransport400(data, how, "not received")
        self.assertServing()


if __name__ == "__main__":
    main(__doc__)
