#!/usr/bin/env python3
"""Four workers share one partner quota through sluiced on Redis, paced by leaky_bucket.

    examples/workers/run.py [--per-second 5] [--per-day 100] [--workers 4] [--svg out/workers.svg]

Starts a redis-server of its own and sluiced on it (rules: leaky_bucket N per second, one at a
time, and a daily quota), then WORKERS copies of worker.sh, each of which calls
`sluice acquire` before every call it makes and stops when it is told to come back tomorrow
(exit 75). None knows how many others there are. When all have stopped, it prints what was
achieved and draws the calls over time, one lane per worker, into an SVG file:

- the rate: calls after the first, over the time from the first to the last;
- the shortest gap between two calls (any workers), against 1/N;
- the calls each worker made, and the day's count as sluiced reports it.

--json prints the figures as JSON instead (tests/integration/workers_test.py uses it).
Python 3 standard library only; needs redis-server, and sluiced and sluice built.
"""

import argparse
import datetime
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

RULES = """\
domain: partner
descriptors:
  - key: api
    limits:
      - {{algorithm: leaky_bucket, requests_per_unit: {per_second}, period: 1s, burst: 1,
         name: pace}}
      - {{requests_per_unit: {per_day}, unit: day, name: daily}}
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, what, timeout=120):  # A busy machine may take seconds.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.05)
    raise RuntimeError("timed out waiting for " + what)


def start_redis(workdir):
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", workdir, "--logfile", os.path.join(workdir, "redis.log")])

    def answers():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    wait_for(answers, "redis-server")
    return proc, port


def start_sluiced(sluiced, workdir, rules, redis_port):
    config = os.path.join(workdir, "rules.yaml")
    with open(config, "w") as f:
        f.write(rules)
    log_path = os.path.join(workdir, "sluiced.log")
    log = open(log_path, "w")
    proc = subprocess.Popen(
        # A worker waits 30 s for its turn anyway: let a decision wait as long for a Redis that
        # a busy machine schedules late, rather than fail it after the default 100 ms.
        [sluiced, "--config", config, "--store", f"redis://127.0.0.1:{redis_port}",
         "--redis-timeout", "30s", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
         "--threads", "1"],
        stdout=log, stderr=log)

    def port():
        with open(log_path) as f:
            found = re.findall(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
        if proc.poll() is not None:
            raise RuntimeError("sluiced exited: " + open(log_path).read())
        return int(found[-1]) if found else None

    return proc, wait_for(port, "sluiced")


def daily_count(port, per_day):
    """The day's count as sluiced sees it: its limit minus what remains (a cost-0 check)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = {"domain": "partner", "cost": 0,
            "descriptors": [{"entries": [{"key": "api", "value": "mail"}]}]}
    conn.request("POST", "/v1/check", json.dumps(body), {"Content-Type": "application/json"})
    answer = json.loads(conn.getresponse().read())
    daily = next(limit for limit in answer["limits"] if limit["name"] == "daily")
    return per_day - daily["remaining"]


def avoid_midnight(margin):
    """The daily quota's window ends at midnight UTC: do not straddle it."""
    now = datetime.datetime.now(datetime.timezone.utc)
    left = 86400 - (now.hour * 3600 + now.minute * 60 + now.second)
    if left < margin:
        time.sleep(left + 1)


def run(args):
    avoid_midnight(args.per_day / args.per_second + 30)
    workdir = tempfile.mkdtemp(prefix="sluice-workers.")
    procs = []
    try:
        redis, redis_port = start_redis(workdir)
        procs.append(redis)
        rules = RULES.format(per_second=args.per_second, per_day=args.per_day)
        sluiced, port = start_sluiced(args.sluiced, workdir, rules, redis_port)
        procs.append(sluiced)
        log = os.path.join(workdir, "calls.log")
        open(log, "w").close()
        started = time.time()  # The clock of the workers' marks ($EPOCHREALTIME).
        workers = [subprocess.Popen([os.path.join(HERE, "worker.sh"), str(i),
                                     f"http://127.0.0.1:{port}", log, args.sluice])
                   for i in range(args.workers)]
        procs.extend(workers)
        budget = args.per_day / args.per_second + 35  # The day's calls, then one max_wait.
        deadline = time.monotonic() + budget
        for worker in workers:
            worker.wait(timeout=max(1, deadline - time.monotonic()))
        used = daily_count(port, args.per_day)
        calls, stops = [], {}
        with open(log) as f:
            for line in f:
                parts = line.split()
                if parts[1] == "call":
                    calls.append((float(parts[2]), int(parts[0])))
                else:
                    stops[int(parts[0])] = int(parts[2])
        with open(log + ".stderr") as f:
            stderr = f.read()
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    calls.sort()
    times = [t for t, _ in calls]
    gaps = [b - a for a, b in zip(times, times[1:])]
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    # The k-th call cannot have been granted before k - 1 intervals after the start (burst 1),
    # and a worker marks its call only after the grant: how far the earliest call ran ahead of
    # that pace (0 or less when it never did), whatever delays the workers' marks had.
    interval = 1.0 / args.per_second
    ahead = max(((k * interval - (t - started)) for k, t in enumerate(times)), default=0.0)
    figures = {
        "calls": len(calls),
        "ahead_of_pace_ms": ahead * 1000,
        "daily_count": used,
        "rate_per_second": (len(calls) - 1) / span if span > 0 else None,
        "span_s": span,
        "min_gap_ms": min(gaps) * 1000 if gaps else None,
        "max_gap_ms": max(gaps) * 1000 if gaps else None,
        "per_worker": {w: sum(1 for _, who in calls if who == w) for w in range(args.workers)},
        "stops": stops,
        "stderr": stderr.strip().splitlines()[-1:] if stderr.strip() else [],
    }
    if args.svg:
        os.makedirs(os.path.dirname(os.path.abspath(args.svg)), exist_ok=True)
        with open(args.svg, "w") as f:
            f.write(svg(calls, args))
    return figures


