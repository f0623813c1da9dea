'use strict';
// Express (and Connect) middleware: each request takes its turn from a sluiced limit keyed by
// `key(req)` (the address, a user), as express-rate-limit users expect: the RateLimit headers
// on every answer, and 429 with Retry-After once over the limit. With `countOnly`, a request
// is checked with a receipt before its handler and refunded (settled at cost 0) once its
// response has gone out, when it is not of the kind counted: express-rate-limit's
// skipSuccessfulRequests ('failures') and skipFailedRequests ('successes').

const COUNT_ONLY = ['failures', 'successes'];

/**
 * sluice.middleware({client, key: (req) => req.ip, limit, period, algorithm, burst, cost})
 * for an ad hoc limit, or {client, domain, descriptors: (req) => [{user: ...}]} for rules.
 * `onLimited(req, res, next, decision)` answers a denial (default: 429, JSON). When sluiced
 * cannot decide, the client's onError policy applies: 'allow' lets the request through with
 * no headers, 'deny' answers 503.
 * `countOnly: 'failures'` counts only the requests that fail (a login limit: failed logins
 * only), 'successes' only those that succeed; `succeeded(req, res)` says which a finished
 * request was (default: status below 400). A response that never finishes (the client went
 * away) counts as a failure.
 */
function middleware(options) {
  const { client, key, descriptors, onLimited, countOnly, succeeded, ...limit } = options || {};
  if (!client || typeof client.check !== 'function') {
    throw new TypeError('sluice.middleware needs {client: new sluice.Client({url})}');
  }
  if ((typeof key === 'function') === (typeof descriptors === 'function')) {
    throw new TypeError('sluice.middleware needs key: (req) => ... or descriptors: (req) => [...]');
  }
  if (countOnly !== undefined && !COUNT_ONLY.includes(countOnly)) {
    throw new TypeError(`sluice.middleware: countOnly is 'failures' or 'successes', not ${String(countOnly)}`);
  }
  if (succeeded !== undefined && typeof succeeded !== 'function') {
    throw new TypeError('sluice.middleware: succeeded is a function (req, res) => boolean');
  }
  const denied = onLimited || defaultLimited;
  const wasSuccess = succeeded || ((req, res) => res.statusCode < 400);

  return function sluiceLimit(req, res, next) {
    let request;
    try {
      if (key) {
        const k = key(req);
        if (typeof k !== 'string' || k === '') {
          throw new TypeError(`sluice.middleware: key(req) gave ${JSON.stringify(k)}, not a string`);
        }
        request = { ...limit, key: k };
      } else {
        request = { ...limit, descriptors: descriptors(req) };
      }
      if (countOnly) request.receipt = true;
    } catch (e) {
      next(e);
      return;
    }
    client.check(request).then((decision) => {
      for (const [name, value] of Object.entries(decision.headers)) res.setHeader(name, value);
      if (decision.allowed) {
        if (countOnly && decision.receipt) refundUncounted(req, res, decision, countOnly, wasSuccess);
        next();
      } else if (decision.error) {
        res.statusCode = 503;
        res.setHeader('Retry-After', String(Math.max(1, Math.ceil(decision.retryAfter))));
        res.setHeader('Content-Type', 'application/json');
        res.end(JSON.stringify({ error: 'the rate limit service cannot be reached' }));
      } else {
        denied(req, res, next, decision);
      }
    }, next);
  };
}

// Once the response has gone out (or the connection closed before it did), a request not of
// the kind counted is refunded. A settle that fails is a console.warn: the response is gone,
// and the request then stays counted.
function refundUncounted(req, res, decision, countOnly, wasSuccess) {
  let done = false;
  const settle = (finished) => {
    if (done) return;
    done = true;
    let success = false;
    try {
      success = finished && Boolean(wasSuccess(req, res));
    } catch (e) {
      console.warn(`sluice: succeeded(req, res) threw (${e.message}); counted as a failure`);
    }
    if (success === (countOnly === 'successes')) return; // Counted: the charge stands.
    decision.settle(0).then((settlement) => {
      if (settlement && !settlement.settled) {
        console.warn(`sluice: request not refunded (${settlement.error}); it stays counted`);
      }
    }, (e) => console.warn(`sluice: request not refunded (${e.name}: ${e.message}); it stays counted`));
  };
  res.once('finish', () => settle(true));
  res.once('close', () => settle(res.writableFinished));
}

function defaultLimited(req, res, next, decision) {
  res.statusCode = 429;
  res.setHeader('Content-Type', 'application/json');
  res.end(JSON.stringify({
    error: 'too many requests',
    retryAfter: decision.never ? null : decision.retryAfter,
  }));
}

module.exports = { middleware };
