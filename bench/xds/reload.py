#!/usr/bin/python3
"""Reloads by xDS under load: sluiced takes its rules (1,000 of them, one domain) from the test's
management server (tests/integration/xds_server.py) while sluice_grpc_load keeps 64
ShouldRateLimit calls in flight; three runs of the same length, one sitting:

  before  the 1,000-rule set in force, no push;
  during  a new version of the set (every limit changed but the one the load hits) pushed every
          --every seconds, each parsed, put in force and ACKed while the calls go on;
  after   no push again.

Prints each run's calls/s, p50, p99 and errors (every run must have none), the versions taken
(ACKed) and refused, and the time from a push to its ACK (p50, max). A 3-second warm-up run
before them is not reported (the store's keys are made there).

    PYTHONPATH=build/python_proto:tests/integration /usr/bin/python3 bench/xds/reload.py \\
        --build build [--seconds 10] [--every 0.2] [--rules 1000]
"""

import argparse
import os
import re
import subprocess
import sys
import threading
import time

import sluiced
import xds_server


def rule_set(version, rules):
    descriptors = [{"key": "user", "rate_limit": {"unit": "second",
                                                   "requests_per_unit": 1_000_000_000}}]
    descriptors += [{"key": "k%d" % i, "rate_limit": {"unit": "minute",
                                                       "requests_per_unit": 1000 + version}}
                    for i in range(rules - 1)]
    return [xds_server.config("bench", "bench", descriptors)]


def load(build, port, seconds):
    out = subprocess.run(
        [os.path.join(build, "bin", "sluice_grpc_load"), "--target", "127.0.0.1:%d" % port,
         "--domain", "bench", "--duration", str(seconds)], capture_output=True, text=True,
        check=True).stdout
    found = re.search(r"([\d.]+) calls/s, p50 ([\d.]+) ms, p99 ([\d.]+) ms, errors (\d+)", out)
    if not found:
        raise SystemExit("sluice_grpc_load said: " + out)
    return float(found[1]), float(found[2]), float(found[3]), int(found[4])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default="build")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--every", type=float, default=0.2)
    parser.add_argument("--rules", type=int, default=1000)
    args = parser.parse_args()

    server = xds_server.ManagementServer()
    server.push("v0", rule_set(0, args.rules))
    http_port, grpc_port = sluiced.free_port(), sluiced.free_port()
    proc = subprocess.Popen(
        [os.path.join(args.build, "bin", "sluiced"), "--xds", "127.0.0.1:%d" % server.port,
         "--http", "127.0.0.1:%d" % http_port, "--grpc", "127.0.0.1:%d" % grpc_port],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        server.wait_for(lambda r: server.acks("v0"), what="the first set's ACK")
        for line in proc.stderr:  # Serving once the gRPC listener says so.
            if "Envoy's rate limit API on grpc://" in line:
                break
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # Keep the pipe empty.
        load(args.build, grpc_port, 3)  # Warm-up, not reported: the store's keys made.
        runs = {"before": load(args.build, grpc_port, args.seconds)}

        pushed = {}
        stop = threading.Event()

        def pusher():
            version = 0
            while not stop.wait(args.every):
                version += 1
                pushed["v%d" % version] = time.monotonic()
                server.push("v%d" % version, rule_set(version, args.rules))
        thread = threading.Thread(target=pusher)
        thread.start()
        runs["during"] = load(args.build, grpc_port, args.seconds)
        stop.set()
        thread.join()
        last = "v%d" % len(pushed)
        server.wait_for(lambda r: server.acks(last) or server.nacks(), what="the last ACK")
        runs["after"] = load(args.build, grpc_port, args.seconds)
    finally:
        proc.terminate()
        proc.wait(30)
        server.stop()

    acked = {}
    for request, at in zip(server.requests, server.request_times):
        if request.response_nonce and not request.HasField("error_detail"):
            acked.setdefault(request.version_info, at)
    delays = sorted(acked[v] - pushed[v] for v in pushed if v in acked)
    print("%d rules; a push every %.1f s during the middle run; %d s per run" % (
        args.rules, args.every, args.seconds))
    print("%-7s %12s %9s %9s %7s" % ("run", "calls/s", "p50 ms", "p99 ms", "errors"))
    for name, (rate, p50, p99, errors) in runs.items():
        print("%-7s %12.0f %9.3f %9.3f %7d" % (name, rate, p50, p99, errors))
    print("versions pushed %d, taken (ACK) %d, refused (NACK) %d" % (
        len(pushed), sum(1 for v in pushed if v in acked), len(server.nacks())))
    if delays:
        print("push to ACK: p50 %.1f ms, max %.1f ms" % (
            1000 * delays[len(delays) // 2], 1000 * delays[-1]))
    return 0 if all(run[3] == 0 for run in runs.values()) and not server.nacks() else 1


if __name__ == "__main__":
    sys.exit(main())
