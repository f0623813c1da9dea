"""The soak's load on one sluiced: keys whose exact allowance is known, each driven past its
limit by paced clients that record every answer, and a flood of fresh keys; and a sampler of
the server's RSS (from /proc) and counters.

Every request is recorded as (send, recv, status), times from time.time(); status is the HTTP
status, or "error" when no answer came (a timeout, a closed connection).
"""

import collections
import http.client
import json
import random
import re
import threading
import time
import urllib.request

DOMAIN = "soak"


class Key:
    """One key of one server: how to ask for it, the limits that decide it, how hard to drive it.
    kind: "fixed" (limits: [(N, P seconds)], each a fixed window) or "gcra" (limits:
    [(N, P, burst)]); exact: the single fixed window must admit exactly N in a healthy window
    that saw a denial."""

    def __init__(self, name, kind, limits, path, body, rate, threads=1, exact=False):
        self.name, self.kind, self.limits = name, kind, limits
        self.path, self.body, self.rate, self.threads = path, body, rate, threads
        self.exact = exact
        self.requests = []


def _rules_body(key, value):
    return {"domain": DOMAIN, "descriptors": [{"entries": [{"key": key, "value": value}]}]}


def keys_for(policy):
    """The checked keys of the server with `policy`: values of their own, so servers on one
    Redis never share a count. Driven at 1.3x to 2x their limits, so most windows see a denial."""
    adhoc = f"soak-{policy}-adhoc"
    return [
        Key("fw 8/1s", "fixed", [(8, 1.0)], "/v1/check", _rules_body("fw", policy), 13,
            threads=2, exact=True),
        Key("fw 20/2s", "fixed", [(20, 2.0)], "/v1/check", _rules_body("fw2s", policy), 16,
            threads=2, exact=True),
        # Long periods: a count lost in a fault (a restart without it, a demotion that drops
        # the data) would show as over-admission here, where a short window has long reset.
        Key("fw 100/1m", "fixed", [(100, 60.0)], "/v1/check", _rules_body("fw1m", policy), 3,
            exact=True),
        Key("gcra 30/1m b10", "gcra", [(30, 60.0, 10)], "/v1/check",
            _rules_body("gcra1m", policy), 2),
        Key("multi 6/1s+300/1m", "fixed", [(6, 1.0), (300, 60.0)], "/v1/check",
            _rules_body("multi", policy), 8),
        Key("gcra 5/1s b3", "gcra", [(5, 1.0, 3)], "/v1/check", _rules_body("gcra", policy), 8),
        Key("adhoc fw 6/1s", "fixed", [(6, 1.0)], "/v1/check",
            {"key": adhoc + "-fw", "algorithm": "fixed_window", "limit": 6, "period": "1s"}, 10,
            threads=2, exact=True),
        Key("adhoc gcra 10/2s b4", "gcra", [(10, 2.0, 4)], "/v1/check",
            {"key": adhoc + "-gcra", "algorithm": "gcra", "limit": 10, "period": "2s",
             "burst": 4}, 8),
        Key("/json 5/1s", "fixed", [(5, 1.0)], "/json", _rules_body("json", policy), 8,
            exact=True),
    ]


FLOOD_LIMIT = (1, 60.0)  # Each flood value: 1 per minute, asked twice (the second denied).


def rules(n):
    """The rules file, version n: only `reload`'s limit changes from one version to the next, so
    a reload keeps every checked count (a changed limit would start afresh)."""
    return f"""# Written by bench/soak/soak.py (version {n}).
domain: {DOMAIN}
descriptors:
  - key: fw
    rate_limit: {{unit: second, requests_per_unit: 8}}
  - key: fw2s
    rate_limit: {{period: 2s, requests_per_unit: 20}}
  - key: fw1m
    rate_limit: {{unit: minute, requests_per_unit: 100}}
  - key: gcra1m
    rate_limit: {{algorithm: gcra, period: 1m, requests_per_unit: 30, burst: 10}}
  - key: multi
    limits:
      - {{name: multi_second, unit: second, requests_per_unit: 6}}
      - {{name: multi_minute, unit: minute, requests_per_unit: 300}}
  - key: gcra
    rate_limit: {{algorithm: gcra, period: 1s, requests_per_unit: 5, burst: 3}}
  - key: json
    rate_limit: {{unit: second, requests_per_unit: 5}}
  - key: flood
    rate_limit: {{unit: minute, requests_per_unit: {FLOOD_LIMIT[0]}}}
  - key: reload
    rate_limit: {{unit: second, requests_per_unit: {100 + n % 2}}}
"""


