'use strict';
// Express (and Connect) middleware: each request takes its turn from a sluiced limit keyed by
// `key(req)` (the address, a user), as express-rate-limit users expect: the RateLimit headers
// on every answer, and 429 with Retry-After once over the limit.

/**
 * sluice.middleware({client, key: (req) => req.ip, limit, period, algorithm, burst, cost})
 * for an ad hoc limit, or {client, domain, descriptors: (req) => [{user: ...}]} for rules.
 * `onLimited(req, res, next, decision)` answers a denial (default: 429, JSON). When sluiced
 * cannot decide, the client's onError policy applies: 'allow' lets the request through with
 * no headers, 'deny' answers 503.
 */
function middleware(options) {
  const { client, key, descriptors, onLimited, ...limit } = options || {};
  if (!client || typeof client.check !== 'function') {
    throw new TypeError('sluice.middleware needs {client: new sluice.Client({url})}');
  }
  if ((typeof key === 'function') === (typeof descriptors === 'function')) {
    throw new TypeError('sluice.middleware needs key: (req) => ... or descriptors: (req) => [...]');
  }
  const denied = onLimited || defaultLimited;

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
    } catch (e) {
      next(e);
      return;
    }
    client.check(request).then((decision) => {
      for (const [name, value] of Object.entries(decision.headers)) res.setHeader(name, value);
      if (decision.allowed) {
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

function defaultLimited(req, res, next, decision) {
  res.statusCode = 429;
  res.setHeader('Content-Type', 'application/json');
  res.end(JSON.stringify({
    error: 'too many requests',
    retryAfter: decision.never ? null : decision.retryAfter,
  }));
}

module.exports = { middleware };
