"""Settling in the reference model (docs/algorithms.md, "Settling"): SettlingLimiter adds to
spec_model.Limiter charges remembered for a later settle, settles (a give-back of a charge's
last units, or a charge past the limit up to N + D, B + D for the buckets) and resets. The
per-algorithm steps (charge_past, give_back) are methods of spec_model's state classes.
Pure Python, standard library only, integers only.
"""

from __future__ import annotations

import copy
from typing import NamedTuple

from spec_model import Decision, Limiter, floor_div


class Charge(NamedTuple):
    """What an admission charged, for a later settle: its time, its units, and for the
    buckets the TAT x N (token_bucket: the time x N at which it is full again) just after."""
    at: int
    units: int
    tat1: int


class Settled(NamedTuple):
    given_back: int
    charged: int
    after: Decision


class SettlingLimiter(Limiter):
    """Limiter with docs/algorithms.md's "Settling": charges remembered per key, settled later
    (a give-back of the charge's last units, or a charge past the limit up to N + D, B + D),
    and keys reset."""

    def _time(self, key: str, t: int) -> int:
        if key in self.last_t and t < self.last_t[key]:
            t = self.last_t[key]
        self.last_t[key] = t
        return t

    def charge(self, key: str, t: int, c: int) -> tuple[Decision, Charge]:
        d = self.decide(key, t, c)
        if not (d.allowed and c > 0):
            return d, Charge(0, 0, 0)
        st = self.states[key]
        t = self.last_t[key]
        tat1 = st.tat1() if hasattr(st, "tat1") else 0
        return d, Charge(t, c, tat1)

    def settle(self, key: str, t: int, charge: Charge, M: int, D: int) -> Settled:
        t = self._time(key, t)
        st = self.states.get(key)
        given = charged = 0
        if M < charge.units and st is not None:
            before = copy.deepcopy(st)
            st.give_back(t, charge.at, charge.units - M, charge.tat1)
            if self.algorithm == "token_bucket":
                if (st.L, st.last) != (before.L, before.last):
                    L = min(st.B * st.P, before.L + (st.last - before.last) * st.N)
                    given = floor_div(st.L - L, st.P)
            elif self.algorithm in ("gcra", "leaky_bucket"):
                given = floor_div(before.TAT - st.TAT, st.P)
            else:
                given = before.held() - st.held()
        elif M > charge.units:
            if st is None:
                st = self._new_state(t)
            charged = st.charge_past(t, M - charge.units, D)
            if charged > 0:
                self.states[key] = st
        probe = copy.deepcopy(st) if st is not None else self._new_state(t)
        return Settled(given, charged, probe.decide(t, 0))

    def reset(self, key: str) -> None:
        self.states.pop(key, None)
        self.last_t.pop(key, None)