def svg(calls, args):
    """Calls over time: a lane per worker with a mark per call, and the count of all calls
    against the pace the rules set (a dashed line)."""
    width, lane, left, top = 900, 36, 90, 30
    height = top + lane * args.workers + 200 + 40
    start = calls[0][0] if calls else 0
    span = max(1.0, (calls[-1][0] - start) if calls else 1.0)
    x = lambda t: left + (t - start) / span * (width - left - 20)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<text x="{left}" y="18">{len(calls)} calls by {args.workers} workers sharing '
           f'{args.per_second}/s and {args.per_day}/day (leaky_bucket, burst 1)</text>']
    for w in range(args.workers):
        y = top + w * lane
        out.append(f'<text x="10" y="{y + lane / 2 + 4}">worker {w}</text>')
        out.append(f'<line x1="{left}" y1="{y + lane / 2}" x2="{width - 20}" y2="{y + lane / 2}" '
                   'stroke="#ddd"/>')
        for t, who in calls:
            if who == w:
                out.append(f'<rect x="{x(t) - 1:.1f}" y="{y + 6}" width="2" height="{lane - 12}" '
                           'fill="#2a7"/>')
    base = top + lane * args.workers + 200
    out.append(f'<text x="10" y="{base - 100}">calls</text>')
    points = " ".join(f"{x(t):.1f},{base - (i + 1) / max(1, len(calls)) * 180:.1f}"
                      for i, (t, _) in enumerate(calls))
    out.append(f'<polyline points="{points}" fill="none" stroke="#2a7" stroke-width="2"/>')
    ideal_end = start + (len(calls) - 1) / args.per_second
    out.append(f'<line x1="{x(start):.1f}" y1="{base - 180 / max(1, len(calls)):.1f}" '
               f'x2="{x(ideal_end):.1f}" y2="{base - 180:.1f}" stroke="#555" '
               'stroke-dasharray="4 4"/>')
    out.append(f'<text x="{left}" y="{base + 20}">0 s</text>')
    out.append(f'<text x="{width - 80}" y="{base + 20}">{span:.2f} s</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sluiced", default=os.path.join(ROOT, "build", "bin", "sluiced"))
    parser.add_argument("--sluice", default=os.path.join(ROOT, "build", "bin", "sluice"))
    parser.add_argument("--per-second", type=int, default=5)
    parser.add_argument("--per-day", type=int, default=100)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--svg", default=os.path.join(ROOT, "out", "workers.svg"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    figures = run(args)
    if args.json:
        print(json.dumps(figures))
        return
    print(f"calls made:           {figures['calls']} (sluiced's daily count: "
          f"{figures['daily_count']} of {args.per_day})")
    print(f"achieved rate:        {figures['rate_per_second']:.3f} per second "
          f"(target {args.per_second}; {figures['calls'] - 1} gaps over {figures['span_s']:.3f} s)")
    print(f"shortest gap:         {figures['min_gap_ms']:.1f} ms (1/N = {1000 / args.per_second:.0f} ms;"
          f" longest {figures['max_gap_ms']:.1f} ms)")
    print(f"calls per worker:     {figures['per_worker']}")
    print(f"workers' exit status: {figures['stops']} (75: told to come back tomorrow)")
    if figures["stderr"]:
        print(f"last word:            {figures['stderr'][0]}")
    print(f"plot:                 {args.svg}")


if __name__ == "__main__":
    main()
