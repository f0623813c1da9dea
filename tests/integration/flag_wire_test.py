#!/usr/bin/env python3
"""Every flag of sluiced and every environment variable it reads, proved on the wire (issue
32): one table, a row each, saying how the setting is given and what it changes in what
sluiced answers (a status, a header, a body, gRPC's response_headers_to_add and
dynamic_metadata, a /metrics line, a key in Redis, an item in Memcached, a statsd datagram, a
command a fake sentinel receives; the log only where nothing else shows).

The rows share processes: each scene starts one sluiced with the settings of its rows, as
flags or (in the scene's twin) as envoyproxy/ratelimit's variables, and runs the rows'
checks against it; a row without a scene runs sluiced alone (a refusal, --help). The table
must name every flag `sluiced --help` lists and every variable server/daemon/ names,
and nothing else: a flag or variable added without a row fails the test.

Starts its own redis-servers (one over TLS, with certificates the openssl command makes),
a memcached and a fake sentinel on free loopback ports. Python 3's standard library, and
gRPC through rls_client.py: Debian's python3-grpcio and python3-protobuf (hence Debian's
/usr/bin/python3), with the messages the build generates (the target sluice_python_proto):

    PYTHONPATH=build/python_proto /usr/bin/python3 tests/integration/flag_wire_test.py \
        --sluiced build/bin/sluiced
"""

import collections
import os
import re
import subprocess
import unittest

import sluiced
from flag_wire_checks import *  # noqa: F403 (the checks the table names)
from flag_wire_checks import ADMIN_TOKEN, CORRUPT, HEADERS, SECRET
from flag_wire_world import PASSWORD, RULES, Scene, World

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
Row = collections.namedtuple("Row", "name scene check after_stop", defaults=(False,))


# The scenes: one sluiced each, in this order. A scene's function makes what it needs and
# returns build(scene, http_port) -> (arguments, variables).

def envoy_flags(w):
    w.snapshot = os.path.join(w.dir, "envoy.snap")
    with open(w.snapshot, "wb") as f:
        f.write(CORRUPT)
    statsd = w.statsd("envoy")

    def build(s, port):
        # Envoy's API on our own gRPC engine here (the variables' scene below is on grpc++'s):
        # each gRPC row of this scene checks it.
        return [*s.listeners(port, threads=3), "--grpc-engine", "h2", "--config", w.both,
                "--store", "memory",
                "--debug", f"127.0.0.1:{s.debug_port}", "--merge-domains", "--skip-dotfiles",
                "--response-headers",
                "--header-limit", HEADERS[0], "--header-remaining", HEADERS[1],
                "--header-reset", HEADERS[2], "--response-dynamic-metadata",
                "--stop-counting-over-limit", "--stop-others-over-limit", "--near-limit-ratio",
                "0.5", "--shadow-mode",
                "--statsd", f"127.0.0.1:{statsd}", "--statsd-interval", "50ms",
                "--drain", "7s", "--snapshot", w.snapshot, "--snapshot-interval", "100ms",
                "--snapshot-discard-corrupt"], {}
    return build


def envoy_variables(w):
    def build(s, port):
        return [*s.listeners(port), "--config", w.both, "--store", "memory", "--log-level",
                "info"], {
            "MERGE_DOMAIN_CONFIG": "true", "RUNTIME_IGNOREDOTFILES": "true",
            "LIMIT_RESPONSE_HEADERS_ENABLED": "true",
            "LIMIT_LIMIT_HEADER": HEADERS[0], "LIMIT_REMAINING_HEADER": HEADERS[1],
            "LIMIT_RESET_HEADER": HEADERS[2], "RESPONSE_DYNAMIC_METADATA": "true",
            "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true", "NEAR_LIMIT_RATIO": "0.5",
            "SHADOW_MODE": "true",
            # Their default is on (to localhost:8125): off, no statistics are sent.
            "USE_STATSD": "false"}
    return build


