"""flag_wire_test.py's checks: each takes the test case and the scene's sluiced (its world as
scene.world), and asserts what one row's setting changes on the wire. Python 3's standard
library, and gRPC through rls_client.py (Debian's python3-grpcio)."""

import base64
import hashlib
import hmac
import http.client
import itertools
import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time

import rls_client
import sluiced
from flag_wire_world import (HEADERS, KEPT, RULES, eventually, log, redis_cli, redis_connections,
                             redis_keys)

FRESH = itertools.count()  # Values of their own for checks that more than one row makes.
CORRUPT = b"not a snapshot of sluiced's"


def descriptor(key, value, hits=None):
    d = {"entries": [{"key": key, "value": value}]}
    if hits is not None:
        d["hitsAddend"] = hits
    return d


def envoy_json(s, *descriptors, hits=None):
    """POST /json: the RateLimitResponse as a dict."""
    body = {"domain": "wire", "descriptors": list(descriptors)}
    if hits is not None:
        body["hitsAddend"] = hits
    return s.request("POST", "/json", body).json()


def check(s, value, key="user"):
    return s.request("POST", "/v1/check", {"domain": "wire", "descriptors": [
        descriptor(key, value)]})


SECRET = "a receipt secret of the wire test, 32+ bytes long"
ADMIN_TOKEN = "wire-test-admin-token"


def receipt_signed_with(secret, prefix):
    """A receipt's signature is HMAC-SHA-256 under the secret of --secret-file bound to the
    store (its --store and --cache-key-prefix): computed here from the file's secret."""
    def check_(t, s):
        response = s.request("POST", "/v1/check", {"key": "receipt", "limit": 5, "period": "1m",
                                                  "receipt": True})
        t.assertEqual(response.status, 200)
        token = json.loads(response.body)["receipt"]
        signed, _, signature = token.rpartition(".")
        key = hmac.new(secret.encode(), f"{s.world.store} {prefix}".encode(),
                       hashlib.sha256).digest()
        expected = hmac.new(key, signed.encode(), hashlib.sha256).digest()
        t.assertEqual(base64.urlsafe_b64encode(expected).rstrip(b"=").decode(), signature)
    return check_


def admin_token(token):
    """POST /v1/reset answers 401 without the file's token, 403 with another, 200 with it."""
    def check_(t, s):
        body = {"key": "reset", "limit": 5, "period": "1m"}
        t.assertEqual(s.request("POST", "/v1/reset", body).status, 401)
        t.assertEqual(s.request("POST", "/v1/reset", body,
                                {"Authorization": "Bearer wrong-token-0123456"}).status, 403)
        t.assertEqual(s.request("POST", "/v1/reset", body,
                                {"Authorization": "Bearer " + token}).status, 200)
    return check_


def hidden_keys(t, s):
    """An explanation names the key a limit counts under as a keyed hash, never as it is."""
    body = {"key": "hidden-user-42", "limit": 5, "period": "1m", "explain": True}
    answer = s.request("POST", "/v1/check", body).json()
    key = answer["explain"]["descriptors"][0]["limits"][0]["key"]
    t.assertRegex(key, r"^#[0-9a-f]{16}$")
    t.assertNotIn("hidden-user-42", json.dumps(answer["explain"]))


def top_metrics(t, s):
    """The top offenders of each rule limit are series of /metrics, keys hashed (as the
    explanation of the same key names it: this scene hides keys)."""
    body = {"key": "top-metrics-key", "algorithm": "gcra", "limit": 1, "period": "1h"}
    for _ in range(2):  # Admitted, then denied: an hour apart whatever the clock says.
        s.request("POST", "/v1/check", body)
    explained = s.request("POST", "/v1/check", dict(body, explain=True)).json()
    key = explained["explain"]["descriptors"][0]["limits"][0]["key"]
    t.assertIn(f'sluice_top_denied{{rule="adhoc",key="{key}"}} 2\n', s.metrics())


def operator_page(token):
    """The operator's page at /ui/: refused without the token, served with it as a browser
    sends it (Basic, any user), its charts' data beside it."""
    def check_(t, s):
        t.assertEqual(s.request("GET", "/ui/").status, 401)
        basic = "Basic " + base64.b64encode(f"operator:{token}".encode()).decode()
        page = s.request("GET", "/ui/", headers={"Authorization": basic})
        t.assertEqual(page.status, 200)
        t.assertIn(b"/ui/charts.js", page.body)
        series = s.request("GET", "/ui/api/series?seconds=3", headers={"Authorization": basic})
        t.assertEqual(series.status, 200)
        t.assertEqual(series.json()["seconds"], 3)
    return check_


