"""@limited: a plain function (or coroutine function) that takes its turn from a sluiced
limit before each call, waiting for it on the server or raising RateLimited."""

import asyncio
import functools

from .errors import RateLimited


def limited(client, wait=True, max_wait=30.0, **limit):
    """Decorates a function so that each call first asks `client` (a Client or AsyncClient).

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
        if asyncio.iscoroutinefunction(function):
            @functools.wraps(function)
            async def waiting(*args, **kwargs):
                r = request(args, kwargs)
                d = await (client.acquire(max_wait, **r) if wait else client.check(**r))
                if not d.allowed:
                    raise RateLimited(d, name)
                return await function(*args, **kwargs)
            return waiting

        @functools.wraps(function)
        def call(*args, **kwargs):
            r = request(args, kwargs)
            d = client.acquire(max_wait, **r) if wait else client.check(**r)
            if not d.allowed:
                raise RateLimited(d, name)
            return function(*args, **kwargs)
        return call

    return decorate