def redis_flags(w):
    redis = w.redis("flags")
    w.store = f"redis://:{PASSWORD}@127.0.0.1:{redis.port}"
    w.secret_file = w.write("secret", SECRET + "\n")
    w.admin_file = w.write("admin.token", ADMIN_TOKEN + "\n")

    def build(s, port):
        return [*s.listeners(port), "--config", w.rules, "--log-level", "info",
                "--store", w.store, "--secret-file", w.secret_file,
                "--admin-token-file", w.admin_file, "--hide-keys", "--top-metrics", "3", "--ui",
                "--redis-connections", "3", "--redis-deny-cache", "100",
                "--redis-deny-cache-ttl", "1d", "--redis-timeout", "30s", "--redis-shares",
                "--cache-key-prefix", "flagp:", "--quota-mode",
                "--ratelimit-headers", "x-ratelimit"], {}
    return build


def their_environment(w):
    """Their environment alone, no flags: listeners, runtime directory, statsd, Redis."""
    redis, statsd = w.redis("variables"), w.statsd("variables")
    version = os.path.join(w.dir, "runtime", "v1")
    w.write(os.path.join(version, "ratelimit", "wire-rules", "a.yaml"), RULES)
    os.symlink("v1", os.path.join(w.dir, "runtime", "current"))

    def build(s, port):
        # Three loopback addresses: each listener's host is its own variable's.
        s.grpc_host, s.debug_host = "127.0.0.2", "127.0.0.3"
        variables = {
            "HOST": "127.0.0.1", "PORT": str(port),
            "GRPC_HOST": s.grpc_host, "GRPC_PORT": str(s.grpc_port),
            "DEBUG_HOST": s.debug_host, "DEBUG_PORT": str(s.debug_port),
            "RUNTIME_ROOT": os.path.join(w.dir, "runtime", "current"),
            "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_APPDIRECTORY": "wire-rules",
            "LOG_LEVEL": "info",  # Theirs is warn.
            "STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(statsd),
            "STATS_FLUSH_INTERVAL": "50ms",
            "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": f"127.0.0.1:{redis.port}",
            "REDIS_AUTH": PASSWORD, "REDIS_POOL_SIZE": "3",
            "LOCAL_CACHE_SIZE_IN_BYTES": "25600",  # 100 denials of 256 bytes.
            "REDIS_TIMEOUT": "30s", "CACHE_KEY_PREFIX": "envp:", "QUOTA_MODE": "true",
            "LIMIT_HEADERS_FORMAT": "x-ratelimit"}
        variables.update({name.replace("*", "WIRE"): "1" for name in IGNORED})
        return [], variables
    return build


def grpc_tls_flags(w):
    certs = w.certificates()

    def build(s, port):
        return [*s.listeners(port), "--config", w.rules, "--store", "memory",
                "--grpc-tls-cert", certs["server"][0], "--grpc-tls-key", certs["server"][1],
                "--grpc-tls-client-ca", certs["ca"][0],
                "--grpc-tls-client-san", "client.sluice.test", "--log-level", "warn"], {}
    return build


def grpc_tls_variables(w):
    certs = w.certificates()

    def build(s, port):
        return [*s.listeners(port), "--config", w.rules, "--store", "memory"], {
            "GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": certs["server"][0],
            "GRPC_SERVER_TLS_KEY": certs["server"][1],
            "GRPC_CLIENT_TLS_CACERT": certs["ca"][0],
            "GRPC_CLIENT_TLS_SAN": "client.sluice.test", "USE_STATSD": "false"}
    return build


def redis_tls_flags(w):
    certs, port = w.certificates(), w.tls_redis()

    def build(s, http_port):
        return [*s.listeners(http_port), "--config", w.rules, "--redis-timeout", "30s",
                "--store", f"rediss://127.0.0.1:{port}", "--redis-tls-ca", certs["ca"][0],
                "--redis-tls-cert", certs["client"][0], "--redis-tls-key", certs["client"][1],
                "--redis-tls-skip-verify"], {}
    return build


