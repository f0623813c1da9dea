"""Calls to a partner (a third-party API) that pace themselves through sluiced: before each
call the worker acquires its turn (Client.acquire, waiting on the server up to max_wait),
and after it tells sluiced what the partner answered (Client.feedback), so that a 429 one
worker gets pauses the whole fleet (docs/python.md, "Pacing calls to a partner").

    session = requests.Session()
    session.mount("https://api.partner.example/",
                  sluice.adapters.requests_adapter(client, domain="jobs",
                                                   descriptors=[{"partner": "acme"}]))

    with httpx.Client(transport=sluice.adapters.httpx_transport(
            client, domain="jobs", descriptors=[{"partner": "acme"}])) as http:
        http.get("https://api.partner.example/v1/orders")

requests and httpx are imported only when an adapter is made: the rest of the client needs
neither. A call that sluiced denies within max_wait raises sluice.RateLimited, and does not
go out; an answer with no 429/503 and no rate limit header is not told (no call to sluiced).
"""

import logging

from .errors import RateLimited, SluiceError

log = logging.getLogger("sluice")

# A check's arguments that are not the limit's keys: the turn takes them, the feedback not.
_CHECK_ONLY = ("cost", "receipt", "max_debt")


def _keys(limit):
    return {name: value for name, value in limit.items() if name not in _CHECK_ONLY}


def _take_turn(client, max_wait, limit):
    decision = client.acquire(max_wait, **limit)
    if not decision.allowed:
        raise RateLimited(decision, "call to the partner")
    return decision


def _tell(client, status, headers, limit):
    """Client.feedback, after the call has gone out: its answer is the caller's whatever
    sluiced says, so a refusal is logged, never raised over it."""
    try:
        client.feedback(status, headers, **_keys(limit))
    except (SluiceError, TypeError, ValueError) as e:
        log.warning("sluice: the partner's answer was not told (%s)", e)


def requests_adapter(client, max_wait=30.0, **limit):
    """A requests HTTPAdapter (mount it on a Session) whose every call takes its turn under
    `limit` (a check's arguments: domain= and descriptors=, or an ad hoc key= with
    feedback=True) and tells the partner's answer. Other arguments of HTTPAdapter: none;
    subclass it for retries."""
    import requests.adapters

    class SluiceAdapter(requests.adapters.HTTPAdapter):
        def send(self, request, **kwargs):
            _take_turn(client, max_wait, limit)
            response = super().send(request, **kwargs)
            _tell(client, response.status_code, response.headers.items(), limit)
            return response

    return SluiceAdapter()


def httpx_transport(client, transport=None, max_wait=30.0, **limit):
    """An httpx transport (httpx.Client(transport=...)) around `transport` (default
    httpx.HTTPTransport()) whose every call takes its turn under `limit` and tells the
    partner's answer, as requests_adapter."""
    import httpx

    inner = transport if transport is not None else httpx.HTTPTransport()

    class SluiceTransport(httpx.BaseTransport):
        def handle_request(self, request):
            _take_turn(client, max_wait, limit)
            response = inner.handle_request(request)
            _tell(client, response.status_code, response.headers.multi_items(), limit)
            return response

        def close(self):
            inner.close()

    return SluiceTransport()


def httpx_async_transport(client, transport=None, max_wait=30.0, **limit):
    """httpx_transport for httpx.AsyncClient, with a sluice.AsyncClient: the turn and the
    feedback are awaited (each in a worker thread), never blocking the loop."""
    import httpx

    inner = transport if transport is not None else httpx.AsyncHTTPTransport()

    class SluiceAsyncTransport(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request):
            decision = await client.acquire(max_wait, **limit)
            if not decision.allowed:
                raise RateLimited(decision, "call to the partner")
            response = await inner.handle_async_request(request)
            try:
                await client.feedback(response.status_code, response.headers.multi_items(),
                                      **_keys(limit))
            except (SluiceError, TypeError, ValueError) as e:
                log.warning("sluice: the partner's answer was not told (%s)", e)
            return response

        async def aclose(self):
            await inner.aclose()

    return SluiceAsyncTransport()
