"""A lease of a concurrency limit held for the length of a block (docs/server.md,
"Concurrency limits: leases"): taken by /v1/acquire on entry, given back by /v1/release on
exit, whether the block returned or raised. A lease that cannot be given back (sluiced gone,
or any error of the release) is logged, never raised over the block's own exception, and ends
by itself at its lease_ttl."""

import asyncio
import logging

from .errors import RateLimited, warn_if_unmatched

log = logging.getLogger("sluice")


class Lease:
    """`with client.lease(...) as decision:` (or `async with` on an AsyncClient's). The value
    is the acquire's Decision; `decision.lease` is None when the on_error policy admitted the
    block without sluiced, or when no concurrency limit applied (an UnmatchedWarning says so
    when no rule at all matched)."""

    def __init__(self, client, max_wait, request):
        self._client = client  # A sync Client: the async form runs its calls in a thread.
        self._max_wait = max_wait
        self._request = request
        self.decision = None

    def __enter__(self):
        # The warning of an acquire no rule matched points at the `with` line.
        return self._take(stacklevel=4)

    def _take(self, stacklevel):
        decision = self._client._acquire(self._max_wait, self._request, stacklevel=stacklevel)
        if not decision.allowed:
            raise RateLimited(decision, "lease")
        self.decision = decision
        return decision

    def __exit__(self, *exc):
        token = self.decision.lease if self.decision is not None else None
        self.decision = None
        if token is not None:
            try:
                self._client.release(token)
            except Exception as e:  # Logged: the block's own exception, if any, goes on.
                log.warning("sluice: lease not released (%s: %s); it ends at its lease_ttl",
                            type(e).__name__, e)
        return False  # The block's exception, if any, goes on.

    async def __aenter__(self):
        # The acquire runs in a thread, which a cancellation cannot stop: shielded, it goes on,
        # and a lease it is granted after all is given back at once (the block never runs).
        acquiring = asyncio.ensure_future(asyncio.to_thread(self._take, None))
        try:
            decision = await asyncio.shield(acquiring)
        except asyncio.CancelledError:
            acquiring.add_done_callback(self._give_back_late)
            raise
        warn_if_unmatched(decision, self._request, 2)  # At the `async with` line.
        return decision

    def _give_back_late(self, acquiring):
        if not acquiring.cancelled() and acquiring.exception() is None:
            acquiring.get_loop().run_in_executor(None, self.__exit__, None, None, None)

    async def __aexit__(self, *exc):
        return await asyncio.to_thread(self.__exit__, *exc)
