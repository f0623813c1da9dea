#!/usr/bin/env python3
"""Differential test: `sluice simulate` against the independent reference model
(spec_model.py) on seeded random traces.

    python3 tests/model/differential.py --sluice build/bin/sluice [--seed S] [--traces T]
                                        [--only I] [--keep DIR] [--no-errors] [-v]
    python3 tests/model/differential.py --memcached build/bin/sluice_memcached_simulate [...]

With --memcached DRIVER (build/bin/sluice_memcached_simulate) the traces are decided by the
Memcached store instead: the driver feeds each row through a MemcachedStore at the row's time,
on a memcached this script starts on a free loopback port (Debian's `memcached` on the PATH),
and writes the decisions as `sluice simulate` does. The store keeps each state in memcached
between rows, so this checks its items and its gets/cas path against the model, not the same
`Decide` twice. Its sliding_log limits and trace times are drawn within the store's bounds
(MemoryStore::kMaxSlidingLogLimit, times before 2200), and its figures saturate at int64
microseconds (sluice's Decision) where the model's exceed them; the error cases (the trace
reader, shared with `sluice simulate`) are not repeated.

Every case i is generated from random.Random(f"{seed}:{i}"), so one failing case can be
replayed alone with `--seed S --only I`.  Failing traces are kept (under --keep, default a
fresh temporary directory whose path is printed).  The last line is `N passed, M failed`;
the exit status is 0 only if M == 0.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spec_model  # noqa: E402

ALGORITHMS = spec_model.ALGORITHMS
HEADER = spec_model.OUTPUT_HEADER
FIELDS = HEADER.split(",")

US = 1
MS = 1000
SEC = 1_000_000
MIN = 60 * SEC
HOUR = 60 * MIN
DAY = 24 * HOUR
MAX_P = 400 * DAY
MAX_N = 10**9
MAX_B = 10**9
T_CAP = 10**17  # keep trace times far from int64 overflow of (w+2)*P etc.
EPOCH_NOW = 1_700_000_000_000_000
# The Memcached store's bounds (it keeps the memory store's compact states): sliding_log limits
# up to MemoryStore::kMaxSlidingLogLimit, times before MemoryStore::kLatest (2200-01-01).
MEMCACHED_MAX_SLIDING_LOG = 10_000
MEMCACHED_T_CAP = 7_258_118_400_000_000 - 1000


# ---------------------------------------------------------------------------------------
# case generation
# ---------------------------------------------------------------------------------------
def log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    """An integer in [lo, hi], roughly uniform in magnitude."""
    import math

    x = math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))
    return max(lo, min(hi, int(x)))


def gen_limit(rng):
    r = rng.random()
    if r < 0.35:
        return rng.randint(1, 5)
    if r < 0.70:
        return log_uniform(rng, 6, 1000)
    if r < 0.90:
        return log_uniform(rng, 1001, MAX_N)
    return rng.choice([MAX_N, MAX_N - 1, 10**6, 2**31 - 1, 999_999_937])


def gen_period(rng):
    r = rng.random()
    if r < 0.25:  # 1us .. a few ms
        return rng.choice([1, 2, 3, 7, 10, 100, 250, 1000]) if rng.random() < 0.4 \
            else rng.randint(1, 5 * MS)
    if r < 0.55:  # seconds
        p = rng.randint(1, 60) * SEC
        return p if rng.random() < 0.7 else p + rng.randint(-SEC // 2, SEC // 2)
    if r < 0.80:  # minutes, hours
        p = rng.choice([MIN, 5 * MIN, 15 * MIN, HOUR, rng.randint(1, 24) * HOUR])
        return p if rng.random() < 0.7 else p + rng.randint(1, MIN)
    # long: days, up to 400 days
    p = rng.choice([DAY, 7 * DAY, 30 * DAY, 365 * DAY, MAX_P, rng.randint(1, MAX_P)])
    return p if rng.random() < 0.8 else max(1, p - rng.randint(0, HOUR))


def gen_buckets(rng, P):
    """sliding_buckets: (K, whether --buckets is passed, P rounded to a multiple of K)."""
    pass_k = rng.random() < 0.7
    if pass_k:
        K = rng.choice([1, 2, 3, 4, 5, 6, 10, 12, 24, 60, 100, 1000, rng.randint(1, 200)])
    else:
        K = 60  # the default
    P = max(1, P // K) * K
    if P > MAX_P:
        P = (MAX_P // K) * K
    return K, pass_k, P


def gen_burst(rng, N):
    """A burst B for token_bucket, gcra or leaky_bucket."""
    r = rng.random()
    if r < 0.5:
        B = rng.randint(1, 2 * N) if N < 10**6 else log_uniform(rng, 1, min(2 * N, MAX_B))
    elif r < 0.7:
        B = 1
    elif r < 0.85:
        B = rng.choice([MAX_B, 10**6, 1000])
    else:
        B = log_uniform(rng, 1, MAX_B)
    return min(B, MAX_B)


def gen_period_flag(rng, P):
    # period flag: mostly "<P>us", sometimes a coarser exact unit
    period_flag = f"{P}us"
    if rng.random() < 0.1:
        for unit, mult in (("d", DAY), ("h", HOUR), ("m", MIN), ("s", SEC), ("ms", MS)):
            if P % mult == 0:
                period_flag = f"{P // mult}{unit}"
                break
    return period_flag


def gen_rows(rng, N, P, cap, t_cap=T_CAP):
    """The trace: (time, key, cost) rows on 1 to 3 keys, with steps from 0 to far beyond P, at
    times below t_cap."""
    nrows = rng.choice([1, 2, 3, rng.randint(1, 20), rng.randint(1, 200), rng.randint(100, 200)])
    t = EPOCH_NOW + rng.randint(0, 10**14) if rng.random() < 0.8 else rng.randint(0, 10**6)
    if rng.random() < 0.3 and t > P:  # start exactly on (or next to) a window edge
        t = (t // P) * P + rng.choice([0, 0, -1, 1])
    nkeys = rng.randint(1, 3)
    keys = rng.choice([["alice", "bob", "carol"], ["k1", "k2", "k3"], ["user:1", "u_2", "x"]])
    keys = keys[:nkeys]
    per_unit = -(-P // N)  # ceil(P/N)
    rows = []
    for _ in range(nrows):
        rows.append((t, rng.choice(keys), gen_cost(rng, N, cap)))
        r = rng.random()
        if r < 0.25:
            inc = 0
        elif r < 0.35:
            inc = 1
        elif r < 0.50:
            inc = rng.randint(1, 100)
        elif r < 0.70:
            inc = max(0, per_unit + rng.randint(-2, 2)) if rng.random() < 0.5 \
                else rng.randint(0, 3 * per_unit)
        elif r < 0.85:
            inc = max(0, P + rng.randint(-2, 2)) if rng.random() < 0.6 else P * rng.randint(1, 3)
        elif r < 0.95:
            inc = rng.randint(0, P)
        else:
            inc = rng.choice([rng.randint(0, 1000 * P), rng.randint(0, 400 * DAY),
                              rng.randint(0, 10**15)])
        if t + inc >= t_cap:
            inc = rng.randint(0, 100)
        t += inc
    return rows


def gen_columns(rng, rows):
    """(columns, rows): all three columns, or occasionally only the first one or two."""
    # occasionally omit the optional columns
    columns = 3
    if rng.random() < 0.05:
        columns = rng.choice([1, 2])
        if columns == 1:
            rows = [(t_, "-", 1) for (t_, _, _) in rows]
        else:
            rows = [(t_, k, 1) for (t_, k, _) in rows]
    return columns, rows


def gen_case(seed, i, bounds=None):
    """Case i of the seed. bounds: (the largest sliding_log limit, the time cap) of a backend
    with narrower ranges than `sluice simulate`'s; a larger sliding_log N is drawn again below
    it (the draw happens only then, so that without bounds every case is the one earlier
    versions generated), and the trace's times stay below the cap."""
    max_sliding_log, t_cap = bounds if bounds is not None else (None, T_CAP)
    rng = random.Random(f"{seed}:{i}")
    alg = rng.choice(ALGORITHMS)
    N = gen_limit(rng)
    if alg == "sliding_log" and max_sliding_log is not None and N > max_sliding_log:
        N = log_uniform(rng, 1, max_sliding_log)
    P = gen_period(rng)
    B = None
    K = None
    pass_k = False
    if alg == "sliding_buckets":
        K, pass_k, P = gen_buckets(rng, P)
    if alg in ("token_bucket", "gcra", "leaky_bucket") and rng.random() < 0.6:
        B = gen_burst(rng, N)
    cap = N if B is None else B
    if alg not in ("token_bucket", "gcra", "leaky_bucket"):
        cap = N
    period_flag = gen_period_flag(rng, P)
    rows = gen_rows(rng, N, P, cap, t_cap)
    columns, rows = gen_columns(rng, rows)
    return {
        "index": i, "algorithm": alg, "N": N, "P": P, "B": B, "K": K, "pass_k": pass_k,
        "period_flag": period_flag, "rows": rows, "columns": columns,
    }


