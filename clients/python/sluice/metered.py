"""A block whose cost is known only once it has run (an LLM call's tokens, a partner's
metered units): charged an estimate on entry, settled at the real cost on exit
(docs/python.md, "Settling the real cost"). The check on entry asks for a receipt; the settle
on exit (POST /v1/settle) gives back what the estimate charged too much, or charges the rest.

What the exit settles:
- the block set `m.cost`: that cost, whether it returned or raised;
- it set none and returned: nothing, the estimate stands;
- it set none and raised: 0, a refund (on_exception="refund", the default: a call that failed
  upstream costs nothing), or nothing with on_exception="keep".
A settle that fails (sluiced gone, the receipt expired while the block ran) is logged, never
raised over the block's own exception nor after a block that succeeded: the check's charge
then stands."""

import asyncio
import logging

from . import request
from .errors import RateLimited, warn_if_unmatched

log = logging.getLogger("sluice")

_WITHOUT = "no limit and no receipt"


class Meter:
    """`with client.metered(domain=..., descriptors=..., cost=estimate) as m:`, or `async with`
    on an AsyncClient's. The value is this Meter: set `m.cost` in the block to the real cost.
    `m.decision` is the entry's Decision (its `receipt` is None when nothing was charged: the
    on_error policy admitted the block without sluiced, or no rule matched, which warns
    UnmatchedWarning); `m.settlement` is the exit's Settlement, None when nothing was settled."""

    def __init__(self, client, estimate, max_wait, on_exception, request_kwargs):
        if on_exception not in ("refund", "keep"):
            raise ValueError("on_exception must be 'refund' or 'keep', not %r" % (on_exception,))
        self._client = client  # A sync Client: the async form runs its calls in a thread.
        self.estimate = request.settle_cost(estimate)
        self._max_wait = max_wait
        self._on_exception = on_exception
        self._request = request_kwargs
        self._cost = None
        self.decision = None
        self.settlement = None

    @property
    def cost(self):
        """The real cost the block set (units, 0 or more); None until it sets one."""
        return self._cost

    @cost.setter
    def cost(self, value):
        self._cost = request.settle_cost(value)  # Refused here, in the block, not at its exit.

    def __enter__(self):
        return self._take(stacklevel=3)  # The unmatched warning points at the `with` line.

    def _take(self, stacklevel):
        ask = dict(self._request, cost=self.estimate, receipt=True)
        if self._max_wait is None:
            decision = self._client.check(**ask)
        else:
            decision = self._client._acquire(self._max_wait, ask, stacklevel=None)
        if stacklevel is not None:
            warn_if_unmatched(decision, self._request, stacklevel, _WITHOUT)
        if not decision.allowed:
            raise RateLimited(decision, "metered block")
        self.decision = decision
        self._cost = None
        self.settlement = None
        return self

    def __exit__(self, exc_type, exc, tb):
        self.settlement = self._settle(raised=exc_type is not None)
        return False  # The block's exception, if any, goes on.

    def _settle(self, raised):
        cost = self._cost
        if cost is None and raised and self._on_exception == "refund":
            cost = 0
        return None if cost is None else self._settle_at(cost)

    def _settle_at(self, cost):
        receipt = self.decision.receipt if self.decision is not None else None
        if receipt is None:
            return None
        try:
            return self._client.settle(receipt, cost)
        except Exception as e:  # Logged: the block's own exception, if any, goes on.
            log.warning("sluice: receipt not settled at cost %d (%s: %s); the estimate %d "
                        "stands", cost, type(e).__name__, e, self.estimate)
            return None

    async def __aenter__(self):
        # The check runs in a thread, which a cancellation cannot stop: shielded, it goes on,
        # and what it charges after all is refunded at once (the block never runs).
        taking = asyncio.ensure_future(asyncio.to_thread(self._take, None))
        try:
            await asyncio.shield(taking)
        except asyncio.CancelledError:
            taking.add_done_callback(self._refund_late)
            raise
        warn_if_unmatched(self.decision, self._request, 2, _WITHOUT)  # At the `async with`.
        return self

    def _refund_late(self, taking):
        if not taking.cancelled() and taking.exception() is None:
            taking.get_loop().run_in_executor(None, self._settle_at, 0)

    async def __aexit__(self, exc_type, exc, tb):
        self.settlement = await asyncio.to_thread(self._settle, exc_type is not None)
        return False