def refused(t, call):
    """`call` fails: a TLS handshake refused, a connection dropped, a call without answer."""
    try:
        call()
    except (OSError, rls_client.GrpcError):
        return
    t.fail("the call was answered")


# The checks: each takes the test case and the scene's sluiced. Requests carry values of their
# own, so that the rows of one scene do not count against each other.


def rules_loaded(t, s):
    answer = envoy_json(s, descriptor("user", "rules"))
    t.assertEqual(answer["statuses"][0].get("currentLimit"), {"requestsPerUnit": 4, "unit": "DAY"})


def http_listens(t, s):
    t.assertEqual(s.request("GET", "/healthz").status, 200)
    t.assertTrue(sluiced.listens(s.proc.pid, s.port), "not on 127.0.0.1:%d" % s.port)


def holds(pid, host, port):
    """Whether process `pid` listens on `host`:`port` (an IPv4 address), over IPv4 or as
    IPv6's mapped address (gRPC's sockets): not on every address."""
    address = "%08X:%04X" % (int.from_bytes(socket.inet_aton(host), "little"), port)
    inodes = set()
    for table, prefix in (("/proc/net/tcp", ""), ("/proc/net/tcp6", "0000000000000000FFFF0000")):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[1] == prefix + address and fields[3] == "0A":  # 0A: LISTEN.
                    inodes.add("socket:[%s]" % fields[9])
    fds = "/proc/%d/fd" % pid
    return any(os.readlink(os.path.join(fds, fd)) in inodes for fd in os.listdir(fds))


def grpc_answers(t, s):
    t.assertTrue(holds(s.proc.pid, s.grpc_host, s.grpc_port),
                 "not on %s:%d" % (s.grpc_host, s.grpc_port))
    value = "grpc-%d" % next(FRESH)
    answer = rls_client.should_rate_limit(s.grpc_port, "wire", [[("user", value)]],
                                          host=s.grpc_host)
    t.assertEqual((answer["overall_code"], answer["statuses"][0]["limit_remaining"]), ("OK", 3))


def debug_rlconfig(t, s):
    t.assertTrue(holds(s.proc.pid, s.debug_host, s.debug_port),
                 "not on %s:%d" % (s.debug_host, s.debug_port))
    conn = http.client.HTTPConnection(s.debug_host, s.debug_port, timeout=60)
    try:
        conn.request("GET", "/rlconfig")
        response = conn.getresponse()
        t.assertEqual(response.status, 200)
        t.assertIn("wire.user: unit=DAY requests_per_unit=4", response.read().decode())
    finally:
        conn.close()


def merged(t, s):
    answer = envoy_json(s, descriptor("extra", "merged"))
    t.assertEqual(answer["statuses"][0].get("currentLimit"), {"requestsPerUnit": 5, "unit": "DAY"})


def dotfiles_skipped(t, s):
    def code(domain):
        return rls_client.should_rate_limit(s.grpc_port, domain, [[("k", "v")]])["statuses"][0]["code"]
    # both/folder/c.yaml is read (denies everything); both/.hidden/d.yaml is not.
    t.assertEqual(code("in_folder"), "OVER_LIMIT")
    t.assertEqual(code("hidden"), "OK")


def grpc_headers(s, value):
    return dict(rls_client.should_rate_limit(s.grpc_port, "wire", [[("user", value)]])["headers"])


def response_headers(t, s):
    t.assertEqual(sorted(grpc_headers(s, "headers")), sorted(HEADERS))
    # POST /json carries the same, as theirs (the protobuf JSON of the same response): a fresh
    # value, the second hit of it told there as the second over gRPC is.
    grpc_headers(s, "headers-json")
    told = envoy_json(s, descriptor("user", "headers-json"))["responseHeadersToAdd"]
    grpc_headers(s, "headers-json-grpc")
    over_grpc = grpc_headers(s, "headers-json-grpc")
    over_json = {h["key"]: h["value"] for h in told}
    t.assertEqual(sorted(over_json), sorted(over_grpc))
    for name, value in over_grpc.items():
        if name == HEADERS[2]:  # The seconds to the window's end: the calls a second apart.
            t.assertLessEqual(abs(int(over_json[name]) - int(value)), 1)
        else:
            t.assertEqual(over_json[name], value)


def header(name, value):
    def check(t, s):
        t.assertRegex(grpc_headers(s, name).get(name, ""), value)
    return check


