"""The rows of issue 23's table (measure | peer | sluice | ratio), from the figures of
bench/peers/table.py's rounds: keys "source:measure" (sides.py says what each source prints).

A cell shows medians over the rounds; a ratio is the median of the rounds' ratios, taken against
the row's best peer (fastest, or smallest per key) by median. A figure missing from every round
(its side skipped) shows as "—".
"""

import statistics

HOT = [("Guava", "java:hot_key_clock"), ("x/time/rate", "go:hot_key_clock"),
       ("rate-limiter-flexible", "node:hot_key_clock")]
HOT_PASSED_IN = [("x/time/rate AllowN(now)", "go:hot_key_passed_in"),
                 ("Guava (clock per call)", "java:hot_key_clock")]
HOT_2 = [("Guava", "java:hot_key_2threads"), ("x/time/rate", "go:hot_key_2threads")]
KEYS = [("x/time/rate", "go:keys_clock"), ("Guava", "java:keys_clock"),
        ("rate-limiter-flexible", "node:keys_clock")]
KEYS_PASSED_IN = [("x/time/rate AllowN(now)", "go:keys_passed_in")]
BYTES = [("x/time/rate", "go:bytes_per_key"), ("Guava", "java:bytes_per_key"),
         ("rate-limiter-flexible", "node:bytes_per_key")]

# (measure, peers, our benchmark, the same benchmark on 1 thread or None)
THROUGHPUT = [
    ("in-process, one hot key, clock read per call", HOT, "BM_HotKeyWithClock/threads:1", None),
    ("in-process, one hot key, time passed in", HOT_PASSED_IN, "BM_HotKeyTimePassedIn/threads:1",
     None),
    ("one hot key, 2 threads in all, clock read per call", HOT_2, "BM_HotKeyWithClock/threads:2",
     "BM_HotKeyWithClock/threads:1"),
    ("one hot key, 2 threads in all, time passed in", [], "BM_HotKeyTimePassedIn/threads:2",
     "BM_HotKeyTimePassedIn/threads:1"),
    # DirectLimiter: one limit without a key or a store, as each peer's hot limiter is.
    ("in-process, one limiter without a key, clock read per call", HOT,
     "BM_DirectWithClock/threads:1", None),
    ("in-process, one limiter without a key, time passed in", HOT_PASSED_IN,
     "BM_DirectTimePassedIn/threads:1", None),
    ("one limiter without a key, 2 threads in all, clock read per call", HOT_2,
     "BM_DirectWithClock/threads:2", "BM_DirectWithClock/threads:1"),
    ("one limiter without a key, 2 threads in all, time passed in", [],
     "BM_DirectTimePassedIn/threads:2", "BM_DirectTimePassedIn/threads:1"),
    ("one limiter without a key, yes or no (TryAcquire), clock read per call", HOT,
     "BM_DirectTryAcquireWithClock/threads:1", None),
    ("one limiter without a key, yes or no, time passed in", HOT_PASSED_IN,
     "BM_DirectTryAcquireTimePassedIn/threads:1", None),
    ("one limiter without a key, yes or no, 2 threads in all, clock read per call", HOT_2,
     "BM_DirectTryAcquireWithClock/threads:2", "BM_DirectTryAcquireWithClock/threads:1"),
    ("one limiter without a key, yes or no, 2 threads in all, time passed in", [],
     "BM_DirectTryAcquireTimePassedIn/threads:2", "BM_DirectTryAcquireTimePassedIn/threads:1"),
    ("in-process, 1 M keys, uniform, clock read per call", KEYS,
     "BM_MillionKeysWithClock/threads:1", None),
    ("in-process, 1 M keys, uniform, time passed in", KEYS_PASSED_IN + KEYS,
     "BM_MillionKeysTimePassedIn/threads:1", None),
    ("1 M keys, uniform, 2 threads in all, clock read per call", [],
     "BM_MillionKeysWithClock/threads:2", "BM_MillionKeysWithClock/threads:1"),
    ("1 M keys, uniform, 2 threads in all, time passed in", [],
     "BM_MillionKeysTimePassedIn/threads:2", "BM_MillionKeysTimePassedIn/threads:1"),
]


def _rate(value):
    return f"{value / 1e6:.2f} M/s" if value >= 1e6 else f"{value / 1e3:.1f} k/s"


def _ratios(rounds, mine, theirs):
    """The median over rounds of mine / theirs, and the rounds' figures."""
    each = [r[mine] / r[theirs] for r in rounds if mine in r and theirs in r and r[theirs]]
    return (statistics.median(each), each) if each else (None, [])


def _ratio_text(rounds, mine, theirs, name, invert=False, unit="x"):
    median, each = _ratios(rounds, theirs, mine) if invert else _ratios(rounds, mine, theirs)
    if median is None:
        return ""
    spread = f" ({min(each):.2f}–{max(each):.2f})" if len(each) > 1 else ""
    return f"{median:.2f}{unit}{spread} {name}".rstrip()