def redis_tls_variables(w):
    certs, port = w.certificates(), w.tls_redis()

    def build(s, http_port):
        return [*s.listeners(http_port), "--config", w.rules, "--redis-timeout", "30s"], {
            "REDIS_TLS": "true", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": f"127.0.0.1:{port}",
            "REDIS_TLS_CACERT": certs["ca"][0], "REDIS_TLS_CLIENT_CERT": certs["client"][0],
            "REDIS_TLS_CLIENT_KEY": certs["client"][1],
            "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true", "USE_STATSD": "false"}
    return build


def memcache_variables(w):
    memcached = w.memcached()

    def build(s, port):
        return [*s.listeners(port), "--config", w.plain_rules, "--redis-timeout", "30s"], {
            "BACKEND_TYPE": "memcache", "MEMCACHE_HOST_PORT": f"127.0.0.1:{memcached.port}",
            "USE_STATSD": "false"}
    return build


def sentinel_variables(w):
    port = w.fake_sentinel()

    def build(s, http_port):
        return [*s.listeners(http_port), "--config", w.rules], {
            "REDIS_TYPE": "SENTINEL", "REDIS_URL": f"wire-master,127.0.0.1:{port}",
            "REDIS_SENTINEL_AUTH": "wire-user:wire-pass", "USE_STATSD": "false"}
    return build


def redis_down_flags(w):
    def build(s, port):
        # A port where no Redis listens: every decision fails.
        return [*s.listeners(port), "--config", w.rules, "--store",
                f"redis://127.0.0.1:{s.debug_port}", "--redis-on-failure", "allow"], {}
    return build


def empty_flags(w):
    def build(s, port):
        os.makedirs(os.path.join(s.workdir, "rules"), exist_ok=True)
        return [*s.listeners(port), "--config", os.path.join(s.workdir, "rules"),
                "--health-needs-rules", "--watch-interval", "0"], {}
    return build


def empty_variables(w):
    def build(s, port):
        os.makedirs(os.path.join(s.workdir, "rules"), exist_ok=True)
        return [*s.listeners(port), "--config", os.path.join(s.workdir, "rules"), "--store",
                "memory"], {"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "true",
                            "USE_STATSD": "false"}
    return build


def budget_flags(w):
    def build(s, port):
        return [*s.listeners(port), "--config", w.rules, "--max-keys", "64",
                "--max-leases", "3"], {}
    return build


def xds_flags(w):
    server, certs = w.xds("flags"), w.certificates()

    def build(s, port):
        return [*s.listeners(port), "--store", "memory", "--xds", f"127.0.0.1:{server.port}",
                "--xds-node-id", "wire-node", "--xds-node-metadata", "team=wire,bad,zone=z",
                "--xds-headers", "x-wire:flags", "--xds-tls", "--xds-tls-ca", certs["ca"][0],
                "--xds-tls-cert", certs["client"][0], "--xds-tls-key", certs["client"][1],
                "--xds-tls-server-name", "elsewhere.example", "--xds-max-message-bytes",
                "100000"], {}
    return build