def dynamic_metadata(t, s):
    answer = rls_client.should_rate_limit(s.grpc_port, "wire", [[("user", "metadata")]])
    t.assertIsNotNone(answer["dynamic_metadata"], answer)
    t.assertEqual(answer["dynamic_metadata"].get("domain"), "wire")
    t.assertEqual(answer["dynamic_metadata"].get("metadata"), {"team": "blue"})


def stop_counting(t, s):
    # 5 hits on a limit of 4: over, and counted by default (every later hit over too).
    over = envoy_json(s, descriptor("user", "stop", hits=5))
    t.assertEqual(over["statuses"][0]["code"], "OVER_LIMIT")
    after = envoy_json(s, descriptor("user", "stop"))["statuses"][0]
    t.assertEqual((after["code"], after.get("limitRemaining")), ("OK", 3))


def stop_others(t, s):
    # A descriptor that passes its limit (5 hits of 4): the request's other one counts nothing
    # (without the switch, its hit counts: 2 left after the next).
    envoy_json(s, descriptor("user", "others-over", hits=5), descriptor("user", "others-within"))
    after = envoy_json(s, descriptor("user", "others-within"))["statuses"][0]
    t.assertEqual((after["code"], after.get("limitRemaining")), ("OK", 3))


def near_limit_ratio(t, s):
    # The third hit of 4 (0.75 of the limit) is near it past 0.5, not past the default 0.8.
    series = 'sluice_rule_near_limit_total{rule="wire.near"}'
    before = s.metric(series)
    for _ in range(3):
        envoy_json(s, descriptor("near", "near"))
    t.assertEqual(s.metric(series) - before, 1)


def shadow(t, s):
    answer = envoy_json(s, descriptor("user", "shadow", hits=5))
    t.assertEqual((answer["overallCode"], answer["statuses"][0]["code"]), ("OK", "OVER_LIMIT"))


def quota_mode(t, s):
    # One descriptor over, one within: not over overall when every rule is in quota mode.
    answer = envoy_json(s, descriptor("user", "quota-over", hits=5),
                        descriptor("user", "quota-within"))
    t.assertEqual([status["code"] for status in answer["statuses"]], ["OVER_LIMIT", "OK"])
    t.assertEqual(answer["overallCode"], "OK")
    # Both over: over overall (which shadow mode would not say).
    answer = envoy_json(s, descriptor("user", "quota-over"), descriptor("user", "quota-within",
                                                                         hits=5))
    t.assertEqual(answer["overallCode"], "OVER_LIMIT", answer)


def x_ratelimit(t, s):
    response = check(s, "format")
    t.assertEqual((response.status, response.header("X-RateLimit-Limit")), (200, "4"), response)


def statsd_datagram(name):
    def check_(t, s):
        envoy_json(s, descriptor("user", "statsd"))
        data, _ = s.world.datagrams[name].recvfrom(65536)
        t.assertRegex(data, rb"^ratelimit\.[\w.]+:\d+\|[cg]")
    return check_


def logged(text):
    def check_(t, s):
        t.assertIn(text, log(s))
    return check_


def not_logged(text):
    def check_(t, s):
        t.assertNotIn(text, log(s))
    return check_


def ignored(name):
    """`name` (a prefix's: any name with it) is named in the log's line of ignored settings."""
    def check_(t, s):
        lines = [line for line in log(s).splitlines()
                 if "ignoring envoyproxy/ratelimit settings" in line]
        t.assertEqual(len(lines), 1, log(s)[-2000:])
        names = [item.split(" ")[0] for item in lines[0].split("support: ", 1)[1].split(", ")]
        t.assertIn(name.replace("*", "WIRE"), names)
    return check_


def snapshot_written_while_running(t, s):
    eventually(lambda: os.path.exists(s.world.snapshot) and os.path.getsize(s.world.snapshot) > 0
               and open(s.world.snapshot, "rb").read() != CORRUPT, "a snapshot written")


def corrupt_snapshot_moved_aside(t, s):
    moved = [name for name in os.listdir(s.world.dir) if name.startswith("envoy.snap.corrupt-")]
    t.assertEqual(len(moved), 1, os.listdir(s.world.dir))
    with open(os.path.join(s.world.dir, moved[0]), "rb") as f:
        t.assertEqual(f.read(), CORRUPT)


def snapshot_at_stop(t, s):
    with open(s.world.snapshot, "rb") as f:
        t.assertNotIn(f.read(), (b"", CORRUPT))


def store(kind):
    def check_(t, s):
        t.assertEqual(s.request("GET", "/healthz").json().get("store"), kind)
        t.assertEqual(check(s, "store-" + kind).status, 200)
    return check_


