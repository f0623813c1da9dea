"""What a partner (the third-party API a fleet's workers call) answered, told to sluiced so
that every worker acts on it (POST /v1/feedback, docs/server.md): a 429's pause, a lower
remaining. Standard library only; the adapters for requests and httpx are in adapters.py.

Only what concerns limits leaves the worker: the status and the rate limit headers (below).
A partner's other headers (cookies, tokens, ids) are never sent to sluiced.
"""

import dataclasses
from typing import List, Optional

from .decision import _seconds

# The headers sluiced reads (server/http/partner_headers.h), lower case.
RATE_HEADERS = frozenset((
    "retry-after", "retry-after-ms", "ratelimit", "ratelimit-policy", "ratelimit-limit",
    "ratelimit-remaining", "ratelimit-reset", "x-ratelimit-limit", "x-ratelimit-remaining",
    "x-ratelimit-reset", "x-ratelimit-reset-after", "x-rate-limit-limit",
    "x-rate-limit-remaining", "x-rate-limit-reset",
))

# Statuses worth telling even without a rate limit header: 429, and 503 (Retry-After's other
# status).
TOLD_STATUSES = frozenset((429, 503))


def worth_telling(status, headers):
    """The [name, value] pairs of `headers` (a mapping, or (name, value) pairs, which may repeat
    a name) that sluiced reads; None when the answer says nothing about limits (no such header,
    a status other than 429 and 503), so that no call to sluiced is made for it."""
    items = headers.items() if hasattr(headers, "items") else headers
    pairs = [[str(name), str(value)] for name, value in items
             if str(name).lower() in RATE_HEADERS]
    if not pairs and status not in TOLD_STATUSES:
        return None
    return pairs


@dataclasses.dataclass(frozen=True)
class FeedbackLimit:
    """What the partner's answer did on one limit: `pause` (seconds) asked for, `paused`
    whether this answer started or lengthened it, `pause_left` (seconds) its time left,
    `lowered` the units ours was brought down by, `remaining` ours after, `notes`."""

    name: str
    pause: float
    paused: bool
    pause_left: float
    lowered: int
    remaining: int
    notes: List[str]


@dataclasses.dataclass(frozen=True)
class Feedback:
    """sluiced's answer to a feedback: falsy, with `error`, when it could not be told."""

    told: bool
    limits: List[FeedbackLimit] = dataclasses.field(default_factory=list)
    notes: List[str] = dataclasses.field(default_factory=list)
    error: Optional[str] = None

    def __bool__(self):
        return self.told

    @property
    def paused(self):
        """The longest pause left on any of the limits, in seconds (0: none)."""
        return max((limit.pause_left for limit in self.limits), default=0.0)


def from_answer(answer):
    """A Feedback from sluiced's 200 answer."""
    limits = [FeedbackLimit(name=str(e["name"]), pause=_seconds(e["pause_us"]),
                            paused=bool(e["paused"]), pause_left=_seconds(e["pause_left_us"]),
                            lowered=int(e["lowered"]), remaining=int(e["remaining"]),
                            notes=[str(n) for n in e.get("notes") or []])
              for e in answer["limits"]]
    return Feedback(told=True, limits=limits, notes=[str(n) for n in answer.get("notes") or []])
