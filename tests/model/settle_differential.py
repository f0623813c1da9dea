#!/usr/bin/env python3
"""Settle differential: a store's settles against the independent model's
(spec_model_settle.SettlingLimiter) on seeded random traces of charges, settles and resets.

    python3 tests/model/settle_differential.py --driver build/bin/sluice_settle_simulate
        [--memcached] [--seed S] [--traces T] [--only I] [-v]

The driver (tests/model/settle_simulate.cc) replays each trace through a MemoryStore, or with
--memcached through a MemcachedStore on a memcached this script starts (Debian's `memcached`
on the PATH), at each row's own time, and writes every figure: each charge's decision and its
Charge (at, units, ahead), each settle's given_back, charged and the five figures after it,
or `already` for a `once` claimed before. Every one is compared with the model's:
the decisions figure for figure; the charge's units, and its time (windows) or its TAT
(buckets: the model's tat1 is the C++ `at * N' + ahead` scaled by gcd(N, P)); the settles'.

Limits and times are drawn as differential.py draws them within the memory store's bounds
(sliding_log up to 10,000, times before 2200). A settle's max_debt that the store's encoding
cannot hold (MemoryStore's MaxDebt) is answered `invalid` by the store; it is then left out
of the model too, and counted (most settles must be valid). `once` ids are replayed before
their once_until only (Memcached's claims expire on its own clock, not the trace's).

Case i comes from random.Random(f"{seed}:settle:{i}"); `--seed S --only I` replays it. The
last line is `N passed, M failed`; the exit status is 0 only if M == 0.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import differential  # noqa: E402
from spec_model_settle import Charge, SettlingLimiter  # noqa: E402

INT64_MAX = 2**63 - 1
HEADER = "op,time_us,key,cost,charge_row,max_debt,once,once_until"


def gen_ops(rng, case):
    """The trace: charges, settles of an earlier charge (or of none) below, at or above it,
    some with a `once` (and some of those replayed), and resets, over the case's rows' times
    and keys."""
    N, B = case["N"], case["B"] if case["B"] is not None else case["N"]
    cap = max(N, B)
    ops = []
    charge_rows = []
    onces = []
    for t, key, cost in case["rows"]:
        r = rng.random()
        if r < 0.55 or not charge_rows:
            ops.append(("charge", t, key, cost, -1, 0, "-", 0))
            charge_rows.append((len(ops) - 1, key, cost))
            continue
        if r < 0.92:
            row, ckey, ccost = rng.choice(charge_rows[-5:])
            if rng.random() < 0.2:
                row, ckey = -1, key  # nothing charged: a settle of a pure extra
            choice = rng.random()
            if choice < 0.25:
                units = ccost
            elif choice < 0.55:
                units = rng.randint(0, max(0, ccost))
            else:
                units = ccost + rng.randint(1, max(1, min(cap, 10**6)))
            if case["algorithm"] == "sliding_log":
                D = rng.randint(0, differential.MEMCACHED_MAX_SLIDING_LOG - N)
            else:
                D = rng.choice([0, rng.randint(0, N), rng.randint(0, 3 * N)])
            once, until = "-", 0
            if rng.random() < 0.3:
                once, until = f"o{case['index']}.{len(ops)}", t + 10**12
                onces.append((once, until, ckey, units, row, D))
            ops.append(("settle", t, ckey, units, row, D, once, until))
            if onces and rng.random() < 0.1:  # a replay, before its once_until
                once, until, okey, ounits, orow, oD = rng.choice(onces)
                ops.append(("settle", t, okey, ounits, orow, oD, once, until))
            continue
        ops.append(("reset", t, key, 0, -1, 0, "-", 0))
    return ops


def model_rows(case, ops, store_rows):
    """The model's line for each op; a settle the store answered `invalid` is skipped in the
    model too (its line taken as the store's)."""
    lim = SettlingLimiter(case["algorithm"], case["N"], case["P"], case["B"], case["K"])
    charges = {}
    claims = {}
    out = []
    sat = lambda x: min(x, INT64_MAX)  # noqa: E731  (sluice's Decision saturates)

    def figures(d):
        return [1 if d.allowed else 0, d.remaining, sat(d.reset_after), sat(d.retry_after),
                sat(d.delay)]

    for i, (op, t, key, cost, row, D, once, until) in enumerate(ops):
        if op == "charge":
            d, c = lim.charge(key, t, cost)
            charges[i] = c
            out.append(["charge"] + figures(d) + [c])
        elif op == "settle":
            if i < len(store_rows) and store_rows[i] == ["settle", "invalid"]:
                out.append(["settle", "invalid"])
                continue
            if once != "-" and once in claims and t < claims[once]:
                out.append(["settle", "already"])
                continue
            if once != "-" and until > t:
                claims[once] = until
            c = charges.get(row, Charge(0, 0, 0)) if row >= 0 else Charge(0, 0, 0)
            s = lim.settle(key, t, c, cost, D)
            out.append(["settle", "ok", s.given_back, s.charged] + figures(s.after))
        else:
            lim.reset(key)
            out.append(["reset", "ok"])
    return out


def same_charge(case, model_charge, cells):
    """The store's charge cells (at, units, ahead) against the model's Charge."""
    at, units, ahead = (int(x) for x in cells)
    if units != model_charge.units:
        return False
    if units == 0:
        return True
    if case["algorithm"] in ("token_bucket", "gcra", "leaky_bucket"):
        N, P = case["N"], case["P"]
        g = math.gcd(N, P)
        return model_charge.tat1 == g * (at * (N // g) + ahead)
    return at == model_charge.at


def compare(case, ops, store_rows):
    """The first row where the store and the model differ, as (index, want, got), or None."""
    want = model_rows(case, ops, store_rows)
    for i, (w, g) in enumerate(zip(want, store_rows)):
        if w[0] == "charge" and g[0] == "charge":
            if [str(x) for x in w[1:6]] != g[1:6] or not same_charge(case, w[6], g[6:9]):
                return i, w, g
        elif [str(x) for x in w] != g:
            return i, w, g
    if len(want) != len(store_rows):
        return min(len(want), len(store_rows)), None, None
    return None


class Runner:
    def __init__(self, args, address):
        self.args, self.address = args, address
        self.passed = self.failed = self.rejected = 0
        self.invalid = self.settles = self.refunds = self.debts = self.already = 0
        self.tmp = tempfile.mkdtemp(prefix="sluice-settle-diff-")

    def run_case(self, i):
        bounds = (differential.MEMCACHED_MAX_SLIDING_LOG, differential.MEMCACHED_T_CAP)
        case = differential.gen_case(self.args.seed, i, bounds)
        case["columns"] = 3
        rng = random.Random(f"{self.args.seed}:settle:{i}")
        ops = gen_ops(rng, case)
        trace = os.path.join(self.tmp, f"case{i}.csv")
        with open(trace, "w") as f:
            f.write(HEADER + "\n")
            for op in ops:
                f.write(",".join(str(x) for x in op) + "\n")
        cmd = [self.args.driver]
        if self.address:
            cmd += ["--memcached", self.address, "--prefix", f"s{self.args.seed}-{i}:"]
        cmd += differential.command("-", case, trace)[2:]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode == 2 and (differential.range_too_big(case) or "must" in p.stderr
                                  or "keeps" in p.stderr or "at most" in p.stderr):
            self.rejected += 1  # a limit the store refuses (its bounds), as differential.py
            return
        rows = [line.split(",") for line in p.stdout.splitlines()]
        diff = compare(case, ops, rows) if p.returncode == 0 else (len(rows), None, None)
        if diff is None:
            self.passed += 1
            self.count(rows)
            return
        self.failed += 1
        j, w, g = diff
        print(f"FAIL {differential.describe(case)} seed {self.args.seed}")
        print(f"  row {j}: {ops[j] if j < len(ops) else '(end)'}")
        print(f"  model: {w}\n  store: {g}\n  exit {p.returncode}: {p.stderr.strip()[:300]}")

    def count(self, rows):
        for r in rows:
            if r[0] != "settle":
                continue
            if r[1] == "invalid":
                self.invalid += 1
            elif r[1] == "already":
                self.already += 1
            else:
                self.settles += 1
                self.refunds += int(r[2]) > 0
                self.debts += r[4] == "0"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--driver", required=True, help="build/bin/sluice_settle_simulate")
    ap.add_argument("--memcached", action="store_true", help="through a MemcachedStore")
    ap.add_argument("--seed", type=int, default=None, help="default: time-based")
    ap.add_argument("--traces", type=int, default=300)
    ap.add_argument("--only", type=int, action="append", help="run only this case (repeatable)")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = int(time.time() * 1000) % 10**9
    print(f"seed {args.seed}")
    if not os.path.exists(args.driver):
        print(f"no such binary: {args.driver}\n0 passed, 1 failed")
        return 1
    indices = args.only if args.only else range(args.traces)
    start = time.time()
    if args.memcached:
        try:
            with differential.Memcached() as server:
                run = Runner(args, server.address)
                for i in indices:
                    run.run_case(i)
        except (OSError, RuntimeError) as e:
            print(f"cannot run memcached: {e}\n0 passed, 1 failed")
            return 1
    else:
        run = Runner(args, None)
        for i in indices:
            run.run_case(i)
    print(f"settles: {run.settles} ok ({run.refunds} gave back, {run.debts} left the key "
          f"denying), {run.already} replays refused, {run.invalid} debts the store cannot "
          f"hold; {run.rejected} limits refused")
    if not args.only and (run.settles < 10 * max(1, run.invalid) or run.refunds == 0
                          or run.debts == 0 or run.already == 0):
        run.failed += 1
        print("FAIL the traces settled too little (or too few valid debts) to mean anything")
    print(f"({time.time() - start:.1f} s)")
    print(f"{run.passed} passed, {run.failed} failed")
    return 0 if run.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
