"""The client for asyncio: the same calls as Client, awaited. Each runs the sync client's
call in a worker thread (asyncio.to_thread), so that both share one implementation; the event
loop is never blocked, and an acquire's wait holds a thread of the default executor, not the
loop."""

import asyncio
import dataclasses

from .client import Client
from .errors import warn_if_unmatched
from .lease import Lease
from .metered import Meter


class AsyncClient:
    """`AsyncClient(url, timeout=1.0, on_error="deny")`: see Client."""

    def __init__(self, url="http://127.0.0.1:8080", **options):
        self.sync = Client(url, **options)

    async def check(self, **kwargs):
        return self._settleable(await asyncio.to_thread(self.sync.check, **kwargs))

    async def acquire(self, max_wait=30.0, **kwargs):
        decision = await asyncio.to_thread(self.sync._acquire, max_wait, kwargs, None)
        warn_if_unmatched(decision, kwargs, 2)  # Here, not in the thread: the caller's line.
        return self._settleable(decision)

    def _settleable(self, decision):
        """A decision asked with receipt=True, whose settle() is then awaited."""
        if decision._settle is None:
            return decision
        settle = decision._settle  # The sync client's, run in a thread.

        async def settle_in_a_thread(receipt, cost):
            return await asyncio.to_thread(settle, receipt, cost)

        return dataclasses.replace(decision, _settle=settle_in_a_thread)

    async def feedback(self, status=None, headers=(), **kwargs):
        return await asyncio.to_thread(self.sync.feedback, status, headers, **kwargs)

    async def settle(self, receipt, cost):
        """As Client.settle."""
        return await asyncio.to_thread(self.sync.settle, receipt, cost)

    async def reset(self, admin_token=None, **kwargs):
        """As Client.reset."""
        return await asyncio.to_thread(self.sync.reset, admin_token, **kwargs)

    def metered(self, cost=1, max_wait=None, on_exception="refund", **kwargs):
        """`async with client.metered(..., cost=estimate) as m:`, as Client.metered."""
        return Meter(self.sync, cost, max_wait, on_exception, kwargs)

    async def release(self, lease):
        return await asyncio.to_thread(self.sync.release, lease)

    def close(self):
        """Closes the connections (of the executor's threads too)."""
        self.sync.close()

    def lease(self, max_wait=30.0, **kwargs):
        """`async with client.lease(...):`, as Client.lease."""
        return Lease(self.sync, max_wait, kwargs)
