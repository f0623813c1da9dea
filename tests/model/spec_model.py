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
    python3 spec_model.py --selftest    (the checks are in spec_model_selftest.py)
    python3 spec_model.py --algorithm A --limit N --period P [--burst B] [--buckets K] TRACE
        (P in microseconds, plain integer or with a us/ms/s/m/h/d suffix)
"""

from __future__ import annotations

import copy
import csv
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
        remaining = max(0, N - s.count)  # a key in debt holds more than N
        reset_after = (s.w + 1) * P - t if s.count > 0 else 0
        if allowed:
            retry_after = 0
        else:
            retry_after = -1 if c > N else (s.w + 1) * P - t
        if allowed and c > 0:
            self.w, self.count = s.w, s.count
        return Decision(allowed, remaining, reset_after, retry_after, 0)

    def charge_past(self, t: int, x: int, D: int) -> int:
        s = copy.copy(self)
        s._evolve(t)
        c = min(x, max(0, self.N + D - s.count))
        if c > 0:
            self.w, self.count = s.w, s.count + c
        return c

    def give_back(self, t: int, at: int, u: int, tat1: int) -> None:
        if floor_div(at, self.P) == self.w:
            self.count = max(0, self.count - u)

    def held(self) -> int:
        return self.count


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
        remaining = max(0, N - used)
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

    def charge_past(self, t: int, x: int, D: int) -> int:
        log = [(ts, k) for (ts, k) in self.log if ts > t - self.P]
        c = min(x, max(0, self.N + D - sum(k for _, k in log)))
        if c > 0:
            self.log = log + [(t, c)]
        return c

    def give_back(self, t: int, at: int, u: int, tat1: int) -> None:
        log = []
        for ts, k in reversed(self.log):  # the newest entries at `at` first
            if ts == at and u > 0:
                take = min(u, k)
                k, u = k - take, u - take
            if k > 0:
                log.append((ts, k))
        self.log = log[::-1]

    def held(self) -> int:
        return sum(k for _, k in self.log)


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

    def charge_past(self, t: int, x: int, D: int) -> int:
        N, P = self.N, self.P
        w, cur, prev = self.evolved((self.w, self.cur, self.prev), t, P)
        r = t - w * P
        c = min(x, max(0, floor_div((N + D) * P - prev * (P - r) - cur * P, P)))
        if c > 0:
            self.w, self.cur, self.prev = w, cur + c, prev
        return c

    def give_back(self, t: int, at: int, u: int, tat1: int) -> None:
        wa = floor_div(at, self.P)
        if wa == self.w:
            self.cur = max(0, self.cur - u)
        elif wa == self.w - 1:
            self.prev = max(0, self.prev - u)

    def held(self) -> int:
        return self.cur + self.prev


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
        remaining = max(0, N - count)
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

    def charge_past(self, t: int, x: int, D: int) -> int:
        s = floor_div(t, self.S)
        window = {i: n for i, n in self.buckets.items() if s - self.K + 1 <= i <= s and n > 0}
        c = min(x, max(0, self.N + D - sum(window.values())))
        if c > 0:
            window[s] = window.get(s, 0) + c
            self.buckets = window
        return c

    def give_back(self, t: int, at: int, u: int, tat1: int) -> None:
        i = floor_div(at, self.S)
        if i in self.buckets:
            self.buckets[i] = max(0, self.buckets[i] - u)
            if self.buckets[i] == 0:
                del self.buckets[i]

    def held(self) -> int:
        return sum(self.buckets.values())


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
        remaining = max(0, floor_div(L, P))  # L < 0: a debt
        reset_after = ceil_div(B * P - L, N)
        if allowed:
            retry_after = 0
        else:
            retry_after = -1 if c > B else ceil_div(c * P - L, N)
        if allowed and c > 0:
            self.L, self.last = L, t
        return Decision(allowed, remaining, reset_after, retry_after, 0)

    def tat1(self) -> int:
        """The charge just made, as the time x N when the bucket is full again."""
        return self.last * self.N + self.B * self.P - self.L

    def charge_past(self, t: int, x: int, D: int) -> int:
        L = min(self.B * self.P, self.L + (t - self.last) * self.N)
        c = min(x, max(0, floor_div(L + D * self.P, self.P)))
        if c > 0:
            self.L, self.last = L - c * self.P, t
        return c

    def give_back(self, t: int, at: int, u: int, tat1: int) -> None:
        t = max(t, self.last)
        L = min(self.B * self.P, self.L + (t - self.last) * self.N)
        give = min(u * self.P, tat1 - t * self.N, self.B * self.P - L)
        if give > 0:
            self.L, self.last = L + give, t

    def held(self) -> int:
        """Tokens missing x P, as of the last change (compared before and after a give-back
        at one time, which refills first)."""
        return -self.L


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
            remaining = max(0, floor_div(B * P - q, P))  # q > B*P: a debt
        reset_after = ceil_div(q, N)
        if allowed:
            retry_after = 0
        else:
            retry_after = -1 if c > B else ceil_div(backlog - B * P, N)
        delay = ceil_div(base - tN, N) if (self.leaky and allowed) else 0
        if allowed and c > 0:
            self.TAT = TAT
        return Decision(allowed, remaining, reset_after, retry_after, delay)

    def tat1(self) -> int:
        return self.TAT

    def charge_past(self, t: int, x: int, D: int) -> int:
        tN = t * self.N
        base = max(self.TAT, tN)
        c = min(x, max(0, floor_div((self.B + D) * self.P - (base - tN), self.P)))
        if c > 0:
            self.TAT = base + c * self.P
        return c

    def give_back(self, t: int, at: int, u: int, tat1: int) -> None:
        tN = t * self.N
        give = min(u * self.P, tat1 - tN, self.TAT - tN)
        if give > 0:
            self.TAT -= give

    def held(self) -> int:
        return self.TAT


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
        from spec_model_selftest import selftest

        return selftest()
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