def redis_decides(redis_name, value):
    """Decisions are made in the Redis of `redis_name`: a key there, remaining counted down."""
    def check_(t, s):
        before = len(redis_keys(s.world.redis(redis_name).port))
        answers = [check(s, value).json()["remaining"] for _ in range(2)]
        t.assertEqual(answers[0] - answers[1], 1)
        t.assertEqual(len(redis_keys(s.world.redis(redis_name).port)), before + 1)
    return check_


def key_prefix(redis_name, prefix):
    def check_(t, s):
        t.assertEqual(check(s, "prefix").status, 200)
        keys = redis_keys(s.world.redis(redis_name).port)
        t.assertTrue(keys and all(key.startswith(prefix) for key in keys), keys)
    return check_


def connections(redis_name, count):
    def check_(t, s):
        t.assertEqual(check(s, "connections").status, 200)
        port = s.world.redis(redis_name).port
        eventually(lambda: redis_connections(port) == count,
                   f"{count} connections to Redis (now {redis_connections(port)})")
    return check_


def drive_over(t, s, value):
    """Four admissions of a limit of 4, then a denial by the store."""
    t.assertEqual([check(s, value).status for _ in range(5)], [200] * 4 + [429])


LOCALLY = "sluice_redis_denials_answered_locally_total"


def deny_cache(t, s):
    drive_over(t, s, "deny")
    eventually(lambda: check(s, "deny").status == 429 and s.metric(LOCALLY) > 0,
               "a denial answered from memory")


def deny_cache_ttl(t, s):
    drive_over(t, s, "deny-ttl")
    port = s.world.redis("flags").port
    for key in redis_keys(port):
        if "deny-ttl" in key:
            redis_cli(port, "DEL", key)
    before = s.metric(LOCALLY)
    # Past the default TTL (1s): Redis, which no longer has the key, would admit.
    time.sleep(1.5)
    t.assertEqual(check(s, "deny-ttl").status, 429)
    t.assertEqual(s.metric(LOCALLY), before + 1)


def shares(t, s):
    eventually(lambda: check(s, "shared", key="hot").status == 200
               and s.metric("sluice_redis_shares_taken_total") > 0, "a share taken")


def decides(kind, value):
    """The store of `kind` decides: its state kept from one request to the next."""
    def check_(t, s):
        t.assertEqual(s.request("GET", "/healthz").json().get("store"), kind)
        answers = [check(s, value) for _ in range(2)]
        t.assertEqual([(a.status, a.json().get("remaining")) for a in answers],
                      [(200, 3), (200, 2)], answers)
    return check_


def memcached_items(value):
    def check_(t, s):
        before = s.world.memcached().items()
        decides("memcached", value)(t, s)
        t.assertEqual(s.world.memcached().items(), before + 1)
    return check_


def sentinel_heard(*words):
    command = b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)

    def check_(t, s):
        eventually(lambda: command in s.world.sentinel_heard, f"the sentinel sent {command!r}")
    return check_


def healthcheck(s):
    response = s.request("GET", "/healthcheck")
    return response.status, response.body.decode()


def needs_rules(t, s):
    t.assertEqual(healthcheck(s), (500, "no rules are loaded\n"))


def reloads_only_on_sighup(t, s):
    s.world.write(os.path.join(s.workdir, "rules", "a.yaml"), RULES)
    time.sleep(3)  # Three of the default interval's looks.
    t.assertEqual(healthcheck(s)[0], 500)
    s.proc.send_signal(signal.SIGHUP)
    eventually(lambda: healthcheck(s) == (200, "OK"), "rules loaded on SIGHUP")


def max_leases(t, s):
    t.assertEqual([check(s, f"job-{k}", key="job").status for k in range(4)], [200] * 3 + [503])


def max_keys(t, s):
    # 64 keys in 64 parts of the key space: one more key than the bound finds its part full.
    for k in range(200):
        response = check(s, f"key-{k}")
        if response.status == 503:
            t.assertIn("memory store is full", response.body.decode())
            t.assertGreater(s.metric("sluice_store_refused_total"), 0)
            return
        t.assertEqual(response.status, 200, response)
    t.fail("200 new keys admitted past --max-keys 64")


def tls_call(s, *client):
    """ShouldRateLimit over TLS trusting the test's CA, with the client certificate named."""
    certs = s.world.certificates()
    credentials = rls_client.client_credentials(certs["ca"][0],
                                                *(certs[client[0]] if client else ()))
    return rls_client.should_rate_limit(s.grpc_port, "wire", [[("user", "tls")]],
                                        credentials=credentials)


