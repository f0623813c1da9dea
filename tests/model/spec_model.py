#!/usr/bin/env python3
"""Independent reference model of docs/spec "Decision semantics of the rate-limiting
algorithms" (shared/spec/algorithms.md).

Written from the spec text alone (not from the C++ sources).  Pure Python, standard
library only, integers only.  Python ints are unbounded, so the 128-bit products of the
spec (B*P, c*P, t*N, ...) are exact here.

Every algorithm is a class holding the state of ONE key, with a method

    decide(t, c) -> Decision(allowed, remaining, reset_after, retry_after, delay)

`Limiter` keeps a dict key -> state and applies the two rules common to all algorithms:
time that runs backwards for a key is treated as the last t seen for that key, and a
denied request (or a cost-0 query) changes no state.  Each class implements the latter by
computing the decision on a *copy* of the state evolved by time and committing the copy
only when a request with c > 0 is allowed.

Usage:
    python3 spec_model.py --selftest
    python3 spec_model.py --algorithm A --limit N --period P [--burst B] [--buckets K] TRACE
        (P in microseconds, plain integer or with a us/ms/s/m/h/d suffix)
"""

from __future__ import annotations

import copy
import csv
import random
import sys
from typing import NamedTuple


def floor_div(a: int, b: int) -> int:
    return a // b


def ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


class Decision(NamedTuple):
    allowed: bool
    remaining: int
    reset_after: int
    retry_after: int
    delay: int


ALGORITHMS = (
    "fixed_window",
    "sliding_log",
    "sliding_window",
    "sliding_buckets",
    "token_bucket",
    "gcra",
    "leaky_bucket",
)


# ---------------------------------------------------------------------------------------
# fixed_window
# ---------------------------------------------------------------------------------------
class FixedWindow:
    """Windows aligned to the epoch, w = floor(t/P); state (w, count)."""

    def __init__(self, N: int, P: int, t0: int):
        self.N, self.P = N, P
        self.w = floor_div(t0, P)
        self.count = 0

    def _evolve(self, t: int) -> None:
        wt = floor_div(t, self.P)
        if wt != self.w:
            self.w = wt
            self.count = 0

    def decide(self, t: int, c: int) -> Decision:
        N, P = self.N, self.P
        s = copy.copy(self)
        s._evolve(t)
        allowed = s.count + c <= N
        if allowed:
            s.count += c
        remaining = N - s.count
        reset_after = (s.w + 1) * P - t if s.count > 0 else 0
        if allowed:
            retry_after = 0
        else:
            retry_after = -1 if c > N else (s.w + 1) * P - t
        if allowed and c > 0:
            self.w, self.count = s.w, s.count
        return Decision(allowed, remaining, reset_after, retry_after, 0)


# ---------------------------------------------------------------------------------------
# sliding_log
# ---------------------------------------------------------------------------------------
class SlidingLog:
    """The list of allowed requests (ts, cost), cost > 0, oldest first; window (t-P, t]."""

    def __init__(self, N: int, P: int, t0: int):
        self.N, self.P = N, P
        self.log: list[tuple[int, int]] = []

    def decide(self, t: int, c: int) -> Decision:
        N, P = self.N, self.P
        log = [(ts, k) for (ts, k) in self.log if not ts <= t - P]
        used = sum(k for _, k in log)
        allowed = used + c <= N
        if allowed and c > 0:
            log.append((t, c))
            used += c
        remaining = N - used
        reset_after = 0 if not log else log[-1][0] + P - t
        retry_after = 0
        if not allowed:
            if c > N:
                retry_after = -1
            else:
                freed = 0
                retry_after = None
                for ts, k in log:
                    freed += k
                    if used - freed <= N - c:
                        retry_after = ts + P - t
                        break
                assert retry_after is not None
        if allowed and c > 0:
            self.log = log
        return Decision(allowed, remaining, reset_after, retry_after, 0)


