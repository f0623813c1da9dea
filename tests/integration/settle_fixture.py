"""What the integration tests of issue 33 share (settle_fleet_test.py, settle_receipts_test.py,
settle_flood_test.py, reset_blocks_test.py): the files of --secret-file and
--admin-token-file, requests over keep-alive connections, and a receipt taken apart.

A receipt is "r1." + payload + "." + signature, both base64url without padding
(server/service/receipt.h). Its payload's layout is private to server/service/receipt.cc;
`Payload` reads version 1's, so that a test can change one figure of a real receipt and keep
its signature, as a client tampering with it would. Python 3 standard library only.
"""

import base64
import http.client
import json
import os
import secrets
import struct

import sluiced

# The bearer token of --admin-token-file: at least 16 printable bytes, no spaces.
ADMIN_TOKEN = "itest-admin-" + secrets.token_hex(16)
MONTH = 30 * 86400  # `unit: month`: a fixed window of 30 days, aligned to the epoch.


def write_file(directory, name, text):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(text + "\n")  # Trailing whitespace is trimmed by sluiced.
    return path


def server_flags(directory, secret="secret", token=True):
    """--secret-file (the file `secret` in `directory`, made once with a random secret of 64
    characters, so that every server given the same name shares it) and, with `token`,
    --admin-token-file holding ADMIN_TOKEN."""
    path = os.path.join(directory, secret)
    if not os.path.exists(path):
        write_file(directory, secret, secrets.token_hex(32))
    flags = ["--secret-file", path]
    if token:
        flags += ["--admin-token-file", write_file(directory, "admin.token", ADMIN_TOKEN)]
    return flags


def admin(token=ADMIN_TOKEN):
    return {"Authorization": f"Bearer {token}"}


def check_body(domain, cost=1, receipt=False, **entries):
    """A rules-mode check with one descriptor per entry (user="ann", app="x")."""
    body = {"domain": domain, "cost": cost,
            "descriptors": [{"entries": [{"key": k, "value": v}]} for k, v in entries.items()]}
    if receipt:
        body["receipt"] = True
    return body


def by_name(answer):
    """An answer's `limits` by name."""
    return {limit["name"]: limit for limit in answer.get("limits", [])}


class Connections:
    """Keep-alive HTTP connections of one thread, one per server; a connection the server
    closed (after a 400, or idle) is opened again once."""

    def __init__(self, timeout=120):
        self.timeout = timeout
        self.open = {}

    def post(self, server, path, payload, headers=None):
        """(status, answer as JSON, response headers) of one POST to `server`."""
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        for attempt in range(2):
            conn = self.open.get(server.port)
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=self.timeout)
                self.open[server.port] = conn
            try:
                conn.request("POST", path, data, hdrs)
                response = conn.getresponse()
                body = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                del self.open[server.port]
                if attempt == 1:
                    raise
                continue
            if response.getheader("Connection", "").lower() == "close":
                conn.close()
                del self.open[server.port]
            return response.status, json.loads(body), response.headers
        raise AssertionError("unreachable")

    def close(self):
        for conn in self.open.values():
            conn.close()
        self.open.clear()


def post(server, path, payload, headers=None):
    """(status, answer, headers) of one POST on a connection of its own."""
    conns = Connections()
    try:
        return conns.post(server, path, payload, headers)
    finally:
        conns.close()


def left(server, domain, **entries):
    """Each limit's remaining by name, from a cost-0 check (which changes nothing)."""
    status, answer, _ = post(server, "/v1/check", check_body(domain, cost=0, **entries))
    assert status in (200, 429), (status, answer)
    return {name: limit["remaining"] for name, limit in by_name(answer).items()}


def b64decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64encode(data):
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class Payload:
    """A version 1 receipt's payload, with the offset of each figure (receipt.cc's layout:
    integers little-endian, a string as its u32 length then its bytes):

      id: string, issued: i64 us, expires: i64 us, cost: i64, count: u32, then per limit:
        name: string, algorithm: u8, limit, period us, burst, buckets: i64, key: string,
        charge.at: i64 us, charge.units: i64, charge.ahead: i128, max_debt: i64
    """

    def __init__(self, token):
        prefix, payload, signature = token.split(".")
        assert prefix == "r1", token[:8]
        self.bytes = bytearray(b64decode(payload))
        self.signature = signature
        self.offsets = {}  # "expires", "cost", "limits[0].key", ... -> (offset, size).
        self.values = {}
        self._at = 0
        self._string("id")
        for name in ("issued", "expires", "cost"):
            self._i64(name)
        (count,) = self._take("count", 4, "<I")
        for i in range(count):
            self._string(f"limits[{i}].name")
            self._take(f"limits[{i}].algorithm", 1, "<B")
            for name in ("limit", "period", "burst", "buckets"):
                self._i64(f"limits[{i}].{name}")
            self._string(f"limits[{i}].key")
            self._i64(f"limits[{i}].at")
            self._i64(f"limits[{i}].units")
            self._take(f"limits[{i}].ahead", 16, "<QQ")
            self._i64(f"limits[{i}].max_debt")
        assert self._at == len(self.bytes), "bytes after the last limit"

    def _take(self, name, size, fmt):
        value = struct.unpack_from(fmt, self.bytes, self._at)
        self.offsets[name] = (self._at, size)
        self.values[name] = value[0] if len(value) == 1 else value
        self._at += size
        return value

    def _i64(self, name):
        self._take(name, 8, "<q")

    def _string(self, name):
        (size,) = struct.unpack_from("<I", self.bytes, self._at)
        self.offsets[name] = (self._at + 4, size)
        self.values[name] = bytes(self.bytes[self._at + 4:self._at + 4 + size])
        self._at += 4 + size

    def with_figure(self, name, value):
        """The token with the i64 figure `name` set to `value`, the old signature kept."""
        offset, _ = self.offsets[name]
        changed = bytearray(self.bytes)
        struct.pack_into("<q", changed, offset, value)
        return self.token(changed)

    def with_byte(self, name, index=0, xor=1):
        """The token with one byte of field `name` flipped, the old signature kept."""
        offset, size = self.offsets[name]
        assert index < size
        changed = bytearray(self.bytes)
        changed[offset + index] ^= xor
        return self.token(changed)

    def token(self, payload=None, signature=None):
        return "r1.%s.%s" % (b64encode(bytes(self.bytes if payload is None else payload)),
                             self.signature if signature is None else signature)


def memory_server(rules, *flags, threads=1):
    """A started sluiced on the memory store with `rules` (sluiced.Sluiced.with_rules): the
    caller cleans it up."""
    return sluiced.Sluiced.with_rules(rules, *flags, threads=threads).start()
