#!/usr/bin/env python3
"""The self-test of the reference model (spec_model.py): each algorithm's figures worked out by
hand from the spec, a brute-force check of sliding_window's retry search, gcra against
token_bucket and leaky_bucket, and the invariants every algorithm keeps on random traces (a
denied request or a query changes no state; retry_after is exact).

    python3 spec_model.py --selftest    (or python3 spec_model_selftest.py)

Prints each failed check and a summary; exit status 0 only if every check passed.
"""

from __future__ import annotations

import copy
import random
import sys

from spec_model import ALGORITHMS, Decision, Limiter, SlidingWindow, ceil_div


def check_leaky_bucket(check) -> None:
    """leaky_bucket: the delays of a burst, the sixth request, remaining."""
    S1 = 1_000_000

    # leaky_bucket example: B=5, five at the same instant, delays 0, P/N, ..., 4P/N rounded up
    N, P, B = 3, S1, 5
    lim = Limiter("leaky_bucket", N, P, B)
    t = 1_700_000_000_000_000
    delays = [lim.decide("a", t).delay for _ in range(5)]
    check("leaky delays", delays, [ceil_div(i * P, N) for i in range(5)])
    check("leaky delays literal", delays, [0, 333334, 666667, 1000000, 1333334])
    d6 = lim.decide("a", t)
    check("leaky sixth", (d6.allowed, d6.delay), (False, 0))
    check("leaky sixth retry", d6.retry_after, ceil_div(P, N))  # backlog 6P, B*P = 5P
    check("leaky cost > B", lim.decide("a", t, 6).retry_after, -1)
    # after retry_after the sixth is admitted with delay = 4P/N rounded up... check:
    d = lim.decide("a", t + d6.retry_after)
    check("leaky sixth later allowed", d.allowed, True)
    # base - tN = 5P - N*ceil(P/N) = 5e6 - 1000002 = 3999998 -> ceil(/3) = 1333333
    check("leaky sixth later delay", d.delay, ceil_div(5 * P - N * ceil_div(P, N), N))
    # leaky remaining: 5 at once with B=5 -> remaining 4,3,2,1,0
    lim = Limiter("leaky_bucket", 10, S1, 5)
    check("leaky remaining", [lim.decide("k", 0).remaining for _ in range(6)],
          [4, 3, 2, 1, 0, 0])


def check_fixed_window(check) -> None:
    """fixed_window: 2N at a window edge, resets, retries, queries."""
    S1 = 1_000_000

    # fixed_window: 2N at a window edge
    N, P = 5, S1
    lim = Limiter("fixed_window", N, P)
    res = [lim.decide("a", 999_999) for _ in range(6)]
    check("fw first window allowed", [r.allowed for r in res], [True] * 5 + [False])
    check("fw remaining", [r.remaining for r in res], [4, 3, 2, 1, 0, 0])
    check("fw reset", res[0].reset_after, 1)
    check("fw retry", res[5].retry_after, 1)
    res = [lim.decide("a", 1_000_000) for _ in range(6)]
    check("fw second window allowed", [r.allowed for r in res], [True] * 5 + [False])
    check("fw second reset", res[0].reset_after, 1_000_000)
    check("fw second retry", res[5].retry_after, 1_000_000)
    check("fw cost>N", lim.decide("a", 1_000_000, 6).retry_after, -1)
    check("fw query", lim.decide("b", 5, 0), Decision(True, 5, 0, 0, 0))
    check("fw other key independent", lim.decide("b", 1_000_001).remaining, 4)