# ---------------------------------------------------------------------------------------
# sliding_window
# ---------------------------------------------------------------------------------------
class SlidingWindow:
    """Counter approximation: state (w, cur, prev)."""

    def __init__(self, N: int, P: int, t0: int):
        self.N, self.P = N, P
        self.w = floor_div(t0, P)
        self.cur = 0
        self.prev = 0

    @staticmethod
    def evolved(state: tuple[int, int, int], t: int, P: int) -> tuple[int, int, int]:
        """The state (w, cur, prev) evolved by time alone to time t."""
        w, cur, prev = state
        wt = floor_div(t, P)
        if wt == w + 1:
            prev, cur = cur, 0
        elif wt > w + 1:
            prev, cur = 0, 0
        w = wt
        return (w, cur, prev)

    @staticmethod
    def admits(state: tuple[int, int, int], t: int, c: int, N: int, P: int) -> bool:
        """The admission condition at t for a state already evolved to t."""
        w, cur, prev = state
        r = t - w * P
        assert 0 <= r < P
        return prev * (P - r) + (cur + c) * P <= N * P

    def retry_search(self, state, t: int, c: int) -> int:
        """Smallest d >= 1 such that the condition holds at t+d, the state evolved by time
        alone.  Binary search; valid because the weighted count
        prev*(P-r) + cur*P never grows with time alone (checked by brute force in the
        self-test), and at d_hi = (w+2)*P - t both counters are 0 so (c <= N) it holds."""
        N, P = self.N, self.P
        w = state[0]
        hi = (w + 2) * P - t
        assert self.admits(self.evolved(state, t + hi, P), t + hi, c, N, P)
        lo = 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self.admits(self.evolved(state, t + mid, P), t + mid, c, N, P):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def retry_bruteforce(self, state, t: int, c: int) -> int:
        """Linear scan, for the self-test only (small P)."""
        d = 1
        while not self.admits(self.evolved(state, t + d, self.P), t + d, c, self.N, self.P):
            d += 1
        return d

    def decide(self, t: int, c: int) -> Decision:
        N, P = self.N, self.P
        w, cur, prev = self.evolved((self.w, self.cur, self.prev), t, P)
        r = t - w * P
        allowed = self.admits((w, cur, prev), t, c, N, P)
        old_state = (w, cur, prev)
        if allowed:
            cur += c
        remaining = max(0, floor_div(N * P - prev * (P - r) - cur * P, P))
        if cur > 0:
            reset_after = (w + 2) * P - t
        elif prev > 0:
            reset_after = (w + 1) * P - t
        else:
            reset_after = 0
        if allowed:
            retry_after = 0
        elif c > N:
            retry_after = -1
        else:
            retry_after = self.retry_search(old_state, t, c)
        if allowed and c > 0:
            self.w, self.cur, self.prev = w, cur, prev
        return Decision(allowed, remaining, reset_after, retry_after, 0)


# ---------------------------------------------------------------------------------------
# sliding_buckets
# ---------------------------------------------------------------------------------------
class SlidingBuckets:
    """K buckets of S = P/K microseconds; state: counts of the buckets in the window."""

    def __init__(self, N: int, P: int, K: int, t0: int):
        if P % K != 0:
            raise ValueError("K must divide P")
        self.N, self.P, self.K = N, P, K
        self.S = P // K
        self.buckets: dict[int, int] = {}

    def decide(self, t: int, c: int) -> Decision:
        N, K, S = self.N, self.K, self.S
        s = floor_div(t, S)
        window = {i: n for i, n in self.buckets.items() if s - K + 1 <= i <= s and n > 0}
        count = sum(window.values())
        allowed = count + c <= N
        if allowed and c > 0:
            window[s] = window.get(s, 0) + c
            count += c
        remaining = N - count
        held = [i for i, n in window.items() if n > 0]
        reset_after = 0 if not held else (max(held) + K) * S - t
        if allowed:
            retry_after = 0
        elif c > N:
            retry_after = -1
        else:
            # walk the buckets oldest first (empty ones free nothing)
            freed = 0
            retry_after = None
            for i in range(s - K + 1, s + 1):
                freed += window.get(i, 0)
                if count - freed <= N - c:
                    retry_after = (i + K) * S - t
                    break
            assert retry_after is not None
        if allowed and c > 0:
            self.buckets = window
        return Decision(allowed, remaining, reset_after, retry_after, 0)