def gen_cost(rng, N, cap):
    r = rng.random()
    if r < 0.62:
        return 1
    if r < 0.70:
        return 0
    if r < 0.82:
        return rng.randint(2, max(2, min(cap, 10)))
    if r < 0.88:
        return rng.randint(1, cap)
    if r < 0.93:
        return rng.choice([cap, N, max(1, cap - 1)])
    return cap + rng.choice([1, 1, 2, rng.randint(1, 10**9)])


# ---------------------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------------------
def write_trace(path, rows, columns=3, raw_lines=None):
    with open(path, "w", newline="") as f:
        f.write(["time_us", "time_us,key", "time_us,key,cost"][columns - 1] + "\n")
        if raw_lines is not None:
            for line in raw_lines:
                f.write(line + "\n")
            return
        for t, k, c in rows:
            f.write([f"{t}", f"{t},{k}", f"{t},{k},{c}"][columns - 1] + "\n")


def command(sluice, case, trace, memcached=None):
    """`sluice simulate` of the case; with memcached (the driver, the server's HOST:PORT and
    the seed), the driver's command, its items under a prefix of their own."""
    if memcached is None:
        cmd = [sluice, "simulate"]
    else:
        driver, address, seed = memcached
        cmd = [driver, "--memcached", address, "--prefix", f"d{seed}-{case['index']}:"]
    cmd += ["--algorithm", case["algorithm"], "--limit", str(case["N"]),
            "--period", case["period_flag"]]
    if case["B"] is not None:
        cmd += ["--burst", str(case["B"])]
    if case["pass_k"]:
        cmd += ["--buckets", str(case["K"])]
    cmd.append(trace)
    return cmd


