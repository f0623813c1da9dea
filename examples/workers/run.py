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
import math
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


def round_step(span, ticks):
    """A round step (1, 2 or 5 x 10^k) that puts at most `ticks` ticks over `span`."""
    step = 10 ** math.floor(math.log10(span / ticks)) if span > 0 else 1
    for m in (1, 2, 5, 10):
        if span / (step * m) <= ticks:
            return step * m
    return step * 10


def figure(value):
    """A tick's figure: 0.5, 2, 100."""
    return f"{value:g}"


def svg(calls, args):
    """Calls over time: a lane per worker with a mark per call, and under them the count of all
    calls against the pace the rules set (dashed, labelled), on one time axis in seconds."""
    width, left, right, lane, top = 900, 90, 30, 36, 50
    plot_h, gap = 200, 24
    lanes_h = lane * args.workers
    plot_top = top + lanes_h + gap
    plot_bottom = plot_top + plot_h
    height = plot_bottom + 56
    start = calls[0][0] if calls else 0.0
    span = max(1.0, (calls[-1][0] - start) if calls else 1.0)
    x = lambda t: left + (t - start) / span * (width - left - right)  # noqa: E731
    most = max(1, len(calls))
    y = lambda n: plot_bottom - n / most * plot_h  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="18" font-weight="bold">{len(calls)} calls by {args.workers} '
           f'workers sharing {args.per_second}/s and {args.per_day}/day (leaky_bucket, burst 1)'
           '</text>',
           f'<text x="{left}" y="36" fill="#333">a mark per call in its worker\'s lane; below, '
           'the calls made so far by all of them</text>']
    # The time axis: a grid through the lanes and the plot, figures in seconds under it.
    step = round_step(span, 10)
    for i in range(int(span / step + 1e-9) + 1):
        at = i * step
        out.append(f'<line x1="{x(start + at):.1f}" y1="{top}" x2="{x(start + at):.1f}" '
                   f'y2="{plot_bottom}" stroke="#eee"/>')
        out.append(f'<text x="{x(start + at):.1f}" y="{plot_bottom + 16}" text-anchor="middle" '
                   f'fill="#444" data-axis="x" data-value="{at:g}">{figure(at)}</text>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{plot_bottom + 40}" '
               'text-anchor="middle" class="axis-title" data-axis="x">'
               'time since the first call (s)</text>')
    for w in range(args.workers):
        mid = top + w * lane + lane / 2
        out.append(f'<text x="10" y="{mid + 4}">worker {w}</text>')
        out.append(f'<line x1="{left}" y1="{mid}" x2="{width - right}" y2="{mid}" stroke="#ddd"/>')
        for t, who in calls:
            if who == w:
                out.append(f'<rect x="{x(t) - 1:.1f}" y="{mid - lane / 2 + 6}" width="2" '
                           f'height="{lane - 12}" fill="#2a7"/>')
    # The count axis: round figures of calls, and its title.
    out.append(f'<rect x="{left}" y="{plot_top}" width="{width - left - right}" '
               f'height="{plot_h}" fill="none" stroke="#bbb"/>')
    count_step = max(1, round_step(most, 5))
    for n in range(0, most + 1, count_step):
        out.append(f'<text x="{left - 6}" y="{y(n) + 4:.1f}" text-anchor="end" fill="#444" '
                   f'data-axis="y" data-value="{n}">{n}</text>')
        out.append(f'<line x1="{left - 3}" y1="{y(n):.1f}" x2="{left}" y2="{y(n):.1f}" '
                   'stroke="#444"/>')
    out.append(f'<text class="axis-title" data-axis="y" text-anchor="middle" '
               f'transform="translate({left - 44},{(plot_top + plot_bottom) / 2}) rotate(-90)">'
               'calls made (all workers)</text>')
    # The count as a staircase: one step up at each call.
    path = [f"M{x(start):.1f},{y(0):.1f}"]
    for i, (t, _) in enumerate(calls):
        path.append(f"L{x(t):.1f},{y(i):.1f} L{x(t):.1f},{y(i + 1):.1f}")
    out.append(f'<path d="{" ".join(path)}" fill="none" stroke="#2a7" stroke-width="2" '
               'data-series="calls"/>')
    # The pace the rules set: the first call at once, then one every 1/N, drawn over the count.
    if calls:
        end = min(start + (len(calls) - 1) / args.per_second, start + span)
        n_end = 1 + (end - start) * args.per_second
        out.append(f'<line x1="{x(start):.1f}" y1="{y(1):.1f}" x2="{x(end):.1f}" '
                   f'y2="{y(n_end):.1f}" stroke="#000" stroke-width="1.5" '
                   'stroke-dasharray="6 4" data-series="pace"/>')
        # Its label under the line, a third of the way along: the line rises away from it, and
        # the count, a step at most under the line, stays above it.
        t_label = start + (end - start) / 3
        n_label = 1 + (t_label - start) * args.per_second
        out.append(f'<text x="{x(t_label) + 8:.1f}" y="{y(n_label) + 22:.1f}" '
                   f'data-series="pace">dashed: the rules\' pace, {args.per_second} per second '
                   f'(one call every {1000 / args.per_second:g} ms)</text>')
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
