"""The bodies of sluiced's requests (docs/server.md, HTTP API), built from the client's
keyword arguments. Mistakes the client can see (no key and no domain, a descriptor that is
not a mapping) raise TypeError or ValueError here, before anything is sent."""

import numbers


def duration(value, name):
    """A duration for sluiced: a string as it is ("1s", "500ms"), or a number of seconds,
    sent as whole microseconds."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("%s must be a duration string ('1s') or seconds, not %r" % (name, value))
    if value < 0 or value != value:
        raise ValueError("%s must not be negative, not %r" % (name, value))
    micros = round(value * 1_000_000)
    return "%ds" % (micros // 1_000_000) if micros % 1_000_000 == 0 else "%dus" % micros


def _entries(descriptor):
    """One descriptor (a mapping, its entries in order, or a sequence of (key, value) pairs)
    as sluiced's entries."""
    pairs = descriptor.items() if hasattr(descriptor, "items") else descriptor
    entries = []
    for pair in pairs:
        if isinstance(pair, (str, bytes)) or len(pair) != 2:
            raise TypeError("a descriptor is a dict {key: value} or (key, value) pairs, not %r"
                            % (descriptor,))
        key, value = pair
        if not isinstance(key, str) or not isinstance(value, (str, int)) or isinstance(value, bool):
            raise TypeError("descriptor entries are str keys with str values, not %r: %r"
                            % (key, value))
        entries.append({"key": key, "value": str(value)})
    return {"entries": entries}


def body(key=None, algorithm=None, limit=None, period=None, burst=None, buckets=None, cost=None,
         domain=None, descriptors=None, max_wait=None, receipt=False, max_debt=None, block=None,
         feedback=None):
    """The JSON object of /v1/check or, with max_wait, /v1/acquire: ad hoc when `key` is given,
    rules mode when `domain` is. `receipt`: ask for a receipt to settle later; `max_debt`
    (ad hoc): how far past the limit a settle may charge the key; `block` (ad hoc): how long a
    denial shuts the key out."""
    out = keys(key=key, algorithm=algorithm, limit=limit, period=period, burst=burst,
               buckets=buckets, domain=domain, descriptors=descriptors, block=block,
               feedback=feedback)
    if max_debt is not None:
        if key is None:
            raise TypeError("max_debt is for ad hoc checks; rules mode takes it from the rules")
        out["max_debt"] = max_debt
    if cost is not None:
        out["cost"] = cost
    if max_wait is not None:
        out["max_wait"] = duration(max_wait, "max_wait")
    if not isinstance(receipt, bool):
        raise TypeError("receipt is True or False, not %r" % (receipt,))
    if receipt:
        out["receipt"] = True
    return out


def keys(key=None, algorithm=None, limit=None, period=None, burst=None, buckets=None,
         domain=None, descriptors=None, block=None, feedback=None):
    """The part of a body that names the keys and their limits (that of POST /v1/reset and
    /v1/feedback): ad hoc when `key` is given, rules mode when `domain` is. An ad hoc limit's
    `block` and `feedback` (True, or {"max_pause": "10m", "pause": "1s"}: its partner's
    answers pace it) are part of it: a reset lifts the block and pause of the limit it names."""
    if (key is None) == (domain is None):
        raise TypeError("give either key= (an ad hoc limit) or domain= and descriptors= (rules)")
    if key is not None:
        if limit is None or period is None:
            raise TypeError("an ad hoc check needs limit= and period=")
        out = {"key": key, "limit": limit, "period": duration(period, "period")}
        for name, value in (("algorithm", algorithm), ("burst", burst), ("buckets", buckets)):
            if value is not None:
                out[name] = value
        if block is not None:
            out["block"] = duration(block, "block")
        out.update(_feedback(feedback))
    else:
        if any(v is not None for v in (algorithm, limit, period, burst, buckets, block, feedback)):
            raise TypeError("algorithm, limit, period, burst, buckets, block and feedback are for "
                            "ad hoc checks; rules mode takes its limits from the rules")
        if descriptors is None or isinstance(descriptors, (str, bytes)) or hasattr(descriptors, "items"):
            raise TypeError("descriptors= is a list of descriptors, each a dict")
        out = {"domain": domain, "descriptors": [_entries(d) for d in descriptors]}
    return out


def _feedback(feedback):
    """An ad hoc limit's feedback fields: none, {"feedback": True}, or with its durations."""
    if feedback is None or feedback is False:
        return {}
    if feedback is True:
        return {"feedback": True}
    if not hasattr(feedback, "items") or set(feedback) - {"max_pause", "pause"}:
        raise TypeError("feedback is True or {'max_pause': ..., 'pause': ...}, not %r"
                        % (feedback,))
    out = {"feedback": True}
    for name, value in feedback.items():
        out[name] = duration(value, name)
    return out


def settle_cost(cost):
    """A settle's cost: a whole number of units, 0 or more (0 is a refund)."""
    if isinstance(cost, bool) or not isinstance(cost, numbers.Integral):
        raise TypeError("cost is a whole number of units, not %r" % (cost,))
    if cost < 0:
        raise ValueError("cost must not be negative (0 is a refund), not %r" % (cost,))
    return int(cost)