class Client:
    """One keep-alive connection to sluiced, opened again after any failure. `bodies` counts
    the bodies of each (port, path, status) other than 200 and 429 (8 kinds at most), for the
    report."""

    bodies = {}
    lock = threading.Lock()

    def __init__(self, port):
        self.port, self.conn = port, None

    def _keep(self, path, status, body):
        # Ports and addresses vary; the message is what tells errors apart.
        text = re.sub(rb"[0-9]+", b"#", body[:300])
        with Client.lock:
            bodies = Client.bodies.setdefault((self.port, path, status), collections.Counter())
            if text in bodies or len(bodies) < 8:
                bodies[text] += 1

    def post(self, path, body):
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3)
            self.conn.request("POST", path, json.dumps(body),
                              {"Content-Type": "application/json"})
            response = self.conn.getresponse()
            body = response.read()
            if response.status not in (200, 429):
                self._keep(path, response.status, body)
            return response.status
        except (OSError, http.client.HTTPException):
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            return "error"


class Driver(threading.Thread):
    """Sends `next_request()` ((path, body, sink)) at about `rate` per second, one in flight,
    appending (send, recv, status) to the sink."""

    def __init__(self, port, rate, next_request, stopping):
        super().__init__(daemon=True)
        self.client, self.rate = Client(port), rate
        self.next_request, self.stopping = next_request, stopping

    def run(self):
        due = time.monotonic()
        while not self.stopping.is_set():
            due = max(due + random.uniform(0.5, 1.5) / self.rate, time.monotonic() - 1)
            pause = due - time.monotonic()
            if pause > 0 and self.stopping.wait(pause):
                return
            path, body, sink = self.next_request()
            send = time.time()
            status = self.client.post(path, body)
            sink.append((send, time.time(), status))


FLOOD_BATCH = 16  # Fresh values per flood request (descriptors of one /v1/check).


class Flood:
    """Fresh values of `flood`, FLOOD_BATCH to a request, each batch asked twice in a row (the
    second time over their limit): `records` holds (value, send, recv, status) per value,
    `requests` (send, recv, status) per request."""

    def __init__(self, policy):
        self.policy, self.n, self.records, self.requests = policy, 0, [], []
        self.lock = threading.Lock()

    def next_request(self):
        with self.lock:
            batch = self.n // 2
            self.n += 1
        values = [f"{self.policy}-{batch}-{i}" for i in range(FLOOD_BATCH)]
        body = {"domain": DOMAIN, "descriptors": [
            {"entries": [{"key": "flood", "value": v}]} for v in values]}
        return "/v1/check", body, _Tagged(self, values)


class _Tagged:
    def __init__(self, flood, tags):
        self.flood, self.tags = flood, tags

    def append(self, record):
        self.flood.requests.append(record)
        for tag in self.tags:
            self.flood.records.append((tag, *record))


def drivers(port, keys, flood, flood_rate, stopping):
    out = []
    for key in keys:
        for _ in range(key.threads):
            out.append(Driver(port, key.rate / key.threads,
                              lambda k=key: (k.path, k.body, k.requests), stopping))
    out.append(Driver(port, flood_rate, flood.next_request, stopping))
    return out


def rss(pid):
    """VmRSS of `pid` in bytes, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


COUNTERS = ("sluice_redis_failures_total", "sluice_redis_fallbacks_total",
            "sluice_config_reloads_total", "sluice_config_reload_failures_total")


def counters(port):
    """{name: value} of COUNTERS from GET /metrics, or None if it does not answer in 2 s."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
    except OSError:
        return None
    out = {}
    for line in text.decode().splitlines():
        name, _, value = line.partition(" ")
        if name in COUNTERS:
            out[name] = float(value)
    return out


class Sampler(threading.Thread):
    """Every second: each server's RSS and counters; every 5 s Redis's memory and keys."""

    def __init__(self, servers, pair, stopping):
        super().__init__(daemon=True)
        self.servers, self.pair, self.stopping = servers, pair, stopping
        self.rss = {policy: [] for policy in servers}        # [(t, bytes)]
        self.counters = {policy: [] for policy in servers}   # [(t, {name: value} or None)]
        self.redis = []                                      # [(t, used_memory, keys)]
        self.errors = []  # A sample that failed: the report fails on it (the series has holes).

    def run(self):
        n = 0
        while True:
            try:
                self.sample(redis=n % 5 == 0)
            except Exception as e:  # noqa: BLE001: the report says so; sampling goes on.
                self.errors.append(f"{time.ctime()}: {e!r}")
            n += 1
            if self.stopping.wait(1.0):
                return

    def sample(self, redis=True):
        for policy, server in self.servers.items():
            t = time.time()
            value = rss(server.proc.pid)
            if value is not None:
                self.rss[policy].append((t, value))
            self.counters[policy].append((t, counters(server.port)))
        if redis:
            self.redis.append((time.time(), *self.pair.memory()))