# ---------------------------------------------------------------------------------------
# token_bucket
# ---------------------------------------------------------------------------------------
class TokenBucket:
    """Level L = tokens*P; state (L, last); a new key starts full."""

    def __init__(self, N: int, P: int, B: int, t0: int):
        self.N, self.P, self.B = N, P, B
        self.L = B * P
        self.last = t0

    def decide(self, t: int, c: int) -> Decision:
        N, P, B = self.N, self.P, self.B
        L = min(B * P, self.L + (t - self.last) * N)
        allowed = L >= c * P
        if allowed:
            L -= c * P
        remaining = floor_div(L, P)
        reset_after = ceil_div(B * P - L, N)
        if allowed:
            retry_after = 0
        else:
            retry_after = -1 if c > B else ceil_div(c * P - L, N)
        if allowed and c > 0:
            self.L, self.last = L, t
        return Decision(allowed, remaining, reset_after, retry_after, 0)


# ---------------------------------------------------------------------------------------
# gcra and leaky_bucket
# ---------------------------------------------------------------------------------------
class Gcra:
    """TAT scaled by N; a new key has TAT = t*N."""

    leaky = False

    def __init__(self, N: int, P: int, B: int, t0: int):
        self.N, self.P, self.B = N, P, B
        self.TAT = t0 * N

    def decide(self, t: int, c: int) -> Decision:
        N, P, B = self.N, self.P, self.B
        tN = t * N
        base = max(self.TAT, tN)
        backlog = base + c * P - tN
        allowed = backlog <= B * P
        TAT = base + c * P if allowed else self.TAT
        q = max(TAT, tN) - tN  # the backlog after the update
        if self.leaky and allowed:
            remaining = floor_div(B * P - backlog, P)
        else:
            remaining = floor_div(B * P - q, P)
        reset_after = ceil_div(q, N)
        if allowed:
            retry_after = 0
        else:
            retry_after = -1 if c > B else ceil_div(backlog - B * P, N)
        delay = ceil_div(base - tN, N) if (self.leaky and allowed) else 0
        if allowed and c > 0:
            self.TAT = TAT
        return Decision(allowed, remaining, reset_after, retry_after, delay)


class LeakyBucket(Gcra):
    leaky = True


# ---------------------------------------------------------------------------------------
# per-key limiter and simulate
# ---------------------------------------------------------------------------------------
class Limiter:
    def __init__(self, algorithm: str, N: int, P: int, B: int | None = None,
                 K: int | None = None):
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}")
        if N <= 0 or P <= 0:
            raise ValueError("N and P must be > 0")
        self.algorithm = algorithm
        self.N, self.P = N, P
        self.B = N if B is None else B
        self.K = 60 if K is None else K
        if self.B <= 0 or self.K <= 0:
            raise ValueError("B and K must be > 0")
        if algorithm == "sliding_buckets" and P % self.K != 0:
            raise ValueError("K must divide P")
        self.states: dict[str, object] = {}
        self.last_t: dict[str, int] = {}

    def _new_state(self, t: int):
        a, N, P = self.algorithm, self.N, self.P
        if a == "fixed_window":
            return FixedWindow(N, P, t)
        if a == "sliding_log":
            return SlidingLog(N, P, t)
        if a == "sliding_window":
            return SlidingWindow(N, P, t)
        if a == "sliding_buckets":
            return SlidingBuckets(N, P, self.K, t)
        if a == "token_bucket":
            return TokenBucket(N, P, self.B, t)
        if a == "gcra":
            return Gcra(N, P, self.B, t)
        return LeakyBucket(N, P, self.B, t)

    def decide(self, key: str, t: int, c: int = 1) -> Decision:
        if c < 0:
            raise ValueError("negative cost")
        # time that runs backwards for a key is treated as the last t seen for it
        if key in self.last_t and t < self.last_t[key]:
            t = self.last_t[key]
        self.last_t[key] = t
        st = self.states.get(key)
        if st is None:
            st = self._new_state(t)
        d = st.decide(t, c)
        # store the state only once it has been touched by an admitted request with c > 0
        # (a new key's fresh state is equivalent to "no state")
        if d.allowed and c > 0:
            self.states[key] = st
        return d


