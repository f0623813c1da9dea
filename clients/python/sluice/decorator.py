"""@limited: a plain function (or coroutine function) that takes its turn from a sluiced
limit before each call, waiting for it on the server or raising RateLimited."""

import asyncio
import functools

from .aio import AsyncClient
from .client import Client
from .errors import RateLimited


def limited(client, wait=True, max_wait=30.0, **limit):
    """Decorates a function so that each call first asks `client` (a Client or AsyncClient,
    either for a plain function or a coroutine function: a coroutine's sync Client runs in a
    thread, a plain function's AsyncClient is called through its own sync Client).

    `limit` is what check() takes (key=, limit=, period=, algorithm=, ... or domain=,
    descriptors=); `key` may also be a callable, given the call's arguments, that returns the
    key (`key=lambda user, *a, **k: user`). With wait=True the call waits on the server
    (/v1/acquire) up to max_wait; otherwise it asks once (/v1/check). Either way a denial
    raises RateLimited, and the function does not run.
    """
    key = limit.get("key")

    def request(args, kwargs):
        if callable(key):
            return dict(limit, key=key(*args, **kwargs))
        return limit

    def decorate(function):
        name = getattr(function, "__qualname__", "call")
        sync = _sync_client(client)
        if asyncio.iscoroutinefunction(function):
            @functools.wraps(function)
            async def waiting(*args, **kwargs):
                r = request(args, kwargs)
                if sync is client:  # A sync Client: its call in a thread, never on the loop.
                    d = await asyncio.to_thread(ask, sync, r)
                else:
                    d = await (client.acquire(max_wait, **r) if wait else client.check(**r))
                if not d.allowed:
                    raise RateLimited(d, name)
                return await function(*args, **kwargs)
            return waiting

        @functools.wraps(function)
        def call(*args, **kwargs):
            d = ask(sync, request(args, kwargs))  # An AsyncClient's own sync Client.
            if not d.allowed:
                raise RateLimited(d, name)
            return function(*args, **kwargs)
        return call

    def ask(sync, r):
        return sync.acquire(max_wait, **r) if wait else sync.check(**r)

    return decorate


def _sync_client(client):
    """The sync Client that serves `client`: itself, or an AsyncClient's. Refuses anything
    else at decoration time, not at the first call."""
    if isinstance(client, Client):
        return client
    if isinstance(client, AsyncClient):
        return client.sync
    raise TypeError("@limited needs a sluice Client or AsyncClient, not %r" % (client,))