def xds_variables(w):
    server, certs = w.xds("variables"), w.certificates()

    def build(s, port):
        return [*s.listeners(port), "--store", "memory"], {
            "CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": f"127.0.0.1:{server.port}",
            "CONFIG_GRPC_XDS_NODE_ID": "wire-node", "CONFIG_GRPC_XDS_NODE_METADATA": "team=wire,bad,zone=z",
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "x-wire:variables",
            "CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": certs["ca"][0],
            "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": certs["client"][0],
            "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": certs["client"][1],
            "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "elsewhere.example",
            "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "100000"}
    return build


# Scene: (make, whether /healthz may fail: a store out of reach).
SCENES = {
    "envoy flags": (envoy_flags, False), "envoy variables": (envoy_variables, False),
    "redis flags": (redis_flags, False), "their environment": (their_environment, False),
    "grpc tls flags": (grpc_tls_flags, False), "grpc tls variables": (grpc_tls_variables, False),
    "redis tls flags": (redis_tls_flags, False),
    "redis tls variables": (redis_tls_variables, False),
    "memcache variables": (memcache_variables, False),
    "sentinel variables": (sentinel_variables, True),
    "redis down": (redis_down_flags, True),
    "empty flags": (empty_flags, False), "empty variables": (empty_variables, False),
    "budget flags": (budget_flags, False),
    "xds flags": (xds_flags, False), "xds variables": (xds_variables, False),
}


# Their variables sluiced names as ignored (server/daemon/environment_names.h's kIgnored, and a
# name with each of kIgnoredPrefixes, written PREFIX*): set in their environment's scene, each is named
# in the log's one line of ignored settings (what sluiced does with them).
IGNORED = [
    "GRPC_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE_GRACE", "LOG_FORMAT", "USE_DOG_STATSD",
    "USE_DOG_STATSD_MOGRIFIERS", "EXTRA_TAGS", "DISABLE_STATS", "USE_PROMETHEUS",
    "EXPIRATION_JITTER_MAX_SECONDS", "REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT",
    "REDIS_CLUSTER_PIPELINE_PARALLELISM", "REDIS_POOL_ON_EMPTY_BEHAVIOR",
    "REDIS_POOL_ON_EMPTY_WAIT_DURATION", "REDIS_STARTUP_INITIAL_INTERVAL",
    "REDIS_STARTUP_MAX_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME",
    "TRACING_*", "MEMCACHE_*", "REDIS_PERSECOND*", "PROMETHEUS_*",
    "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"]

EF, EV, RF, TE = "envoy flags", "envoy variables", "redis flags", "their environment"
GF, GV, TF, TV = "grpc tls flags", "grpc tls variables", "redis tls flags", "redis tls variables"
XF, XV = "xds flags", "xds variables"
# sluiced pointed at a management server that is not there, serving meanwhile.
XDS_AWAY = ["--xds", "127.0.0.1:1", "--xds-force-start"]
XDS_AWAY_VARIABLES = {"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "127.0.0.1:1",
                      "FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "LOG_LEVEL": "info"}


def NODE_METADATA(request, _):
    return {k: v.string_value for k, v in request.node.metadata.fields.items()}


SENTINEL_AUTH = sentinel_heard(b"AUTH", b"wire-user", b"wire-pass")
SENTINEL_ASKED = sentinel_heard(b"SENTINEL", b"get-master-addr-by-name", b"wire-master")

# One row per flag of `sluiced --help` and per variable sluiced reads: (name, scene, check,
# checked after the scene's sluiced stopped). A scene of None: the check runs sluiced itself.
ROWS = [
    Row("--help", None, exits(["--help"], {}, 0, "--stop-counting-over-limit", "stdout")),
    Row("--version", None, exits(["--version"], {}, 0, "sluiced ", "stdout")),
    Row("--check-config", None, lambda t, s: exits(
        ["--check-config", s.rules], {}, 0, "the rules are valid: 1 file(s)", "stdout")(t, s)),
    # Memory per key shows nowhere on the wire: that the switch reached the store's options
    # shows in its refusal of another store.
    Row("--memory-compact-keys", None, exits(
        ["--memory-compact-keys", "--store", "redis://127.0.0.1:1", "--http", "127.0.0.1:0",
         "--grpc", "127.0.0.1:0"], {}, 2, "--memory-compact-keys is for the memory store")),
    # Envoy's API on the memory store.
    Row("--config", EF, rules_loaded),
    Row("--http", EF, http_listens),
    Row("--grpc", EF, grpc_answers),
    Row("--grpc-engine", EF, both(logged("(engine h2: HTTP/2 on 3 event loop(s) of its own)"),
                                  grpc_answers)),
    Row("--debug", EF, debug_rlconfig),
    Row("--merge-domains", EF, merged),
    Row("--skip-dotfiles", EF, dotfiles_skipped),
    Row("--response-headers", EF, response_headers),
    Row("--header-limit", EF, header(HEADERS[0], r"^4$")),
    Row("--header-remaining", EF, header(HEADERS[1], r"^3$")),
    Row("--header-reset", EF, header(HEADERS[2], r"^\d+$")),
    Row("--response-dynamic-metadata", EF, dynamic_metadata),
    Row("--stop-counting-over-limit", EF, stop_counting),
    Row("--stop-others-over-limit", EF, stop_others),
    Row("--near-limit-ratio", EF, near_limit_ratio),
    Row("--shadow-mode", EF, shadow),
    Row("--statsd", EF, statsd_datagram("envoy")),
    Row("--statsd-interval", EF, logged("every 50ms")),  # Nothing else says it.
    Row("--threads", EF, logged("with 3 event loop(s)")),  # Nothing else says it.
    Row("--snapshot-discard-corrupt", EF, corrupt_snapshot_moved_aside),
    Row("--snapshot-interval", EF, snapshot_written_while_running),
    Row("--snapshot", EF, snapshot_at_stop, True),
    Row("--drain", EF, logged("draining requests in flight (up to 7s)"), True),
    Row("MERGE_DOMAIN_CONFIG", EV, merged),
    Row("RUNTIME_IGNOREDOTFILES", EV, dotfiles_skipped),
    Row("LIMIT_RESPONSE_HEADERS_ENABLED", EV, response_headers),
    Row("LIMIT_LIMIT_HEADER", EV, header(HEADERS[0], r"^4$")),
    Row("LIMIT_REMAINING_HEADER", EV, header(HEADERS[1], r"^3$")),
    Row("LIMIT_RESET_HEADER", EV, header(HEADERS[2], r"^\d+$")),
    Row("RESPONSE_DYNAMIC_METADATA", EV, dynamic_metadata),
    Row("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", EV, stop_others),
    Row("NEAR_LIMIT_RATIO", EV, near_limit_ratio),
    Row("SHADOW_MODE", EV, shadow),
    Row("USE_STATSD", EV, not_logged("sending statistics to statsd")),
    # Redis.
    Row("--store", RF, both(decides("redis", "store"), redis_decides("flags", "store-key"))),
    Row("--cache-key-prefix", RF, key_prefix("flags", "flagp:")),
    Row("--redis-connections", RF, connections("flags", 3)),
    Row("--redis-deny-cache", RF, deny_cache),
    Row("--redis-deny-cache-ttl", RF, deny_cache_ttl),
    Row("--redis-shares", RF, shares),
    Row("--redis-timeout", RF, logged("timeout 30s")),  # Nothing else says it.
    Row("--quota-mode", RF, quota_mode),
    Row("--secret-file", RF, receipt_signed_with(SECRET, "flagp:")),
    Row("--admin-token-file", RF, admin_token(ADMIN_TOKEN)),
    Row("--hide-keys", RF, hidden_keys),
    Row("--top-metrics", RF, top_metrics),
    Row("--ui", RF, operator_page(ADMIN_TOKEN)),
    Row("--ratelimit-headers", RF, x_ratelimit),
    Row("HOST", TE, http_listens),  # 127.0.0.1, not their 0.0.0.0.
    Row("PORT", TE, http_listens),
    Row("GRPC_HOST", TE, grpc_answers),
    Row("GRPC_PORT", TE, grpc_answers),
    Row("DEBUG_HOST", TE, debug_rlconfig),
    Row("DEBUG_PORT", TE, debug_rlconfig),
    Row("RUNTIME_ROOT", TE, rules_loaded),
    Row("RUNTIME_SUBDIRECTORY", TE, rules_loaded),
    Row("RUNTIME_APPDIRECTORY", TE, rules_loaded),
    Row("LOG_LEVEL", TE, logged("[info]")),
    Row("STATSD_HOST", TE, statsd_datagram("variables")),
    Row("STATSD_PORT", TE, statsd_datagram("variables")),
    Row("STATS_FLUSH_INTERVAL", TE, logged("every 50ms")),
    Row("REDIS_SOCKET_TYPE", TE, redis_decides("variables", "socket-type")),
    Row("REDIS_URL", TE, redis_decides("variables", "url")),
    Row("REDIS_AUTH", TE, redis_decides("variables", "auth")),
    Row("CACHE_KEY_PREFIX", TE, key_prefix("variables", "envp:")),
    Row("REDIS_POOL_SIZE", TE, connections("variables", 3)),
    Row("LOCAL_CACHE_SIZE_IN_BYTES", TE, deny_cache),
    Row("REDIS_TIMEOUT", TE, logged("timeout 30s")),
    Row("QUOTA_MODE", TE, quota_mode),
    Row("LIMIT_HEADERS_FORMAT", TE, x_ratelimit),
    *[Row(name, TE, ignored(name)) for name in IGNORED],
    # gRPC over TLS.
    Row("--grpc-tls-cert", GF, grpc_tls_certificate),
    Row("--grpc-tls-key", GF, grpc_tls_answers),
    Row("--grpc-tls-client-ca", GF, grpc_tls_needs_client_certificate),
    Row("--grpc-tls-client-san", GF, grpc_tls_needs_client_san),
    Row("--log-level", GF, not_logged("[info]")),
    Row("GRPC_SERVER_USE_TLS", GV, grpc_tls_answers),
    Row("GRPC_SERVER_TLS_CERT", GV, grpc_tls_certificate),
    Row("GRPC_SERVER_TLS_KEY", GV, grpc_tls_answers),
    Row("GRPC_CLIENT_TLS_CACERT", GV, grpc_tls_needs_client_certificate),
    Row("GRPC_CLIENT_TLS_SAN", GV, grpc_tls_needs_client_san),
    # Redis over TLS, with a certificate for another name and a client certificate.
    Row("--redis-tls-ca", TF, decides("redis", "tls-ca")),
    Row("--redis-tls-cert", TF, decides("redis", "tls-cert")),
    Row("--redis-tls-key", TF, decides("redis", "tls-key")),
    Row("--redis-tls-skip-verify", TF, decides("redis", "tls-skip-verify")),
    Row("REDIS_TLS", TV, decides("redis", "env-tls")),
    Row("REDIS_TLS_CACERT", TV, decides("redis", "env-tls-ca")),
    Row("REDIS_TLS_CLIENT_CERT", TV, decides("redis", "env-tls-cert")),
    Row("REDIS_TLS_CLIENT_KEY", TV, decides("redis", "env-tls-key")),
    Row("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", TV, decides("redis", "env-tls-skip-verify")),
    # Other stores.
    Row("BACKEND_TYPE", "memcache variables", memcached_items("backend")),
    Row("MEMCACHE_HOST_PORT", "memcache variables", memcached_items("host-port")),
    Row("REDIS_TYPE", "sentinel variables", SENTINEL_ASKED),
    Row("REDIS_SENTINEL_AUTH", "sentinel variables", SENTINEL_AUTH),
    Row("--redis-on-failure", "redis down", lambda t, s: t.assertEqual(
        check(s, "down").status, 200)),  # Allowed; the default, deny, is a 503.
    # Without rules.
    Row("--health-needs-rules", "empty flags", needs_rules),
    Row("--watch-interval", "empty flags", reloads_only_on_sighup),
    Row("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "empty variables", needs_rules),
    # The memory store's bounds.
    Row("--max-leases", "budget flags", max_leases),
    Row("--max-keys", "budget flags", max_keys),
    # Read and refused: what sluiced will not do, and the switches that change nothing in
    # sluiced (it does what they ask anyway), whose values are checked.
    Row("CONFIG_TYPE", XV, both(xds_rules, lambda t, s: refused_variable(
        "CONFIG_TYPE", "GRPC_XDS_DELTA")(t, s))),
    Row("GRPC_UDS", None, refused_variable("GRPC_UDS", "/tmp/wire.sock", args=(
        "--store", "memory"))),
    Row("MEMCACHE_SRV", None, refused_variable(
        "MEMCACHE_SRV", "_memcache._tcp.example", args=("--grpc", "127.0.0.1:0"),
        BACKEND_TYPE="memcache")),
    Row("MEMCACHE_TLS", None, refused_variable(
        "MEMCACHE_TLS", "true", args=("--grpc", "127.0.0.1:0"), BACKEND_TYPE="memcache",
        MEMCACHE_HOST_PORT="127.0.0.1:1")),
    *[Row(name, None, refused_variable(name, "maybe")) for name in (
        "RUNTIME_WATCH_ROOT", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")],
    # Rules from xDS, over mutual TLS.
    Row("--xds", XF, xds_rules),
    Row("--xds-node-id", XF, xds_heard("flags", lambda r, m: r.node.id, "wire-node")),
    Row("--xds-node-metadata", XF, xds_heard("flags", NODE_METADATA, {"team": "wire", "zone": "z"})),
    Row("--xds-headers", XF, xds_heard("flags", lambda r, m: m.get("x-wire"), "flags")),
    Row("--xds-tls", XF, xds_rules),  # The server speaks TLS only.
    Row("--xds-tls-ca", XF, xds_rules),  # Its certificate is of the test's CA.
    Row("--xds-tls-cert", XF, xds_rules),  # It requires a client certificate of that CA.
    Row("--xds-tls-key", XF, xds_rules),
    Row("--xds-tls-server-name", XF, xds_rules),  # Its certificate names elsewhere.example.
    Row("--xds-max-message-bytes", XF, xds_oversized_refused("flags")),
    Row("CONFIG_GRPC_XDS_SERVER_URL", XV, xds_rules),
    Row("CONFIG_GRPC_XDS_NODE_ID", XV, xds_heard("variables", lambda r, m: r.node.id,
                                                 "wire-node")),
    Row("CONFIG_GRPC_XDS_NODE_METADATA", XV, xds_heard("variables", NODE_METADATA,
                                                       {"team": "wire", "zone": "z"})),
    Row("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", XV, xds_heard(
        "variables", lambda r, m: m.get("x-wire"), "variables")),
    Row("CONFIG_GRPC_XDS_SERVER_USE_TLS", XV, xds_rules),
    Row("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", XV, xds_rules),
    Row("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", XV, xds_rules),
    Row("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", XV, xds_rules),
    Row("CONFIG_GRPC_XDS_SERVER_TLS_SAN", XV, xds_rules),
    Row("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", XV, xds_oversized_refused("variables")),
    # The backoff, seen with no management server: exact waits once jitter is off.
    Row("--xds-force-start", None, xds_backoff(XDS_AWAY, {}, [])),
    Row("FORCE_START_WITHOUT_INITIAL_CONFIG", None, xds_backoff(
        [], {**XDS_AWAY_VARIABLES, "FORCE_START_WITHOUT_INITIAL_CONFIG": "true"}, [])),
    Row("--xds-backoff-initial", None, xds_backoff(
        [*XDS_AWAY, "--xds-backoff-initial", "100ms", "--xds-backoff-jitter", "false"], {},
        ["100ms", "200ms", "400ms"])),
    Row("--xds-backoff-max", None, xds_backoff(
        [*XDS_AWAY, "--xds-backoff-initial", "100ms", "--xds-backoff-max", "250ms",
         "--xds-backoff-jitter", "false"], {}, ["100ms", "200ms", "250ms", "250ms"])),
    Row("--xds-backoff-jitter", None, xds_backoff(
        [*XDS_AWAY, "--xds-backoff-initial", "100ms", "--xds-backoff-jitter", "false"], {},
        ["100ms", "200ms"])),
    Row("--xds-backoff-random-factor", None, xds_backoff(
        [*XDS_AWAY, "--xds-backoff-initial", "100ms", "--xds-backoff-random-factor", "0"], {},
        ["100ms", "200ms"])),
    Row("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", None, xds_backoff([], {
        **XDS_AWAY_VARIABLES, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "100ms",
        "XDS_CLIENT_BACKOFF_JITTER": "false"}, ["100ms", "200ms"])),
    Row("XDS_CLIENT_BACKOFF_MAX_INTERVAL", None, xds_backoff([], {
        **XDS_AWAY_VARIABLES, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "100ms",
        "XDS_CLIENT_BACKOFF_MAX_INTERVAL": "150ms", "XDS_CLIENT_BACKOFF_JITTER": "false"},
        ["100ms", "150ms"])),
    Row("XDS_CLIENT_BACKOFF_JITTER", None, xds_backoff([], {
        **XDS_AWAY_VARIABLES, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "100ms",
        "XDS_CLIENT_BACKOFF_JITTER": "false"}, ["100ms", "200ms"])),
    Row("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", None, xds_backoff([], {
        **XDS_AWAY_VARIABLES, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "100ms",
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "0"}, ["100ms", "200ms"])),
]


def help_flags():
    """The flags `sluiced --help` lists."""
    text = subprocess.run([sluiced.BINARY, "--help"], capture_output=True, text=True,
                          timeout=60, check=True).stdout
    return set(re.findall(r"^\s+(?:-\w,)?(--[\w-]+)", text, re.M))


def source_variables():
    """The variables server/daemon/ names (environment_names.h's tables and environment.cc's
    passes that read them): every quoted upper-case name; a prefix (TRACING_) as PREFIX*."""
    names = set()
    for name in ("environment_names.h", "environment.cc"):
        with open(os.path.join(SOURCE, "server", "daemon", name)) as f:
            names |= set(re.findall(r'"([A-Z][A-Z0-9_]+)"', f.read()))
    return {name + "*" if name in PREFIXES else name for name in names}


PREFIXES = {"TRACING_", "MEMCACHE_", "REDIS_PERSECOND", "PROMETHEUS_"}

class FlagWireTest(unittest.TestCase):
    def test_every_flag_and_variable_has_a_row(self):
        names = [row.name for row in ROWS]
        self.assertEqual(len(names), len(set(names)), "rows named twice")
        flags, variables = help_flags(), source_variables()
        self.assertGreater(len(flags), 40)
        self.assertGreater(len(variables), 60)
        self.assertEqual(sorted(flags - set(names)) + sorted(variables - set(names)), [],
                         "flags and variables without a row")
        self.assertEqual(sorted(set(names) - flags - variables), [],
                         "rows of no flag or variable")

    def test_each_row_on_the_wire(self):
        world = World()
        self.addCleanup(world.close)
        sluiced.away_from_edge(86400, 120)  # The day's windows stay those of the test.
        for row in ROWS:
            if row.scene is None:
                with self.subTest(row=row.name):
                    row.check(self, world)
        for name, (make, any_status) in SCENES.items():
            rows = [row for row in ROWS if row.scene == name]
            self.assertTrue(rows, name)
            self.run_scene(world, name, make, any_status, rows)

    def run_scene(self, world, name, make, any_status, rows):
        workdir = os.path.join(world.dir, name.replace(" ", "-"))
        os.makedirs(workdir)
        scene = Scene(workdir, make(world), world)
        try:
            scene.start(any_status=any_status)
        except RuntimeError as e:
            for row in rows:
                with self.subTest(row=row.name, scene=name):
                    self.fail(f"sluiced did not start: {e}")
            return
        try:
            for row in rows:
                if not row.after_stop:
                    with self.subTest(row=row.name, scene=name):
                        row.check(self, scene)
        finally:
            code = scene.stop()
        with self.subTest(scene=name, stop=True):
            self.assertEqual(code, 0, scene.output()[-2000:])
        for row in rows:
            if row.after_stop:
                with self.subTest(row=row.name, scene=name):
                    row.check(self, scene)


if __name__ == "__main__":
    sluiced.main()