def simulate(rows, algorithm: str, N: int, P: int, B: int | None = None,
             K: int | None = None) -> list[tuple]:
    """rows: iterable of (time_us, key, cost).  Returns a list of output rows
    (time_us, key, cost, allowed(1/0), remaining, reset_after_us, retry_after_us, delay_us)."""
    lim = Limiter(algorithm, N, P, B, K)
    out = []
    for t, key, c in rows:
        d = lim.decide(key, t, c)
        out.append((t, key, c, 1 if d.allowed else 0, d.remaining, d.reset_after,
                    d.retry_after, d.delay))
    return out


OUTPUT_HEADER = "time_us,key,cost,allowed,remaining,reset_after_us,retry_after_us,delay_us"

_UNITS = {"us": 1, "ms": 1000, "s": 1000000, "m": 60000000, "h": 3600000000,
          "d": 86400000000}


def parse_duration(text: str) -> int:
    for suf in ("us", "ms", "s", "m", "h", "d"):
        if text.endswith(suf) and text[: -len(suf)].isdigit():
            return int(text[: -len(suf)]) * _UNITS[suf]
    if text.isdigit():
        return int(text)
    raise ValueError(f"bad duration {text!r}")


# ---------------------------------------------------------------------------------------
# self-test
# ---------------------------------------------------------------------------------------
def _selftest_leaky_bucket(check) -> None:
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


def _selftest_fixed_window(check) -> None:
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


def _selftest_sliding_log(check) -> None:
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


def _selftest_sliding_window(check) -> None:
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


def _selftest_sliding_buckets(check) -> None:
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


def _selftest_token_bucket(check) -> None:
    """token_bucket: spending, refilling, a cost above the capacity."""
    # token_bucket
    lim = Limiter("token_bucket", 2, 1000, 4)  # 2 tokens per 1000us, capacity 4
    check("tb 1", lim.decide("a", 0, 3), Decision(True, 1, 1500, 0, 0))
    check("tb deny", lim.decide("a", 0, 2), Decision(False, 1, 1500, 500, 0))
    check("tb deny -1", lim.decide("a", 0, 5).retry_after, -1)
    check("tb refill", lim.decide("a", 500, 2), Decision(True, 0, 2000, 0, 0))
    check("tb full", lim.decide("a", 10**9, 0), Decision(True, 4, 0, 0, 0))


def _selftest_gcra_and_leaky_bucket(check) -> None:
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


def _selftest_invariants(check) -> None:
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


def _selftest() -> int:
    failures = 0

    def check(name, got, want):
        nonlocal failures
        if got != want:
            failures += 1
            print(f"FAIL {name}: got {got} want {want}")

    for group in (_selftest_leaky_bucket,
                  _selftest_fixed_window,
                  _selftest_sliding_log,
                  _selftest_sliding_window,
                  _selftest_sliding_buckets,
                  _selftest_token_bucket,
                  _selftest_gcra_and_leaky_bucket,
                  _selftest_invariants):
        group(check)

    if failures:
        print(f"selftest: {failures} failure(s)")
        return 1
    print("selftest: all checks passed")
    return 0


def _dump(states):
    return {k: sorted(vars(v).items()) for k, v in states.items()}


def _main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--algorithm")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--period")
    ap.add_argument("--burst", type=int)
    ap.add_argument("--buckets", type=int)
    ap.add_argument("trace", nargs="?")
    a = ap.parse_args(argv)
    if a.selftest:
        return _selftest()
    if not (a.algorithm and a.limit and a.period and a.trace):
        ap.error("--algorithm, --limit, --period and TRACE are required")
    rows = []
    with open(a.trace, newline="") as f:
        rd = csv.reader(f)
        header = next(rd)
        for rec in rd:
            if not rec:
                continue
            d = dict(zip(header, rec))
            rows.append((int(d["time_us"]), d.get("key", "-"), int(d.get("cost", "1"))))
    out = simulate(rows, a.algorithm, a.limit, parse_duration(a.period), a.burst, a.buckets)
    print(OUTPUT_HEADER)
    for r in out:
        print(",".join(str(x) for x in r))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
