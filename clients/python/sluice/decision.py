"""A decision of sluiced, read from its JSON answer into typed attributes (seconds as floats,
as Python's time functions count). The wire figures are integer microseconds
(docs/server.md, POST /v1/check)."""

import dataclasses
import math
from typing import Any, Callable, List, Optional

MICROS = 1_000_000.0


def _seconds(micros):
    """Microseconds to seconds; -1 ("never") is infinity."""
    if micros is None:
        return 0.0
    return math.inf if micros < 0 else micros / MICROS


@dataclasses.dataclass(frozen=True)
class Limit:
    """One limit that applied to the request (an entry of the answer's `limits`)."""

    name: str
    algorithm: Optional[str]
    limit: Optional[int]
    period: Optional[str]
    mode: Optional[str]
    allowed: bool
    remaining: Optional[int]
    reset_after: float
    retry_after: float
    delay: float
    unlimited: bool = False


@dataclasses.dataclass(frozen=True)
class Decision:
    """May the request go ahead? `allowed` says; the other figures say how it stands.

    - remaining: units left under the limit closest to denying; None when no rule limited
      the request (or sluiced could not be asked).
    - retry_after: seconds until a retry may be allowed; 0 when allowed; math.inf when no wait
      can allow it (`never`: its cost is above the limit).
    - reset_after: seconds until the limit is whole again.
    - delay: seconds a leaky_bucket asks the caller to wait before going ahead (check only).
    - waited: seconds sluiced held an acquire before answering.
    - lease, lease_ttl: the lease taken on a concurrency limit, to give back with release().
    - receipt, receipt_ttl: when asked with receipt=True and charged (allowed, cost above 0),
      the token that settles what the request really cost, and how long it can (settle()).
    - unmatched: True when no rule matched the request (its domain or descriptors name none),
      which sluiced admits with no limit.
    - error: why sluiced could not decide (unreachable, timed out, 5xx); then `allowed` is the
      client's on_error policy, and `retry_after` is the client's error_retry_after.
    """

    allowed: bool
    remaining: Optional[int] = None
    retry_after: float = 0.0
    reset_after: float = 0.0
    delay: float = 0.0
    waited: float = 0.0
    over_soft: bool = False
    lease: Optional[str] = None
    lease_ttl: float = 0.0
    limits: List[Limit] = dataclasses.field(default_factory=list)
    unmatched: bool = False
    status: Optional[int] = None
    error: Optional[str] = None
    receipt: Optional[str] = None
    receipt_ttl: float = 0.0
    # The client's settle, set when the decision was asked with receipt=True.
    _settle: Optional[Callable[[str, int], Any]] = dataclasses.field(
        default=None, repr=False, compare=False)

    def settle(self, cost):
        """Settles what the request really cost (POST /v1/settle): `cost` units in place of
        the check's, 0 a refund. Returns a Settlement (awaitable from an AsyncClient's
        decision); None when there is nothing to settle, as nothing was charged (denied, cost
        0, no rule matched, or admitted by the on_error policy without sluiced). Raises
        BadRequest when sluiced refuses the receipt (settled already, expired), ValueError on a
        decision not asked with receipt=True."""
        if self._settle is None:
            raise ValueError("this decision has no receipt to settle: check with receipt=True")
        return self._settle(self.receipt, cost)

    @property
    def never(self):
        """True when no wait can allow this request (its cost is above the limit)."""
        return math.isinf(self.retry_after)

    def __bool__(self):
        return self.allowed


@dataclasses.dataclass(frozen=True)
class SettledLimit:
    """What a settle did to one limit of the receipt, and how that limit stands after it."""

    name: str
    given_back: int
    charged: int
    remaining: Optional[int]
    reset_after: float
    retry_after: float
    delay: float


@dataclasses.dataclass(frozen=True)
class Settlement:
    """The answer of a settle (falsy when it was not done).

    - settled: True when sluiced settled the receipt.
    - cost: the units the request was settled at.
    - given_back: units given back (the check charged more than `cost`), the least over the
      limits (what every limit gave back); charged: units charged on top (it charged less),
      the least over the limits, which may take a key past its limit, into debt, up to its
      max_debt.
    - limits: one SettledLimit per limit of the receipt.
    - error: why sluiced could not be asked (unreachable, timed out, 5xx); then nothing is
      known to be settled, and the check's charge stands until the receipt expires.
    """

    settled: bool
    cost: int = 0
    given_back: int = 0
    charged: int = 0
    limits: List[SettledLimit] = dataclasses.field(default_factory=list)
    status: Optional[int] = None
    error: Optional[str] = None

    def __bool__(self):
        return self.settled


def settlement_from_answer(status, answer):
    """The Settlement of a 200 answer of /v1/settle. Raises (KeyError, TypeError, ValueError)
    when it is not one."""
    if answer["settled"] is not True:
        raise ValueError("settled is not true")
    limits = [SettledLimit(name=e.get("name", ""), given_back=int(e.get("given_back", 0)),
                           charged=int(e.get("charged", 0)), remaining=e.get("remaining"),
                           reset_after=_seconds(e.get("reset_after_us")),
                           retry_after=_seconds(e.get("retry_after_us")),
                           delay=_seconds(e.get("delay_us")))
              for e in answer.get("limits") or []]
    return Settlement(settled=True, cost=int(answer["cost"]),
                      given_back=int(answer.get("given_back", 0)),
                      charged=int(answer.get("charged", 0)), limits=limits, status=status)


def _limit(entry):
    return Limit(name=entry.get("name", ""), algorithm=entry.get("algorithm"),
                 limit=entry.get("limit"), period=entry.get("period"), mode=entry.get("mode"),
                 allowed=bool(entry.get("allowed", True)), remaining=entry.get("remaining"),
                 reset_after=_seconds(entry.get("reset_after_us")),
                 retry_after=_seconds(entry.get("retry_after_us")),
                 delay=_seconds(entry.get("delay_us")),
                 unlimited=bool(entry.get("unlimited", False)))


def from_answer(status, answer):
    """The Decision of a 200 or 429 answer's JSON object. Raises (KeyError, TypeError,
    ValueError) when the object is not a decision; the client turns that into an error."""
    if not isinstance(answer["allowed"], bool):
        raise TypeError("allowed is not a boolean")
    receipt = answer.get("receipt")
    if receipt is not None and not isinstance(receipt, str):
        raise TypeError("receipt is not a string")
    return Decision(allowed=answer["allowed"], remaining=answer.get("remaining"),
                    retry_after=_seconds(answer.get("retry_after_us")),
                    reset_after=_seconds(answer.get("reset_after_us")),
                    delay=_seconds(answer.get("delay_us")),
                    waited=_seconds(answer.get("waited_us")),
                    over_soft=bool(answer.get("over_soft", False)), lease=answer.get("lease"),
                    lease_ttl=_seconds(answer.get("lease_ttl_us")),
                    limits=[_limit(e) for e in answer.get("limits") or []],
                    unmatched=answer.get("unmatched") is True, status=status,
                    receipt=receipt if answer["allowed"] else None,
                    receipt_ttl=_seconds(answer.get("receipt_ttl_us")))


def failed(error, allowed, retry_after):
    """The Decision when sluiced could not decide: the caller's policy, and why."""
    return Decision(allowed=allowed, retry_after=0.0 if allowed else retry_after, error=error)
