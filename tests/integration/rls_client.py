"""Envoy's ShouldRateLimit over gRPC, for the integration tests that look at what sluiced puts
on the wire (response_headers_to_add, dynamic_metadata, the codes, TLS): Debian's
python3-grpcio and python3-protobuf, with the message classes protoc generates from proto/ at
build time (the target sluice_python_proto, into python_proto/ of the build directory, which
must be on PYTHONPATH; tests/integration/CMakeLists.txt sets it).
"""

import grpc
from google.protobuf import json_format

try:
    from envoy.service.ratelimit.v3 import rls_pb2
except ImportError as e:
    raise ImportError("rls_client: no generated messages (%s); build the target "
                      "sluice_python_proto and put <build>/python_proto on PYTHONPATH" % e)

PATH = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
Code = rls_pb2.RateLimitResponse.Code


class GrpcError(Exception):
    """A call that ended without an answer: its status code (a grpc.StatusCode), details and
    trailing metadata."""

    def __init__(self, code, details, trailers):
        super().__init__("%s: %s; trailers %r" % (code, details, trailers))
        self.code, self.details, self.trailers = code, details, trailers


def rate_limit_request(domain, descriptors, hits_addend=0):
    """A RateLimitRequest: `descriptors` a list of [(key, value), ...]."""
    request = rls_pb2.RateLimitRequest(domain=domain, hits_addend=hits_addend)
    for entries in descriptors:
        descriptor = request.descriptors.add()
        for key, value in entries:
            descriptor.entries.add(key=key, value=value)
    return request


def read_response(response):
    """A RateLimitResponse as a dict: overall_code, statuses (code, limit_remaining),
    headers [(key, value)], dynamic_metadata (a dict, or None when absent)."""
    return {
        "overall_code": Code.Name(response.overall_code),
        "statuses": [{"code": Code.Name(s.code), "limit_remaining": s.limit_remaining}
                     for s in response.statuses],
        "headers": [(h.key, h.value) for h in response.response_headers_to_add],
        "dynamic_metadata": (json_format.MessageToDict(response.dynamic_metadata)
                             if response.HasField("dynamic_metadata") else None),
    }


def client_credentials(ca_file, cert_file=None, key_file=None):
    """TLS channel credentials that trust `ca_file`, showing a client certificate when
    given."""
    def read(path):
        with open(path, "rb") as f:
            return f.read()
    return grpc.ssl_channel_credentials(
        root_certificates=read(ca_file),
        private_key=read(key_file) if key_file else None,
        certificate_chain=read(cert_file) if cert_file else None)


def call(port, request, credentials=None, server_hostname="localhost", timeout=30,
         host="127.0.0.1", path=PATH):
    """Sends `request` (a RateLimitRequest) to `path` on host:port and returns the
    RateLimitResponse. With `credentials` (client_credentials()), over TLS checking the
    server's certificate for `server_hostname`. Raises GrpcError when the call ends without
    an answer (a refused handshake among them)."""
    target = "%s:%d" % (host, port)
    options = [("grpc.enable_http_proxy", 0)]  # Loopback, whatever *_proxy says.
    if credentials is None:
        channel = grpc.insecure_channel(target, options=options)
    else:
        options.append(("grpc.ssl_target_name_override", server_hostname))
        channel = grpc.secure_channel(target, credentials, options=options)
    with channel:
        method = channel.unary_unary(
            path, request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
            response_deserializer=rls_pb2.RateLimitResponse.FromString)
        try:
            return method(request, timeout=timeout)
        except grpc.RpcError as e:
            raise GrpcError(e.code(), e.details(), e.trailing_metadata()) from None


def should_rate_limit(port, domain, descriptors, hits_addend=0, **kwargs):
    """ShouldRateLimit on 127.0.0.1:port (call()'s keywords): read_response()'s dict."""
    return read_response(call(port, rate_limit_request(domain, descriptors, hits_addend),
                              **kwargs))
