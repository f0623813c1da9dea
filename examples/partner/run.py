#!/usr/bin/env python3
"""A fleet of workers calling a partner whose real limit is lower than the rules say, and
drops halfway: once without telling sluiced what the partner answers, once with it.

    examples/partner/run.py [--seconds 40] [--workers 4] [--svg out/partner.svg] [--json]

The partner (a local HTTP server here) allows 60 calls per 10 s window for the first half of
each run and 30 after; the rules let the fleet make 10 per second (gcra, burst 5). It answers every call with
RateLimit and RateLimit-Policy headers (the IETF draft's), and a call over its limit with 429
and Retry-After. WORKERS threads take their turn through sluiced (POST /v1/acquire, the
Python client), call the partner, and in the second run tell sluiced what it answered
(Client.feedback). Prints, for each run, the partner's 429s per 1,000 calls (and after the
first) and the calls it accepted per second against its real limit; draws each run's calls
per second, accepted and refused, into the SVG.

--bare: a partner that says nothing but 429 (no headers, no Retry-After) and counts at a
smooth rate; the rule's `adaptive` rate (AIMD: cut to 0.8 on a 429, back from 1/s to 10/s in
2 minutes) learns its limit from its 429s alone.

Python 3 standard library only; needs sluiced built (build/bin/sluiced).
"""

import argparse
import http.server
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))

import sluice  # noqa: E402

WINDOW = 10.0  # The partner's and the rule's window, in seconds.
RULES = """domain: fleet
descriptors:
  - key: partner
    rate_limit: {requests_per_unit: 10, unit: second, algorithm: gcra, burst: 5,
                 feedback: {max_pause: 1m}}
  - key: bare
    rate_limit: {requests_per_unit: 10, unit: second, algorithm: gcra, burst: 5,
                 feedback: {pause: 0s, adaptive: {floor: 1, cut: 0.8, recover: 2m,
                                                  cooldown: 1s}}}
"""


class Partner:
    """Allows `limit()` calls per fixed window of WINDOW seconds (epoch-aligned, as most
    partners count); each answer says how many remain and when the window resets."""

    def __init__(self, limit, bare=False):
        self.limit = limit
        # A 429 alone: no headers, and a smooth rate (a gcra of limit/WINDOW, with a second's
        # worth as its burst).
        self.bare = bare
        self.tat = 0.0
        self.lock = threading.Lock()
        self.window = None
        self.count = 0
        self.calls = []  # (time, accepted)
        partner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                status, headers = partner.answer()
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "127.0.0.1", self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self):
        if self.bare:
            with self.lock:
                now = time.monotonic()
                interval = WINDOW / self.limit()
                accepted = self.tat - now <= 1.0 - interval
                if accepted:
                    self.tat = max(self.tat, now) + interval
                self.calls.append((now, accepted))
            return (200 if accepted else 429), []
        now = time.time()
        window = math.floor(now / WINDOW)
        with self.lock:
            if window != self.window:
                self.window, self.count = window, 0
            limit = self.limit()
            accepted = self.count < limit
            if accepted:
                self.count += 1
            self.calls.append((time.monotonic(), accepted))
            left = (window + 1) * WINDOW - now
            headers = [("RateLimit-Policy", '"partner";q=%d;w=%d' % (limit, WINDOW)),
                       ("RateLimit", '"partner";r=%d;t=%d' % (limit - self.count,
                                                              math.ceil(left)))]
        if not accepted:
            return 429, headers + [("Retry-After", str(math.ceil(left)))]
        return 200, headers

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def run(sluiced_port, seconds, workers, feedback, value, bare):
    """One run, from the start of the partner's next window: the partner's calls."""
    time.sleep(WINDOW - time.time() % WINDOW)
    start = time.monotonic()
    half = start + seconds / 2
    partner = Partner(lambda: 60 if time.monotonic() < half else 30, bare)
    client = sluice.Client("http://127.0.0.1:%d" % sluiced_port, timeout=30)
    limit = {"domain": "fleet", "descriptors": [{"bare" if bare else "partner": value}]}
    stop = start + seconds

    def worker():
        import http.client
        conn = http.client.HTTPConnection(*partner.url, timeout=30)
        while time.monotonic() < stop:
            left = stop - time.monotonic()
            d = client.acquire(max_wait=max(0.001, min(left, 30)), **limit)
            if not d.allowed or time.monotonic() >= stop:
                continue
            conn.request("GET", "/v1/orders")
            response = conn.getresponse()
            response.read()
            if feedback:
                client.feedback(response.status, response.getheaders(), **limit)
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    partner.close()
    client.close()
    return [(t - start, ok) for t, ok in partner.calls], seconds


def figures(calls, seconds):
    """429s per 1,000 calls (all, and after the first 429), and accepted calls per second
    against the partner's real limit: the run starts with a window and its half is a window's
    edge, so the partner could accept 60 per window, then 30 (4.5/s)."""
    denied = [i for i, (_, ok) in enumerate(calls) if not ok]
    after = calls[denied[0] + 1:] if denied else []
    accepted = sum(1 for _, ok in calls if ok)
    real = (60 * (seconds / 2) + 30 * (seconds / 2)) / WINDOW
    return {
        "calls": len(calls),
        "partner_429": len(denied),
        "per_1000": round(1000 * len(denied) / max(1, len(calls)), 1),
        "per_1000_after_first": round(1000 * max(0, len(denied) - 1) / max(1, len(after)), 1),
        "accepted": accepted,
        "accepted_per_s": round(accepted / seconds, 2),
        "real_limit_per_s": round(real / seconds, 2),
        "achieved_ratio": round(accepted / real, 3),
    }


