"""A lease of a concurrency limit held for the length of a block (docs/server.md,
"Concurrency limits: leases"): taken by /v1/acquire on entry, given back by /v1/release on
exit, whether the block returned or raised. A lease that cannot be given back (sluiced gone)
ends by itself at its lease_ttl."""

import asyncio

from .errors import RateLimited


class Lease:
    """`with client.lease(...) as decision:` (or `async with` on an AsyncClient's). The value
    is the acquire's Decision; `decision.lease` is None when the on_error policy admitted the
    block without sluiced, or when no concurrency limit applied."""

    def __init__(self, client, max_wait, request):
        self._client = client  # A sync Client: the async form runs its calls in a thread.
        self._max_wait = max_wait
        self._request = request
        self.decision = None

    def __enter__(self):
        decision = self._client.acquire(max_wait=self._max_wait, **self._request)
        if not decision.allowed:
            raise RateLimited(decision, "lease")
        self.decision = decision
        return decision

    def __exit__(self, *exc):
        token = self.decision.lease if self.decision is not None else None
        self.decision = None
        if token is not None:
            self._client.release(token)
        return False  # The block's exception, if any, goes on.

    async def __aenter__(self):
        return await asyncio.to_thread(self.__enter__)

    async def __aexit__(self, *exc):
        return await asyncio.to_thread(self.__exit__, *exc)