def check_sliding_log(check) -> None:
    """sliding_log: admissions, denials and what leaves when."""
    # sliding_log
    lim = Limiter("sliding_log", 3, 100)
    check("sl 1", lim.decide("a", 10), Decision(True, 2, 100, 0, 0))
    check("sl 2", lim.decide("a", 20, 2), Decision(True, 0, 100, 0, 0))
    check("sl deny", lim.decide("a", 50), Decision(False, 0, 70, 60, 0))  # 10 leaves at 110
    check("sl deny 2", lim.decide("a", 50, 2), Decision(False, 0, 70, 70, 0))  # both leave
    check("sl deny 3", lim.decide("a", 50, 4).retry_after, -1)
    check("sl leave boundary", lim.decide("a", 110), Decision(True, 0, 100, 0, 0))
    check("sl 120 drops 20", lim.decide("a", 120, 0), Decision(True, 2, 90, 0, 0))


def check_sliding_window(check) -> None:
    """sliding_window: figures, then the retry search against brute force."""
    # sliding_window
    lim = Limiter("sliding_window", 10, 100)
    for _ in range(10):
        lim.decide("a", 50)
    d = lim.decide("a", 99)
    check("sw full", (d.allowed, d.remaining, d.reset_after, d.retry_after),
          (False, 0, 101, 11))  # at t=110: r=10, prev 10*90 + 1*100 = 1000 <= 1000
    d = lim.decide("a", 110)
    check("sw allowed at 110", (d.allowed, d.remaining, d.reset_after), (True, 0, 190))
    check("sw query", lim.decide("a", 150, 0), Decision(True, 4, 150, 0, 0))
    # 10*50 + 1*100 = 600 -> remaining floor((1000 - 500 - 100)/100) = 4

    # sliding_window: brute force vs binary search, and monotonicity of the weighted count
    rng = random.Random(1)
    for _ in range(3000):
        N = rng.randint(1, 8)
        P = rng.randint(1, 40)
        sw = SlidingWindow(N, P, 0)
        w = rng.randint(0, 3)
        cur = rng.randint(0, N)
        prev = rng.randint(0, N)
        t = w * P + rng.randrange(P)
        st = (w, cur, prev)
        last = None
        for d in range(0, 3 * P + 2):
            w2, cur2, prev2 = SlidingWindow.evolved(st, t + d, P)
            r2 = t + d - w2 * P
            wc = prev2 * (P - r2) + cur2 * P
            if last is not None and wc > last:
                check("sw monotone", (st, t, d, wc, last), None)
            last = wc
        for c in range(1, N + 1):
            if not SlidingWindow.admits(st, t, c, N, P):
                check("sw search vs brute", sw.retry_search(st, t, c),
                      sw.retry_bruteforce(st, t, c))


def check_sliding_buckets(check) -> None:
    """sliding_buckets: admissions, denials, the default bucket count."""
    # sliding_buckets
    lim = Limiter("sliding_buckets", 4, 100, K=10)  # S = 10
    check("sb 1", lim.decide("a", 5, 2), Decision(True, 2, 95, 0, 0))  # bucket 0 leaves 100
    check("sb 2", lim.decide("a", 37, 2), Decision(True, 0, 93, 0, 0))  # bucket 3 leaves 130
    check("sb deny", lim.decide("a", 60), Decision(False, 0, 70, 40, 0))
    check("sb deny 3", lim.decide("a", 60, 3), Decision(False, 0, 70, 70, 0))
    check("sb deny -1", lim.decide("a", 60, 5).retry_after, -1)
    check("sb at 100", lim.decide("a", 100, 2), Decision(True, 0, 100, 0, 0))
    check("sb default K", Limiter("sliding_buckets", 4, 120).decide("a", 7),
          Decision(True, 3, (3 + 60) * 2 - 7, 0, 0))


def check_token_bucket(check) -> None:
    """token_bucket: spending, refilling, a cost above the capacity."""
    # token_bucket
    lim = Limiter("token_bucket", 2, 1000, 4)  # 2 tokens per 1000us, capacity 4
    check("tb 1", lim.decide("a", 0, 3), Decision(True, 1, 1500, 0, 0))
    check("tb deny", lim.decide("a", 0, 2), Decision(False, 1, 1500, 500, 0))
    check("tb deny -1", lim.decide("a", 0, 5).retry_after, -1)
    check("tb refill", lim.decide("a", 500, 2), Decision(True, 0, 2000, 0, 0))
    check("tb full", lim.decide("a", 10**9, 0), Decision(True, 4, 0, 0, 0))