def _peers_cell(peers, medians, fmt):
    present = [(name, key) for name, key in peers if key in medians]
    return ", ".join(f"{name} {fmt(medians[key])}" for name, key in present) or "—"


def _best(peers, medians, lowest=False):
    present = [(name, key) for name, key in peers if key in medians]
    if not present:
        return None
    pick = min if lowest else max
    return pick(present, key=lambda p: medians[p[1]])


def _throughput_row(label, peers, bench, one_thread, rounds, medians):
    mine = f"sluice:{bench}"
    if mine not in medians:
        return None
    ratio = []
    best = _best(peers, medians)
    if best:
        ratio.append(_ratio_text(rounds, mine, best[1], best[0]))
    if one_thread and f"sluice:{one_thread}" in medians:
        ratio.append(_ratio_text(rounds, mine, f"sluice:{one_thread}", "its 1 thread"))
    name = bench.replace("/threads:1", "").replace("/threads:2", " 2 threads")
    return [label, _peers_cell(peers, medians, _rate), f"`{name}` {_rate(medians[mine])}",
            "; ".join(ratio)]


def _extras(used, medians):
    """Benchmarks the filter caught that no row names (a new batch or compact mode, say)."""
    for key in sorted(k for k in medians if k.startswith("sluice:BM_") and k[7:] not in used):
        bench = key[7:]
        if bench.endswith("threads:2"):
            peers = HOT_2 if bench.startswith(("BM_HotKey", "BM_Direct")) else []
            base = bench.replace("threads:2", "threads:1")
        else:
            peers = KEYS_PASSED_IN + KEYS if "MillionKeys" in bench else HOT + HOT_PASSED_IN[:1]
            base = None
        yield f"also: {bench.split('/')[0]}", peers, bench, base


def inprocess(rounds, medians):
    rows = []
    used = {bench for _, _, bench, _ in THROUGHPUT}
    for spec in THROUGHPUT + list(_extras(used, medians)):
        row = _throughput_row(*spec, rounds, medians)
        if row:
            rows.append(row)
    mine = "sluice:bytes_per_key"
    if mine in medians:
        best = _best(BYTES, medians, lowest=True)
        ratio = _ratio_text(rounds, mine, best[1], f"smaller than {best[0]}", invert=True) if best else ""
        rows.append(["live bytes per key, 1 M keys (sluice: gcra, resident)",
                     _peers_cell(BYTES, medians, lambda v: f"{v:.0f} B"),
                     f"`sluice_memory_bench gcra` {medians[mine]:.1f} B", ratio])
    return rows


def grpc(rounds, medians):
    ref, redis, memory = "grpc:reference-redis", "grpc:sluiced-redis", "grpc:sluiced-memory"

    def cell(key):
        if f"{key}:calls/s" not in medians:
            return "—"
        errors = max(r.get(f"{key}:errors", 0) for r in rounds)
        return (f"{medians[key + ':calls/s'] / 1e3:.1f} k calls/s, "
                f"{medians[key + ':cpu_us']:.0f} µs CPU/call"
                + (f" (failed calls in a round: up to {errors:.0f}!)" if errors else ""))

    rows = []
    if f"{redis}:calls/s" in medians:
        ratio = ", ".join(x for x in (
            _ratio_text(rounds, f"{redis}:calls/s", f"{ref}:calls/s", "calls/s"),
            _ratio_text(rounds, f"{redis}:cpu_us", f"{ref}:cpu_us", "less CPU", invert=True))
            if x)
        rows.append(["Envoy API over gRPC, Redis store, 64 in flight",
                     "envoyproxy/ratelimit " + cell(ref) if f"{ref}:calls/s" in medians else "—",
                     cell(redis), ratio])
    if f"{memory}:calls/s" in medians:
        rows.append(["same, memory store", "—", cell(memory), ""])
    return rows


def http(rounds, medians):
    rows = []
    for loops, label in ((2, "2 loops vs nginx `return 204` 2 workers"),
                         (1, "1 loop vs nginx `return 204` 1 worker")):
        mine, theirs = f"http:sluiced{loops}", f"http:nginx{loops}"
        if f"{mine}:requests/s" not in medians:
            continue

        def cell(key):
            return f"{medians[key + ':requests/s'] / 1e3:.1f} k req/s, p99 {medians[key + ':p99']:.2f} ms"

        ratio = (_ratio_text(rounds, f"{mine}:requests/s", f"{theirs}:requests/s", "requests/s")
                 + ", p99 " + _ratio_text(rounds, f"{mine}:p99", f"{theirs}:p99", ""))
        refused = max(r.get(f"{mine}:non2xx", 0) for r in rounds)
        rows.append([f"HTTP `POST /v1/check`, {label}", "nginx " + cell(theirs), cell(mine),
                     ratio + (f" (non-2xx answers: {refused:.0f}!)" if refused else "")])
    return rows


def render(groups, rounds, medians):
    rows = []
    for group, make in (("inprocess", inprocess), ("grpc", grpc), ("http", http)):
        if group in groups:
            rows += make(rounds, medians)
    lines = ["| measure | peer | sluice | ratio |", "| --- | --- | --- | --- |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
