"""The exceptions of the client. A denial is a value (a Decision), never one of these, except
where a caller asked for one: the decorator, a lease, a Celery turn that no wait can cure."""

import warnings


class SluiceError(Exception):
    """Base of the client's exceptions."""


class BadRequest(SluiceError, ValueError):
    """sluiced refused the request as malformed (HTTP 400), naming the problem: a bug in the
    call (an unknown algorithm, a negative cost), which no retry can cure."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


class Forbidden(SluiceError, PermissionError):
    """sluiced refused an admin request (POST /v1/reset): no admin token (`status` 401), a
    wrong one, or admin endpoints off because sluiced runs without --admin-token-file (403).
    The message is sluiced's."""

    def __init__(self, message, status):
        super().__init__(message)
        self.status = status


class RateLimited(SluiceError):
    """Raised where the caller asked for an exception on denial (`@limited(wait=False)`, a
    lease not granted within its wait). `decision` is the answer that denied."""

    def __init__(self, decision, what="request"):
        if decision.error:
            reason = "sluiced could not decide (%s) and the policy is deny" % decision.error
        elif decision.never:
            reason = "it can never be allowed (cost above the limit)"
        else:
            reason = "retry after %.3f s" % decision.retry_after
        super().__init__("%s rate limited: %s" % (what, reason))
        self.decision = decision


class UnmatchedWarning(UserWarning):
    """An acquire or a lease that no rule of sluiced matched (the answer's "unmatched"): it
    was admitted with no limit and no lease, as sluiced admits what no rule names. Most often
    a domain or a descriptor key that the rules file spells otherwise."""


def warn_if_unmatched(decision, kwargs, stacklevel, without="no limit and no lease"):
    """UnmatchedWarning, pointed `stacklevel` frames up, when no rule matched `decision`'s
    request. A warning, not an error: sluiced admits what no rule names, as envoyproxy/ratelimit
    does, and a caller may mean it; but a misspelt domain or key would otherwise run unlimited,
    and, for a lease, without a lease, with nothing to say so."""
    if decision.unmatched:
        warnings.warn("sluice: no rule of sluiced matched domain %r, descriptors %r: "
                      "admitted with %s"
                      % (kwargs.get("domain"), kwargs.get("descriptors"), without),
                      UnmatchedWarning, stacklevel=stacklevel + 1)