def check_gcra_and_leaky_bucket(check) -> None:
    """gcra decides as token_bucket, and leaky_bucket as gcra but for the delay."""
    # gcra == token_bucket, and leaky_bucket figures == gcra figures (but delay)
    rng = random.Random(2)
    for _ in range(400):
        N = rng.choice([1, 2, 3, 7, 10, 1000, 10**9])
        P = rng.choice([1, 3, 1000, 999_999, 86_400_000_000])
        B = rng.choice([N, 1, 2 * N, rng.randint(1, 3 * N)])
        lims = [Limiter(a, N, P, B) for a in ("token_bucket", "gcra", "leaky_bucket")]
        t = rng.choice([0, 1_700_000_000_000_000])
        for _ in range(60):
            t += rng.choice([0, 0, 1, rng.randint(0, 2 * ceil_div(P, N)), P])
            key = rng.choice("ab")
            c = rng.choice([0, 1, 1, 1, 2, B, B + 1])
            ds = [l.decide(key, t, c) for l in lims]
            check("gcra == token_bucket", ds[1], ds[0])
            check("leaky == gcra but delay", ds[2]._replace(delay=0), ds[1])
            if not ds[2].allowed:
                check("leaky denied delay", ds[2].delay, 0)


def check_invariants(check) -> None:
    """Every algorithm: a denied request or a query changes no state, and retry_after is exact."""
    # a denied request changes no state; cost 0 changes nothing
    rng = random.Random(3)
    for a in ALGORITHMS:
        for _ in range(100):
            N = rng.randint(1, 6)
            P = rng.choice([10, 60, 120])
            lim = Limiter(a, N, P, rng.randint(1, 8), 10)
            t = 0
            for _ in range(40):
                t += rng.choice([0, 1, 5, 30])
                c = rng.randint(0, 8)
                before = copy.deepcopy(lim.states)
                d = lim.decide("k", t, c)
                if c == 0 and not d.allowed:
                    check(f"{a} query allowed", d, "allowed")
                if not d.allowed or c == 0:
                    check(f"{a} no state change", repr(_dump(lim.states)), repr(_dump(before)))
                if d.remaining < 0 or d.reset_after < 0 or d.delay < 0:
                    check(f"{a} non-negative", d, "non-negative")
                if not d.allowed and d.retry_after != -1:
                    if d.retry_after < 1:
                        check(f"{a} retry >= 1", d, ">=1")
                    # the same request is allowed after retry_after and not at retry_after-1
                    probe = copy.deepcopy(lim)
                    check(f"{a} allowed at retry", probe.decide("k", t + d.retry_after, c).allowed,
                          True)
                    if d.retry_after > 1:
                        probe = copy.deepcopy(lim)
                        check(f"{a} denied before retry",
                              probe.decide("k", t + d.retry_after - 1, c).allowed, False)


def selftest() -> int:
    failures = 0

    def check(name, got, want):
        nonlocal failures
        if got != want:
            failures += 1
            print(f"FAIL {name}: got {got} want {want}")

    for group in (check_leaky_bucket,
                  check_fixed_window,
                  check_sliding_log,
                  check_sliding_window,
                  check_sliding_buckets,
                  check_token_bucket,
                  check_gcra_and_leaky_bucket,
                  check_invariants):
        group(check)

    if failures:
        print(f"selftest: {failures} failure(s)")
        return 1
    print("selftest: all checks passed")
    return 0


def _dump(states):
    return {k: sorted(vars(v).items()) for k, v in states.items()}


if __name__ == "__main__":
    sys.exit(selftest())