INT64_MAX = 2**63 - 1


def range_too_big(case):
    """True when a figure of the case cannot fit int64 microseconds: for token_bucket, gcra and
    leaky_bucket, reset_after (and retry_after) reach ceil(B*P/N)."""
    if case["algorithm"] not in ("token_bucket", "gcra", "leaky_bucket"):
        return False
    B = case["B"] if case["B"] is not None else case["N"]
    return -(-B * case["P"] // case["N"]) > INT64_MAX


def describe(case):
    return (f"case {case['index']}: algorithm={case['algorithm']} N={case['N']} "
            f"P={case['P']}us B={case['B'] if case['B'] is not None else '(default N)'} "
            f"K={case['K'] if case['algorithm'] == 'sliding_buckets' else '-'}"
            f"{'' if case['pass_k'] or case['algorithm'] != 'sliding_buckets' else ' (default)'}"
            f" rows={len(case['rows'])} columns={case['columns']}")


def expected_rows(case, saturate=False):
    """The model's rows; with saturate, each time figure above int64 microseconds written as
    INT64_MAX, as sluice's Decision holds it (sluice/algorithms.h's Narrow)."""
    out = spec_model.simulate(case["rows"], case["algorithm"], case["N"], case["P"],
                              case["B"], case["K"])
    if saturate:
        times = [FIELDS.index(f) for f in ("reset_after_us", "retry_after_us", "delay_us")]
        out = [[min(x, INT64_MAX) if j in times else x for j, x in enumerate(r)] for r in out]
    return [[str(x) for x in r] for r in out]


def parse_output(stdout):
    lines = stdout.splitlines()
    if not lines:
        return None, []
    return lines[0].rstrip("\r"), [ln.rstrip("\r").split(",") for ln in lines[1:] if ln != ""]


def first_diff(exp, got):
    for j, (e, g) in enumerate(zip(exp, got)):
        if e != g:
            return j
    if len(exp) != len(got):
        return min(len(exp), len(got))
    return None


def fmt_row(r):
    return ",".join(r) if r is not None else "(missing)"


class Runner:
    def __init__(self, args, memcached_address=None):
        self.args = args
        self.sluice = args.sluice
        # (driver, HOST:PORT, seed) when the Memcached store decides; None for `sluice simulate`.
        self.memcached = (None if memcached_address is None
                          else (args.memcached, memcached_address, args.seed))
        self.by_algorithm = {alg: 0 for alg in ALGORITHMS}
        self.passed = 0
        self.failed = 0
        self.rejected = 0
        self.keep = args.keep or tempfile.mkdtemp(prefix="sluice-diff-")
        os.makedirs(self.keep, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="sluice-diff-run-")
        self.kept_any = False

    def keep_trace(self, src, name):
        dst = os.path.join(self.keep, name)
        with open(src) as f, open(dst, "w") as g:
            g.write(f.read())
        self.kept_any = True
        return dst

    def fail(self, header, lines):
        self.failed += 1
        print(f"FAIL (seed {self.args.seed}) {header}")
        for ln in lines:
            print("    " + ln)
        sys.stdout.flush()

    def run_case(self, case):
        trace = os.path.join(self.tmp, f"case-{case['index']}.csv")
        write_trace(trace, case["rows"], case["columns"])
        cmd = command(self.sluice, case, trace, self.memcached)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            kept = self.keep_trace(trace, f"seed{self.args.seed}-case{case['index']}.csv")
            self.fail(describe(case), ["timeout (60 s)", "command: " + shlex.join(cmd[:-1] + [kept])])
            return
        except OSError as e:  # e.g. the binary is being relinked
            self.fail(describe(case), [f"cannot run the binary: {e}"])
            return
        binary = (f"--memcached {shlex.quote(self.args.memcached)}" if self.memcached
                  else f"--sluice {shlex.quote(self.sluice)}")
        replay = (f"replay: python3 {shlex.quote(sys.argv[0])} {binary}"
                  + f" --seed {self.args.seed} --only {case['index']}")
        if p.returncode != 0:
            within = (case["N"] <= MAX_N and (case["B"] or 0) <= MAX_B and case["P"] <= MAX_P)
            if p.returncode == 2:
                # the spec allows rejecting limits whose products a backend cannot represent,
                # but not within N, B <= 1e9, P <= 400 days (all generated cases are)
                self.rejected += 1
                print(f"rejected (seed {self.args.seed}) {describe(case)}: {p.stderr.strip()[:200]}")
                if not within or (self.args.accept_range_rejects and range_too_big(case)):
                    self.passed += 1
                    return
                what = "REJECTED (exit 2) a limit within N,B <= 1e9, P <= 400 days"
            else:
                what = f"exit status {p.returncode}"
            kept = self.keep_trace(trace, f"seed{self.args.seed}-case{case['index']}.csv")
            self.fail(describe(case), [what, "stderr: " + p.stderr.strip()[:500],
                                       "command: " + shlex.join(cmd[:-1] + [kept]), replay])
            return
        header, got = parse_output(p.stdout)
        exp = expected_rows(case, saturate=self.memcached is not None)
        problems = []
        if header != HEADER:
            problems.append(f"header: expected {HEADER!r} got {header!r}")
        j = first_diff(exp, got)
        if j is not None:
            e = exp[j] if j < len(exp) else None
            g = got[j] if j < len(got) else None
            fields = []
            if e is not None and g is not None:
                fields = [FIELDS[x] if x < len(FIELDS) else f"#{x}"
                          for x in range(max(len(e), len(g)))
                          if (e[x] if x < len(e) else None) != (g[x] if x < len(g) else None)]
            problems.append(f"first differing row: data row {j + 1} (file line {j + 2}) "
                            f"of {len(exp)} expected / {len(got)} got; differs in {fields}")
            problems.append("  input:    " + ",".join(str(x) for x in case["rows"][j])
                            if j < len(case["rows"]) else "  input: (none)")
            problems.append("  expected: " + fmt_row(e))
            problems.append("  got:      " + fmt_row(g))
            ndiff = sum(1 for a, b in zip(exp, got) if a != b) + abs(len(exp) - len(got))
            problems.append(f"  {ndiff} differing row(s) in total")
        if problems:
            kept = self.keep_trace(trace, f"seed{self.args.seed}-case{case['index']}.csv")
            self.fail(describe(case), problems + ["command: " + shlex.join(cmd[:-1] + [kept]),
                                                  replay])
        else:
            self.passed += 1
            self.by_algorithm[case["algorithm"]] += 1
            if self.args.verbose:
                print(f"ok   {describe(case)}")

    # -----------------------------------------------------------------------------------
    # error cases: exit status 2, the line named on stderr, no data rows from the bad one on
    # -----------------------------------------------------------------------------------
    def error_cases(self):
        T = EPOCH_NOW
        cases = [
            ("row going back in time (same key)",
             [f"{T},alice,1", f"{T + 10},alice,1", f"{T + 5},alice,1", f"{T + 20},alice,1"], 3),
            ("row going back in time (other key)",
             [f"{T},alice,1", f"{T + 10},bob,1", f"{T + 9},alice,1", f"{T + 20},bob,1"], 3),
            ("back in time by one microsecond, late in the trace",
             [f"{T + k},a,1" for k in range(6)] + [f"{T + 4},a,1", f"{T + 9},a,1"], 7),
            ("malformed time",
             [f"{T},alice,1", f"{T}x,alice,1", f"{T + 1},alice,1"], 2),
            ("malformed time (first row)", ["12a4,alice,1", f"{T},alice,1"], 1),
            ("malformed cost",
             [f"{T},alice,1", f"{T + 1},alice,1", f"{T + 2},alice,1z", f"{T + 3},alice,1"], 3),
            ("malformed cost (decimal)",
             [f"{T},alice,1", f"{T + 1},alice,1.5", f"{T + 3},alice,1"], 2),
            ("negative cost",
             [f"{T},alice,1", f"{T + 1},alice,2", f"{T + 2},alice,-1", f"{T + 3},alice,1"], 3),
            ("negative cost (first row)", [f"{T},alice,-5", f"{T + 3},alice,1"], 1),
        ]
        for alg in ("fixed_window", "gcra"):
            for name, lines, bad in cases:
                self.error_case(f"{name} [{alg}]", alg, lines, bad)

    def error_case(self, name, alg, lines, bad):
        """bad: 1-based index of the bad data row; it is file line bad+1 (line 1 = header)."""
        trace = os.path.join(self.tmp, "error.csv")
        write_trace(trace, None, 3, raw_lines=lines)
        case = {"algorithm": alg, "N": 3, "P": SEC, "B": None, "K": None, "pass_k": False,
                "period_flag": "1s"}
        cmd = command(self.sluice, case, trace)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            self.fail(f"error case: {name}", [f"cannot run the binary: {e}"])
            return
        line_no = bad + 1
        problems = []
        if p.returncode != 2:
            problems.append(f"exit status {p.returncode}, expected 2")
        stderr = p.stderr.replace(trace, "TRACE")  # digits in the path must not count
        if not re.search(rf"(?<!\d){line_no}(?!\d)", stderr):
            problems.append(f"stderr does not name line {line_no} (header = line 1): "
                            f"{p.stderr.strip()[:300]!r}")
        header, got = parse_output(p.stdout)
        if len(got) > bad - 1:
            problems.append(f"{len(got)} data row(s) printed; at most {bad - 1} allowed "
                            f"(rows before the bad one)")
        if got:
            # rows printed before the error must be right
            good = [tuple(int(x) if i != 1 else x for i, x in enumerate(ln.split(",")))
                    for ln in lines[: bad - 1]]
            exp = [[str(x) for x in r]
                   for r in spec_model.simulate(good, alg, case["N"], case["P"])]
            if header != HEADER:
                problems.append(f"header {header!r}")
            for j, g in enumerate(got[: bad - 1]):
                if g != exp[j]:
                    problems.append(f"row {j + 1} before the error: expected {fmt_row(exp[j])} "
                                    f"got {fmt_row(g)}")
                    break
        if problems:
            kept = self.keep_trace(trace, f"error-{re.sub(r'[^a-z0-9]+', '_', name)}.csv")
            self.fail(f"error case: {name}", problems + ["command: " + shlex.join(cmd[:-1] + [kept]),
                                                         "stderr: " + p.stderr.strip()[:300]])
        else:
            self.passed += 1
            if self.args.verbose:
                print(f"ok   error case: {name}: stderr {p.stderr.strip()[:120]!r}")


class Memcached:
    """Debian's memcached on a free loopback port (no UDP), for --memcached; stopped on exit."""

    def __init__(self):
        self.proc = None
        self.port = None

    def __enter__(self):
        for _ in range(5):  # another process may take the port between the probe and the start
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.port = probe.getsockname()[1]
            user = "root" if os.geteuid() == 0 else os.environ.get("USER", "nobody")
            self.proc = subprocess.Popen(
                ["memcached", "-l", "127.0.0.1", "-p", str(self.port), "-U", "0", "-m", "64",
                 "-t", "1", "-u", user], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 60  # a watchdog: a loaded machine starts slowly
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    return self
                except OSError:
                    time.sleep(0.01)
            self.stop()
        raise RuntimeError("memcached did not start")

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def __exit__(self, *exc):
        self.stop()

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sluice", help="path to the sluice binary (not needed with --memcached)")
    ap.add_argument("--seed", type=int, default=None, help="default: time-based")
    ap.add_argument("--traces", type=int, default=300)
    ap.add_argument("--only", type=int, action="append",
                    help="run only this case index (repeatable); skips the error cases")
    ap.add_argument("--keep", help="directory for failing traces (default: a temp dir)")
    ap.add_argument("--no-errors", action="store_true", help="skip the error-case checks")
    ap.add_argument("--accept-range-rejects", action="store_true",
                    help="accept an exit-2 rejection of a limit whose ceil(B*P/N) (the largest "
                         "reset_after of token_bucket/gcra/leaky_bucket) exceeds int64 "
                         "microseconds, even within N,B <= 1e9, P <= 400 days")
    ap.add_argument("--memcached", metavar="DRIVER",
                    help="decide through the Memcached store: the path of "
                         "sluice_memcached_simulate (a memcached is started for the run)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = int(time.time() * 1000) % 10**9
    print(f"seed {args.seed}")
    sys.stdout.flush()
    if args.memcached is None and (args.sluice is None or not os.path.exists(args.sluice)):
        print(f"no such binary: {args.sluice}")
        print("0 passed, 1 failed")
        return 1
    if args.sluice is not None:
        args.sluice = os.path.abspath(args.sluice)
    start = time.time()
    if args.memcached is None:
        run = Runner(args)
        run_cases(run, args, None)
        if not args.only and not args.no_errors:
            run.error_cases()
    else:
        if not os.path.exists(args.memcached):
            print(f"no such binary: {args.memcached}")
            print("0 passed, 1 failed")
            return 1
        args.memcached = os.path.abspath(args.memcached)
        try:
            with Memcached() as server:
                run = Runner(args, server.address)
                run_cases(run, args, (MEMCACHED_MAX_SLIDING_LOG, MEMCACHED_T_CAP))
        except (OSError, RuntimeError) as e:  # no memcached on the PATH, or it did not start
            print(f"cannot run memcached: {e}")
            print("0 passed, 1 failed")
            return 1
        print("passed by algorithm: " + ", ".join(f"{a} {n}" for a, n in run.by_algorithm.items()))
        if not args.only and min(run.by_algorithm.values()) == 0:
            run.fail("algorithms", ["an algorithm the store supports had no passing trace"])
    if run.rejected:
        print(f"{run.rejected} case(s) rejected by the binary (exit 2)")
    shutil.rmtree(run.tmp, ignore_errors=True)
    if run.kept_any:
        print(f"failing traces kept in {run.keep}")
    elif not args.keep:
        os.rmdir(run.keep)
    print(f"({time.time() - start:.1f} s)")
    print(f"{run.passed} passed, {run.failed} failed")
    return 0 if run.failed == 0 else 1


def run_cases(run, args, bounds):
    indices = args.only if args.only else range(args.traces)
    for i in indices:
        run.run_case(gen_case(args.seed, i, bounds))


if __name__ == "__main__":
    sys.exit(main())
