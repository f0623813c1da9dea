"""The client of sluiced over HTTP/1.1, standard library only.

One keep-alive connection per thread (http.client's connections are not thread-safe), opened
when first needed and opened again when sluiced has closed it (it closes idle ones after 60 s).
Fork-safe: a child of fork() (a Celery prefork worker whose parent used the client) opens
connections of its own and never touches the parent's sockets, which it shares.
Every call either returns a Decision or, for a request sluiced refused as malformed (HTTP 400
only), raises BadRequest: an unreachable sluiced, a timeout or a 5xx answer is a Decision whose `error`
says what happened and whose `allowed` is the `on_error` policy.
"""

import dataclasses
import http.client
import json
import logging
import os
import threading
import urllib.parse

from . import decision as decisions
from . import partner
from . import request
from .errors import BadRequest, Forbidden, SluiceError, warn_if_unmatched
from .lease import Lease
from .metered import Meter

log = logging.getLogger("sluice")

_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class Client:
    """sluiced at `url` ("http://127.0.0.1:8080"). `timeout`: seconds for each call (an
    acquire adds its max_wait). `on_error`: "deny" or "allow", the answer when sluiced cannot
    decide. `error_retry_after`: the retry_after (seconds) of such a denial."""

    def __init__(self, url="http://127.0.0.1:8080", timeout=1.0, on_error="deny",
                 error_retry_after=1.0):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("url must be http://HOST:PORT or https://HOST:PORT, not %r" % url)
        if on_error not in ("allow", "deny"):
            raise ValueError("on_error must be 'allow' or 'deny', not %r" % (on_error,))
        if timeout <= 0 or error_retry_after < 0:
            raise ValueError("timeout must be positive and error_retry_after not negative")
        self.url = url
        self.timeout = float(timeout)
        self.on_error = on_error
        self.error_retry_after = float(error_retry_after)
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections = set()  # Every thread's, for close().
        self._pid = os.getpid()  # Whose connections these are (see _forked).

    def check(self, **kwargs):
        """POST /v1/check: ad hoc (key=, limit=, period=, algorithm=, burst=, buckets=, cost=,
        max_debt=, block=) or rules (domain=, descriptors=[{"user": "bob"}], cost=). Returns a
        Decision; with receipt=True, one whose settle() settles the real cost later."""
        decision = self._decide("/v1/check", request.body(**kwargs), self.timeout)
        return self._settleable(decision, kwargs)

    def _settleable(self, decision, kwargs):
        """`decision`, settleable (Decision.settle) when it was asked with receipt=True."""
        if kwargs.get("receipt") is not True:
            return decision
        return dataclasses.replace(decision, _settle=self._settle_receipt)

    def _settle_receipt(self, receipt, cost):
        """Decision.settle: None when the decision holds no receipt (nothing was charged)."""
        request.settle_cost(cost)  # A wrong cost is a bug even when there is nothing to settle.
        return None if receipt is None else self.settle(receipt, cost)

    def settle(self, receipt, cost):
        """POST /v1/settle: settles the request `receipt` (Decision.receipt) was charged for at
        `cost` units, 0 being a refund: what the check charged above `cost` is given back, what
        it charged below is charged on top (past the limit, up to max_debt). Returns a
        Settlement. Raises BadRequest when sluiced refuses the receipt, naming why (settled
        already, expired, forged, malformed): a receipt settles once. When sluiced cannot be
        asked, the Settlement is falsy, with `error` set (and a warning logged): the check's
        charge then stands."""
        if not isinstance(receipt, str):
            # The type alone: the value may be a token, which errors and logs must not hold.
            raise TypeError("receipt is the token of Decision.receipt, not a %s"
                            % type(receipt).__name__)
        cost = request.settle_cost(cost)
        status, answer, error = self._post("/v1/settle", {"receipt": receipt, "cost": cost},
                                           self.timeout)
        if error is None and status == 200:
            try:
                return decisions.settlement_from_answer(status, answer)
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                error = "not a settlement (%s): %.200r" % (e, answer)
        elif error is None and status == 400:  # Only sluiced's refusal: see _decide.
            raise BadRequest(str(answer.get("error", answer)), status)
        elif error is None:
            error = "HTTP %d: %s" % (status, answer.get("error", answer))
        log.warning("sluice: receipt not settled (%s); the check's charge stands", error)
        return decisions.Settlement(settled=False, cost=cost, status=status, error=error)

    def metered(self, cost=1, max_wait=None, on_exception="refund", **kwargs):
        """A context manager that charges `cost` (an estimate) on entry and settles the real
        cost on exit: `with client.metered(key=..., cost=estimate) as m: ...; m.cost = real`.
        On entry, a check with a receipt (with max_wait, an acquire waiting up to that long);
        RateLimited when denied, and the block does not run. On exit, the cost the block set
        is settled; a block that set none keeps the estimate, unless it raised: then
        on_exception="refund" (the default) settles 0, "keep" keeps the estimate. See Meter."""
        return Meter(self, cost, max_wait, on_exception, kwargs)

    def reset(self, admin_token=None, **kwargs):
        """POST /v1/reset: the keys of a check's arguments (without cost) start afresh on every
        limit they name. Needs sluiced's admin token (--admin-token-file), sent as a bearer
        token. Returns the names of the limits reset. Raises Forbidden when sluiced refuses
        the token (none, a wrong one, or admin endpoints off), BadRequest for a malformed
        request, SluiceError when sluiced cannot be asked."""
        if admin_token is not None and not isinstance(admin_token, str):
            raise TypeError("admin_token is a string, not a %s" % type(admin_token).__name__)
        headers = {} if admin_token is None else {"Authorization": "Bearer " + admin_token}
        status, answer, error = self._post("/v1/reset", request.keys(**kwargs), self.timeout,
                                           headers)
        if error is None and status == 200 and answer.get("reset") is True:
            return [e.get("name", "") for e in answer.get("limits") or []
                    if isinstance(e, dict)]
        if error is None and status == 400:
            raise BadRequest(str(answer.get("error", answer)), status)
        if error is None and status in (401, 403):
            raise Forbidden(str(answer.get("error", answer)), status)
        raise SluiceError("sluiced did not reset: %s"
                          % (error or "HTTP %d: %.200s" % (status, answer.get("error", answer))))

    def feedback(self, status=None, headers=(), **kwargs):
        """POST /v1/feedback: tells sluiced what the partner answered (its HTTP `status`, its
        `headers` as a mapping or (name, value) pairs), for the limits a check's arguments
        name (without cost), so that every worker of the fleet acts on it: a 429 pauses them,
        a lower remaining brings theirs down (docs/server.md). Only the rate limit headers are
        sent (partner.RATE_HEADERS). Returns a Feedback; when the answer says nothing about
        limits, an empty one, without asking sluiced. Raises BadRequest for a malformed
        request; when sluiced cannot be asked, the Feedback is falsy with `error` set (and a
        warning logged)."""
        pairs = partner.worth_telling(status, headers)
        if pairs is None:
            return partner.Feedback(told=False)
        body = request.keys(**kwargs)
        body["partner"] = {"headers": pairs}
        if status is not None:
            body["partner"]["status"] = int(status)
        code, answer, error = self._post("/v1/feedback", body, self.timeout)
        if error is None and code == 200:
            try:
                return partner.from_answer(answer)
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                error = "not a feedback answer (%s): %.200r" % (e, answer)
        elif error is None and code == 400:
            raise BadRequest(str(answer.get("error", answer)), code)
        elif error is None:
            error = "HTTP %d: %s" % (code, answer.get("error", answer))
        log.warning("sluice: the partner's answer was not told (%s)", error)
        return partner.Feedback(told=False, error=error)

    def acquire(self, max_wait=30.0, **kwargs):
        """POST /v1/acquire: waits on the server, up to `max_wait` (seconds or "30s"), until
        the request may go ahead, charged then. The arguments of check(). Warns
        (UnmatchedWarning) when no rule matched: nothing then limits what it admits."""
        return self._acquire(max_wait, kwargs, stacklevel=3)

    def _acquire(self, max_wait, kwargs, stacklevel):
        """acquire(), its warning pointed `stacklevel` frames up (the caller's line); None: no
        warning here (the async client, whose call runs in a thread, warns on its own line)."""
        body = request.body(max_wait=max_wait, **kwargs)
        wait = request.duration(max_wait, "max_wait")
        decision = self._decide("/v1/acquire", body, self.timeout + _seconds_of(wait))
        decision = self._settleable(decision, kwargs)
        if stacklevel is not None:
            warn_if_unmatched(decision, kwargs, stacklevel)
        return decision

    def release(self, lease):
        """POST /v1/release: gives a lease back. True when it was held, False when it had
        expired or was released already, None when sluiced could not be asked."""
        if not isinstance(lease, str):
            raise TypeError("lease is the token of Decision.lease, not %r" % (lease,))
        status, answer, error = self._post("/v1/release", {"lease": lease}, self.timeout)
        if error is None and status == 200 and isinstance(answer.get("released"), bool):
            return answer["released"]
        if error is None and status == 400:  # Only sluiced's "malformed": see _decide.
            raise BadRequest(str(answer.get("error", answer)), status)
        log.warning("sluice: lease not released (%s); it ends at its lease_ttl",
                    error or "HTTP %d" % status)
        return None

    def lease(self, max_wait=30.0, **kwargs):
        """A context manager holding a lease of a concurrency limit while its block runs:
        `with client.lease(domain="api", descriptors=[{"export": "csv"}]):`. Raises
        RateLimited when none is granted within max_wait; gives it back however the block
        ends."""
        return Lease(self, max_wait, kwargs)

    def close(self):
        """Closes the connections of every thread (call it when no call is in flight); a
        later call opens a new one. In a child of fork(), never the parent's."""
        if os.getpid() != self._pid:
            self._forked(os.getpid())
        with self._lock:
            connections, self._connections = self._connections, set()
        for conn in connections:
            conn.close()
        self._local.conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _decide(self, path, body, timeout):
        status, answer, error = self._post(path, body, timeout)
        if error is None and status in (200, 429):
            try:
                return decisions.from_answer(status, answer)
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                error = "not a decision (%s): %.200r" % (e, answer)
        elif error is None and status == 400:
            # A malformed call, which no retry fixes. Any other 4xx (a proxy's 403, 404, 408,
            # 413, a wrong path prefix in the url) is a sluiced that cannot be reached: the
            # on_error policy, like a 5xx.
            raise BadRequest(str(answer.get("error", answer)), status)
        elif error is None:
            error = "HTTP %d: %s" % (status, answer.get("error", answer))
        return decisions.failed(error, self.on_error == "allow", self.error_retry_after)

    def _post(self, path, body, timeout, headers=None):
        """(status, answer object, None), or (None, None, the error) when there is no answer."""
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **(headers or {})}
        for attempt in (0, 1):
            conn, reused = self._connection(timeout)
            try:
                conn.request("POST", self._prefix + path, data, headers)
                response = conn.getresponse()
                raw = response.read()
            except _STALE as e:
                self._forget(conn)
                if reused and attempt == 0:
                    continue  # sluiced closed the idle connection: once more on a new one.
                return None, None, "%s: %s" % (type(e).__name__, e)
            except (OSError, http.client.HTTPException) as e:
                self._forget(conn)
                return None, None, "%s: %s" % (type(e).__name__, e or "timed out")
            try:
                answer = json.loads(raw)
            except ValueError:
                answer = None
            if not isinstance(answer, dict):
                self._forget(conn)  # Whatever answered is not sluiced: not kept.
                return None, None, "HTTP %d, not a JSON object: %.200r" % (response.status, raw)
            return response.status, answer, None
        return None, None, "no answer"

    def _forget(self, conn):
        conn.close()
        self._local.conn = None
        with self._lock:
            self._connections.discard(conn)

    def _connection(self, timeout):
        pid = os.getpid()
        if pid != self._pid:
            self._forked(pid)
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            return conn, True
        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=timeout)
        self._local.conn = conn
        with self._lock:
            self._connections.add(conn)
        return conn, False

    def _forked(self, pid):
        """In a child of fork(): the parent's connections (sockets both processes hold) stay
        the parent's, neither used nor closed here; the child starts with none, and a new lock
        (the parent's may have been held by another thread at the fork)."""
        self._pid = pid
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections = set()


def _seconds_of(duration):
    """Seconds in a duration string (us, ms, s, m, h, d); 0 for one the server will refuse."""
    units = (("us", 1e-6), ("ms", 1e-3), ("s", 1.0), ("m", 60.0), ("h", 3600.0), ("d", 86400.0))
    for suffix, scale in units:
        number = duration[:-len(suffix)]
        if duration.endswith(suffix) and number.isdigit():
            return int(number) * scale
    return 0.0