def svg(runs, results, seconds, path):
    """One lane per run: each second's calls as a bar, accepted (blue) under 429 (orange)."""
    width, lane_h, left, top = 780, 150, 50, 34
    plot_w = width - left - 20
    top_rate = 12
    bar = plot_w / seconds
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
             'font-family="sans-serif" font-size="12">' % (width, top + 2 * (lane_h + 40) + 10),
             '<rect width="100%" height="100%" fill="white"/>',
             '<text x="%d" y="20" font-size="14">Calls to the partner each second: accepted '
             '<tspan fill="#1b6ac9">(blue)</tspan>, 429 <tspan fill="#d95f02">(orange)</tspan>'
             '</text>' % left]
    for lane, (name, calls) in enumerate(runs.items()):
        y0 = top + lane * (lane_h + 40) + 20
        base = y0 + lane_h
        r = results[name]
        parts.append('<text x="%d" y="%d" font-weight="bold">%s: %d calls, %d accepted, '
                     '%d got 429</text>' % (left, y0 - 6, name, r["calls"], r["accepted"],
                                            r["partner_429"]))
        for rate in range(0, top_rate + 1, 4):
            y = base - lane_h * rate / top_rate
            parts.append('<line x1="%d" x2="%d" y1="%g" y2="%g" stroke="#e4e4e4"/>'
                         '<text x="%d" y="%g" text-anchor="end">%d/s</text>'
                         % (left, left + plot_w, y, y, left - 4, y + 4, rate))
        for second in range(int(seconds)):
            inside = [ok for t, ok in calls if second <= t < second + 1]
            ok, no = sum(inside), len(inside) - sum(inside)
            x = left + second * bar
            h_ok = lane_h * min(ok, top_rate) / top_rate
            h_no = lane_h * min(no, top_rate - min(ok, top_rate)) / top_rate
            parts.append('<rect x="%g" y="%g" width="%g" height="%g" fill="#1b6ac9"/>'
                         % (x + 1, base - h_ok, bar - 2, h_ok))
            parts.append('<rect x="%g" y="%g" width="%g" height="%g" fill="#d95f02"/>'
                         % (x + 1, base - h_ok - h_no, bar - 2, h_no))
        for t in range(0, int(seconds) + 1, int(WINDOW)):
            x = left + t * bar
            parts.append('<line x1="%g" x2="%g" y1="%g" y2="%g" stroke="#888" '
                         'stroke-dasharray="3 3"/><text x="%g" y="%g" text-anchor="middle">'
                         '%ds</text>' % (x, x, y0, base, x, base + 14, t))
    parts.append("</svg>")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(parts))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=40,
                        help="each run's length: a multiple of 20 (two halves of whole windows)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--svg", default=os.path.join(ROOT, "out", "partner.svg"))
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--bare", action="store_true",
                        help="a partner that answers a 429 alone (no headers), at a smooth "
                             "rate: the rule's adaptive rate learns it")
    parser.add_argument("--sluiced", default=os.path.join(ROOT, "build", "bin", "sluiced"))
    args = parser.parse_args()
    if args.seconds <= 0 or args.seconds % (2 * WINDOW) != 0:
        parser.error("--seconds must be a positive multiple of %d" % (2 * WINDOW))
    workdir = tempfile.mkdtemp(prefix="sluice-partner-")
    rules = os.path.join(workdir, "rules.yaml")
    with open(rules, "w") as f:
        f.write(RULES)
    log = open(os.path.join(workdir, "sluiced.log"), "w")
    server = subprocess.Popen([args.sluiced, "--config", rules, "--http", "127.0.0.1:0",
                               "--grpc", "127.0.0.1:0"], stdout=log, stderr=subprocess.STDOUT)
    try:
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            with open(log.name) as f:
                found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", f.read())
                port = int(found.group(1)) if found else None
            time.sleep(0.05)
        if port is None:
            sys.exit("sluiced did not start: see %s" % log.name)
        results, runs = {}, {}
        for name, told in (("without feedback", False), ("with feedback", True)):
            calls, seconds = run(port, args.seconds, args.workers, told,
                                 "acme-" + name.split()[0], args.bare)
            runs[name] = calls
            results[name] = figures(calls, seconds)
        svg(runs, results, args.seconds, args.svg)
    finally:
        server.terminate()
        server.wait()
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print("The partner allows 6 calls/s, then 3/s from halfway (the rules say 10/s), %s; "
          "%d workers, %g s a run.\n"
          % ("smoothly, answering a 429 alone (the rule adapts its rate)" if args.bare
             else "60 then 30 per 10 s window, with RateLimit headers",
             args.workers, args.seconds))
    print("%-18s %7s %6s %10s %12s %10s %9s" % ("run", "calls", "429s", "429/1000",
                                               "after 1st", "accepted/s", "of limit"))
    for name, r in results.items():
        print("%-18s %7d %6d %10.1f %12.1f %10.2f %8.1f%%"
              % (name, r["calls"], r["partner_429"], r["per_1000"], r["per_1000_after_first"],
                 r["accepted_per_s"], 100 * r["achieved_ratio"]))
    print("\nPicture: %s" % args.svg)


if __name__ == "__main__":
    main()
