"""The programs bench/peers/table.py runs, one call each, and what they print, parsed.

Each function runs one program once and returns {measure: value}; a program that cannot run
(its toolchain or build is missing) raises Skip with the reason, which table.py prints in place
of its figures. The peers print "name value unit" lines; our benchmarks print Google Benchmark's
JSON, sluice_memory_bench its line, bench/grpc/ab.sh and bench/http/run.sh their
own summaries, which are read here rather than measured again.
"""

import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GUAVA = "/usr/share/java/guava.jar"
GOPATH = "/usr/share/gocode"  # Debian's golang-golang-x-time-dev: no module proxy needed
INSTALL = "scripts/install-deps --bench"


class Skip(Exception):
    """A side that cannot run here; the message says why and what to install."""


def _run(cmd, cwd=None, env=None):
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return done.stdout


def _lines(text):
    """The peers' "name value unit" lines."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            out[parts[0]] = float(parts[1])
    return out


def build_peers(out_dir):
    """Compiles the Java and Go peers into out_dir and installs the Node one's package (npm ci);
    returns {peer: Skip or None}."""
    os.makedirs(out_dir, exist_ok=True)
    status = {}
    if not (shutil.which("javac") and os.path.exists(GUAVA)):
        status["java"] = Skip(f"no javac or {GUAVA} ({INSTALL})")
    else:
        _run(["javac", "-cp", GUAVA, "-d", out_dir, os.path.join(HERE, "java", "GuavaPeer.java")])
        status["java"] = None
    if not (shutil.which("go") and os.path.isdir(f"{GOPATH}/src/golang.org/x/time/rate")):
        status["go"] = Skip(f"no go or golang.org/x/time/rate under {GOPATH} ({INSTALL})")
    else:
        env = dict(os.environ, GOPATH=GOPATH, GO111MODULE="off")
        _run(["go", "build", "-o", os.path.join(out_dir, "xtime_peer"), "xtime_peer.go"],
             cwd=os.path.join(HERE, "go"), env=env)
        status["go"] = None
    node_dir = os.path.join(HERE, "node")
    if not (shutil.which("node") and shutil.which("npm")):
        status["node"] = Skip(f"no node or npm ({INSTALL})")
    else:
        if not os.path.isdir(os.path.join(node_dir, "node_modules", "rate-limiter-flexible")):
            _run(["npm", "ci", "--no-audit", "--no-fund"], cwd=node_dir)
        status["node"] = None
    return status


def java(out_dir, seconds, measures):
    return _lines(_run(["java", "-cp", f"{GUAVA}:{out_dir}", "GuavaPeer", "--seconds", str(seconds)]
                       + measures))


def go(out_dir, seconds, measures):
    return _lines(_run([os.path.join(out_dir, "xtime_peer"), "-seconds", str(seconds)] + measures))


def node(seconds, measures):
    return _lines(_run(["node", "--expose-gc", os.path.join(HERE, "node", "flexible_peer.js"),
                        "--seconds", str(seconds)] + measures))


def _binary(build_dir, name):
    path = os.path.join(build_dir, "bin", name)
    if not os.access(path, os.X_OK):
        raise Skip(f"no {path} (cmake --preset release && cmake --build build --target {name})")
    return path


def sluice_bench(build_dir, min_time, bench_filter):
    """Google Benchmark's items_per_second by benchmark name, '/real_time' taken out of the name:
    BM_HotKeyWithClock/threads:2."""
    out = _run([_binary(build_dir, "sluice_bench"), f"--benchmark_filter={bench_filter}",
                f"--benchmark_min_time={min_time}", "--benchmark_format=json"])
    benchmarks = json.loads(out)["benchmarks"]
    for b in benchmarks:
        if b.get("error_occurred"):  # A denial in a benchmark meant to admit every call, say.
            print(f"sluice_bench: {b['name']}: {b.get('error_message', 'error')}; its row is left out",
                  file=sys.stderr)
    return {b["name"].replace("/real_time", ""): b["items_per_second"]
            for b in benchmarks if "items_per_second" in b and not b.get("error_occurred")}


def sluice_bytes_per_key(build_dir):
    out = _run([_binary(build_dir, "sluice_memory_bench"), "gcra"])
    return {"bytes_per_key": float(re.search(r"([0-9.]+) bytes/key", out).group(1))}


def grpc(build_dir, seconds, peer_dir):
    """One round of bench/grpc/ab.sh: calls/s and server CPU µs per call of the reference on
    Redis (absent: a Skip in the result), sluiced on Redis and on memory."""
    sluiced = _binary(build_dir, "sluiced")
    env = dict(os.environ, LOAD=_binary(build_dir, "sluice_grpc_load"))
    if peer_dir:
        env["PEER"] = peer_dir
    peer = env.get("PEER", os.path.join(HERE, "..", "..", "..", "shared", "peers", "envoy-ratelimit"))
    has_peer = os.access(os.path.join(peer, "run.sh"), os.X_OK)
    cmd = [os.path.join(HERE, "..", "grpc", "ab.sh"), "--rounds", "1", "--duration", str(seconds)]
    done = subprocess.run(cmd + ([] if has_peer else ["--no-reference"]) + [f"sluiced={sluiced}"],
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ab.sh exited {done.returncode}: {done.stderr.strip()[-400:]}")
    result = {} if has_peer else {
        "reference-redis": Skip(f"no reference at {peer} (a clone does not have it; --peer DIR)")}
    # ab.sh's medians (stdout; one round: the run's own figures), "LABEL  N calls/s  U us
    # CPU/call", and its line per sluiced run (stderr), which adds sluice_grpc_load's errors.
    figures = r"^(\S+)\s+(\d+) calls/s\s+([0-9.]+) us CPU/call"
    for m in re.finditer(figures, done.stdout, re.M):
        result[m.group(1)] = {"calls/s": float(m.group(2)), "cpu_us": float(m.group(3)),
                              "errors": 0}
    for m in re.finditer(figures + r" \|.*?errors (\d+)", done.stderr, re.M):
        # Failed calls (a Redis deadline missed under load, say) are counted apart; rows.py
        # shows them beside the figures.
        if m.group(1) in result:
            result[m.group(1)]["errors"] = int(m.group(4))
    return result


def http(build_dir, duration, warmup):
    """One round of bench/http/run.sh: requests/s and p99 (ms) of nginx with 1 and 2 workers and
    sluiced with 1 and 2 loops, read from its table."""
    sluiced = _binary(build_dir, "sluiced")
    out = _run([os.path.join(ROOT, "bench", "http", "run.sh"), "--sluiced", sluiced, "--rounds",
                "1", "--duration", f"{duration}s", "--warmup", f"{warmup}s"])
    names = {"nginx return 204, 1 worker": "nginx1", "nginx return 204, 2 workers": "nginx2",
             "1 loop": "sluiced1", "2 loops": "sluiced2"}
    result = {}
    for line in out.splitlines():
        m = re.match(r"\s*1\s+(.*?)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+(\d+)", line)
        if not m:
            continue
        for text, key in names.items():
            if m.group(1).endswith(text):
                result[key] = {"requests/s": float(m.group(2)), "p99": float(m.group(4)),
                               "non2xx": int(m.group(5))}
    if len(result) != 4:
        raise RuntimeError(f"bench/http/run.sh: could not read its table:\n{out}")
    return result