def grpc_tls_certificate(t, s):
    certs = s.world.certificates()
    # The handshake alone, with the ssl module: gRPC's client does not show the peer's
    # certificate.
    context = ssl.create_default_context(cafile=certs["ca"][0])
    context.load_cert_chain(*certs["client"])
    context.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", s.grpc_port), timeout=60) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as conn:
            shown = conn.getpeercert(binary_form=True)
    with open(certs["server"][0]) as f:
        t.assertEqual(shown, ssl.PEM_cert_to_DER_cert(f.read()))


def grpc_tls_answers(t, s):
    t.assertEqual(tls_call(s, "client")["overall_code"], "OK")


def grpc_tls_needs_client_certificate(t, s):
    refused(t, lambda: tls_call(s))
    t.assertEqual(tls_call(s, "client")["overall_code"], "OK")


def grpc_tls_needs_client_san(t, s):
    refused(t, lambda: tls_call(s, "intruder"))  # Signed by the CA, without the name.
    t.assertEqual(tls_call(s, "client")["overall_code"], "OK")


def exits(args, variables, code, text, stream="stderr"):
    """A row without a scene: sluiced run with `args` and `variables` alone exits with `code`,
    `text` on `stream`."""
    def check_(t, _):
        env = {name: os.environ[name] for name in KEPT if name in os.environ}
        env.update(variables)
        try:
            result = subprocess.run([sluiced.BINARY, *args], env=env, capture_output=True,
                                    text=True, timeout=60, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            t.fail(f"sluiced {args} {variables} did not exit")
        t.assertEqual(result.returncode, code, result)
        t.assertIn(text, getattr(result, stream), result)
    return check_


def refused_variable(name, value, args=("--grpc", "127.0.0.1:0", "--store", "memory"),
                     **others):
    """`name`=`value` is read: sluiced refuses to start, naming it and its value."""
    return exits(["--http", "127.0.0.1:0", *args], {name: value, **others}, 2,
                 f"{name}={value}")


def both(*checks):
    def check_(t, s):
        for c in checks:
            c(t, s)
    return check_



# Rules from xDS: the scene's management server (World.xds) and what it heard.
def xds_rules(t, s):
    value = "xds-%d" % next(FRESH)
    answer = rls_client.should_rate_limit(s.grpc_port, "xdswire", [[("user", value)]])
    t.assertEqual((answer["overall_code"], answer["statuses"][0]["limit_remaining"]), ("OK", 1))


def xds_heard(name, probe, expected):
    """What the management server of `name` was told: probe(first request, its stream's
    metadata) equals `expected`."""
    def check_(t, s):
        server = s.world.xds(name)
        first = server.wait_for(lambda r: r[:1], what="the subscription")[0]
        t.assertEqual(probe(first, server.stream_metadata[0]), expected)
    return check_


def xds_oversized_refused(name):
    """A set larger than --xds-max-message-bytes (100,000) is not taken: gRPC refuses the
    message, and the rules in force stay. Last of its scene: the server keeps the set."""
    def check_(t, s):
        import xds_server
        big = [{"key": "k%d" % i, "rate_limit": {"unit": "hour", "requests_per_unit": 1}}
               for i in range(8000)]
        s.world.xds(name).push("big", [xds_server.config("big", "other", big)])
        eventually(lambda: "larger than max" in log(s), "the oversized set refused")
        xds_rules(t, s)
    return check_


def xds_backoff(args, variables, waits):
    """A row without a scene: sluiced told of a management server that is not there (port 1)
    serves meanwhile (its force start is among `args` or `variables`) and logs the wait before
    each new attempt: the first of them are `waits`."""
    def check_(t, _):
        env = {name: os.environ[name] for name in KEPT if name in os.environ}
        env.update(variables)
        proc = subprocess.Popen(
            [sluiced.BINARY, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--store",
             "memory", *args], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True)
        killer = threading.Timer(60, proc.kill)  # sluice-timing: watchdog (a line never said)
        killer.start()
        listened, said = False, []
        try:
            for line in proc.stderr:
                listened = listened or "listening on http://" in line
                if " again in " in line:
                    said.append(line.rsplit(" again in ", 1)[1].strip())
                if listened and len(said) >= len(waits):
                    break
        finally:
            killer.cancel()
            proc.terminate()
            proc.wait(60)
        t.assertTrue(listened, "sluiced did not serve while the management server was away")
        t.assertEqual(said[:len(waits)], waits)
    return check_
