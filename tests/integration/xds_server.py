"""A small xDS management server for the tests: Envoy's aggregated discovery service (ADS),
state of the world, serving ratelimit.config.ratelimit.v3.RateLimitConfig resources, as Envoy
Gateway serves them to envoyproxy/ratelimit (CONFIG_TYPE=GRPC_XDS_SOTW). Checked against the
reference: its binary subscribes, takes the sets this server pushes and answers from them
(bench/peers/README.md, "xDS").

It behaves as go-control-plane's snapshot cache in ADS mode: one snapshot of resources (a
version) for every node; a request whose version_info is not the snapshot's is answered with
the snapshot (a new nonce each time); an ACK (the snapshot's version, the last nonce) waits for
the next push; a NACK (error_detail set) is recorded and, unlike go-control-plane, not
answered with the same snapshot again. Every request and each stream's metadata are kept, so a
test can look at what the client said.

Debian's python3-grpcio and python3-protobuf, with the messages the build generates (target
sluice_python_proto, <build>/python_proto on PYTHONPATH).
"""

import queue
import threading
import time
from concurrent import futures

import grpc
from google.protobuf import any_pb2

from envoy.service.discovery.v3 import discovery_pb2
from ratelimit.config.ratelimit.v3 import rls_conf_pb2

SERVICE = "envoy.service.discovery.v3.AggregatedDiscoveryService"
TYPE_URL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"
_END = object()


def config(name, domain, descriptors):
    """A RateLimitConfig from `descriptors`: dicts with key, value, rate_limit (a dict of
    unit, requests_per_unit, ...), descriptors, shadow_mode ... as a YAML file spells them."""
    message = rls_conf_pb2.RateLimitConfig(name=name, domain=domain)
    for d in descriptors:
        _descriptor(message.descriptors.add(), d)
    return message


def _descriptor(message, d):
    message.key = d["key"]
    message.value = d.get("value", "")
    if "rate_limit" in d:
        limit = dict(d["rate_limit"])
        message.rate_limit.unit = rls_conf_pb2.RateLimitUnit.Value(limit.pop("unit").upper())
        for replace in limit.pop("replaces", []):
            message.rate_limit.replaces.add(name=replace)
        for field, value in limit.items():
            setattr(message.rate_limit, field, value)
    for flag in ("shadow_mode", "detailed_metric", "quota_mode"):
        setattr(message, flag, bool(d.get(flag, False)))
    for child in d.get("descriptors", []):
        _descriptor(message.descriptors.add(), child)


class _Stream:
    def __init__(self, metadata):
        self.metadata = metadata
        self.out = queue.Queue()
        self.subscribed = False
        self.last_nonce = None


class ManagementServer:
    """Serves on 127.0.0.1 (a free port, in .port); over TLS when given `tls`, a
    (certificate chain PEM, key PEM, client CA PEM or None) triple."""

    def __init__(self, tls=None):
        self._lock = threading.Condition()
        self._streams = []
        self._version = None
        self._resources = []
        self._type_url = TYPE_URL
        self._nonce = 0
        self.requests = []  # DiscoveryRequest, in arrival order (all streams).
        self.request_times = []  # time.monotonic() of each's arrival.
        self.stream_metadata = []  # Each stream's invocation metadata, as a dict.
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        handler = grpc.stream_stream_rpc_method_handler(
            self._serve, request_deserializer=discovery_pb2.DiscoveryRequest.FromString,
            response_serializer=discovery_pb2.DiscoveryResponse.SerializeToString)
        self._server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            SERVICE, {"StreamAggregatedResources": handler})])
        if tls is None:
            self.port = self._server.add_insecure_port("127.0.0.1:0")
        else:
            chain, key, client_ca = tls
            credentials = grpc.ssl_server_credentials(
                [(key, chain)], root_certificates=client_ca,
                require_client_auth=client_ca is not None)
            self.port = self._server.add_secure_port("127.0.0.1:0", credentials)
        self._server.start()

    def stop(self):
        with self._lock:
            for stream in self._streams:
                stream.out.put(_END)
        self._server.stop(0)

    def push(self, version, configs, type_url=TYPE_URL):
        """Makes `configs` (RateLimitConfig messages, or already packed Any) the snapshot of
        `version` and sends it to every subscribed stream (as a response of `type_url`)."""
        resources = []
        for c in configs:
            if isinstance(c, any_pb2.Any):
                resources.append(c)
            else:
                packed = any_pb2.Any()
                packed.Pack(c)
                resources.append(packed)
        with self._lock:
            self._version, self._resources, self._type_url = version, resources, type_url
            for stream in self._streams:
                if stream.subscribed:
                    self._send(stream)

    def drop_streams(self):
        """Ends every open stream with UNAVAILABLE, as a management server that restarts."""
        with self._lock:
            for stream in self._streams:
                stream.out.put(_END)
            self._streams = []

    def wait_for(self, predicate, timeout=60, what="the client"):
        """Waits until predicate(requests) is true; returns its value."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                found = predicate(self.requests)
                if found:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:  # sluice-timing: watchdog
                    raise AssertionError("xds_server: %s never came; requests: %r" % (
                        what, [(r.version_info, r.response_nonce, r.error_detail.message)
                               for r in self.requests]))
                self._lock.wait(min(left, 0.5))

    def acks(self, version):
        """The requests that took `version`."""
        return [r for r in self.requests if r.version_info == version and r.response_nonce
                and not r.HasField("error_detail")]

    def nacks(self):
        return [r for r in self.requests if r.HasField("error_detail")]

    def _send(self, stream):  # Under the lock.
        self._nonce += 1
        stream.last_nonce = str(self._nonce)
        stream.out.put(discovery_pb2.DiscoveryResponse(
            version_info=self._version, resources=self._resources, type_url=self._type_url,
            nonce=stream.last_nonce))

    def _read(self, stream, requests):
        try:
            for request in requests:
                with self._lock:
                    self.requests.append(request)
                    self.request_times.append(time.monotonic())
                    self._lock.notify_all()
                    if request.type_url != TYPE_URL:
                        continue
                    stream.subscribed = True
                    if request.HasField("error_detail"):
                        continue  # A NACK: wait for the next push.
                    if request.response_nonce and request.response_nonce != stream.last_nonce:
                        continue  # Stale: about an earlier response.
                    if self._version is not None and request.version_info != self._version:
                        self._send(stream)
        except grpc.RpcError:
            pass
        stream.out.put(_END)

    def _serve(self, requests, context):
        stream = _Stream(dict(context.invocation_metadata()))
        with self._lock:
            self._streams.append(stream)
            self.stream_metadata.append(stream.metadata)
            self._lock.notify_all()
        threading.Thread(target=self._read, args=(stream, requests), daemon=True).start()
        while True:
            item = stream.out.get()
            if item is _END:
                break
            yield item
        with self._lock:
            if stream in self._streams:
                self._streams.remove(stream)
        context.abort(grpc.StatusCode.UNAVAILABLE, "the management server ended the stream")

