"""Envoy's ShouldRateLimit over gRPC with the standard library alone: HTTP/2 frames on a socket
(TLS when given an ssl.SSLContext), the request's protobuf written and the answer's read by
hand. Enough for the integration tests to see what sluiced puts on the wire
(response_headers_to_add, dynamic_metadata, the codes); not a gRPC client.

The request's headers are sent as HPACK literals (no Huffman, no table). The answer's headers
are not decoded (they may use Huffman codes): the answer is the DATA frames' message, and a
call that ends without one raises GrpcError with the raw trailers' bytes.
"""

import socket
import ssl
import struct

PATH = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
CODES = {0: "UNKNOWN", 1: "OK", 2: "OVER_LIMIT"}

DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4


class GrpcError(Exception):
    pass


# Protobuf, the little of it these messages need.

def _varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes_field(number, data):
    if isinstance(data, str):
        data = data.encode()
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _varint_field(number, value):
    return _varint(number << 3) + _varint(value)


def rate_limit_request(domain, descriptors, hits_addend=0):
    """A RateLimitRequest: `descriptors` a list of [(key, value), ...]."""
    out = _bytes_field(1, domain)
    for entries in descriptors:
        descriptor = b"".join(_bytes_field(1, _bytes_field(1, k) + _bytes_field(2, v))
                              for k, v in entries)
        out += _bytes_field(2, descriptor)
    if hits_addend:
        out += _varint_field(3, hits_addend)
    return out


def _fields(data):
    """{field number: [values]}: ints for varints, bytes for the rest."""
    fields, i = {}, 0
    while i < len(data):
        key, i = _read_varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(data, i)
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 2:
            length, i = _read_varint(data, i)
            value, i = data[i:i + length], i + length
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise GrpcError("wire type %d in %r" % (wire, data))
        fields.setdefault(number, []).append(value)
    return fields


def _read_varint(data, i):
    shift = value = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _value(data):
    """A google.protobuf.Value as Python."""
    f = _fields(data)
    if 2 in f:
        return struct.unpack("<d", f[2][0])[0]
    if 3 in f:
        return f[3][0].decode()
    if 4 in f:
        return bool(f[4][0])
    if 5 in f:
        return _struct(f[5][0])
    if 6 in f:
        return [_value(v) for v in _fields(f[6][0]).get(1, [])]
    return None


def _struct(data):
    out = {}
    for entry in _fields(data).get(1, []):
        f = _fields(entry)
        out[f[1][0].decode()] = _value(f.get(2, [b""])[0])
    return out


def read_response(data):
    """A RateLimitResponse as a dict: overall_code, statuses (code, limit_remaining),
    headers [(key, value)], dynamic_metadata (a dict, or None when absent)."""
    f = _fields(data)
    statuses = []
    for status in f.get(2, []):
        s = _fields(status)
        statuses.append({"code": CODES[s.get(1, [0])[0]],
                         "limit_remaining": s.get(3, [0])[0]})
    headers = []
    for header in f.get(3, []):
        h = _fields(header)
        headers.append((h.get(1, [b""])[0].decode(), h.get(2, [b""])[0].decode()))
    return {"overall_code": CODES[f.get(1, [0])[0]], "statuses": statuses, "headers": headers,
            "dynamic_metadata": _struct(f[6][0]) if 6 in f else None}


# HTTP/2, the little of it one unary call needs.

def _frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(
        ">I", stream) + payload


def _hpack_int(value, prefix_bits, first):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def _literal(name, value):
    """A literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2)."""
    return (b"\x00" + _hpack_int(len(name), 7, 0) + name.encode() +
            _hpack_int(len(value), 7, 0) + value.encode())


def _recv_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise GrpcError("the connection closed")
        data += chunk
    return data


def call(port, message, context=None, server_hostname="localhost", timeout=30,
         host="127.0.0.1", path=PATH):
    """Sends `message` (bytes) to `path` on host:port and returns the answer's message bytes.
    With `context` (ssl.SSLContext), over TLS with ALPN h2. Raises ssl.SSLError or OSError
    when the connection fails, GrpcError when the call ends without a message."""
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        if context is not None:
            context.set_alpn_protocols(["h2"])
            sock = context.wrap_socket(sock, server_hostname=server_hostname)
        headers = (b"\x83" + (b"\x87" if context is not None else b"\x86") +  # POST, scheme
                   _literal(":path", path) + _literal(":authority", "%s:%d" % (host, port)) +
                   _literal("content-type", "application/grpc") + _literal("te", "trailers"))
        body = b"\x00" + struct.pack(">I", len(message)) + message
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(SETTINGS, 0, 0) +
                     _frame(HEADERS, END_HEADERS, 1, headers) + _frame(DATA, END_STREAM, 1, body))
        data, trailers = b"", b""
        while True:
            head = _recv_exactly(sock, 9)
            length = int.from_bytes(head[:3], "big")
            kind, flags, stream = head[3], head[4], struct.unpack(">I", head[5:])[0] & 0x7FFFFFFF
            payload = _recv_exactly(sock, length)
            if kind == SETTINGS and not flags & ACK:
                sock.sendall(_frame(SETTINGS, ACK, 0))
            elif kind == PING and not flags & ACK:
                sock.sendall(_frame(PING, ACK, 0, payload))
            elif kind == GOAWAY:
                raise GrpcError("GOAWAY %r" % payload)
            elif stream == 1 and kind == RST_STREAM:
                raise GrpcError("RST_STREAM %r" % payload)
            elif stream == 1 and kind == DATA:
                data += payload
            elif stream == 1 and kind == HEADERS:
                trailers = payload
            if stream == 1 and kind in (DATA, HEADERS) and flags & END_STREAM:
                break
        if len(data) < 5:
            raise GrpcError("no message; trailers %r" % trailers)
        return data[5:5 + struct.unpack(">I", data[1:5])[0]]
    finally:
        sock.close()


def should_rate_limit(port, domain, descriptors, hits_addend=0, **kwargs):
    """ShouldRateLimit on 127.0.0.1:port: read_response()'s dict."""
    return read_response(call(port, rate_limit_request(domain, descriptors, hits_addend),
                              **kwargs))


def client_context(ca_file, cert_file=None, key_file=None):
    """A TLS client context that trusts `ca_file`, showing a client certificate when given."""
    context = ssl.create_default_context(cafile=ca_file)
    if cert_file:
        context.load_cert_chain(cert_file, key_file)
    return context
