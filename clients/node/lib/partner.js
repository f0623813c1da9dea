'use strict';
// What a partner (the third-party API a fleet's workers call) answered, told to sluiced so
// that every worker acts on it (POST /v1/feedback, docs/server.md): a 429's pause, a lower
// remaining. Only the status and the rate limit headers leave the worker: a partner's other
// headers (cookies, tokens, ids) are never sent to sluiced.

const { RateLimited } = require('./errors');

// The headers sluiced reads (server/http/partner_headers.h), lower case.
const RATE_HEADERS = new Set([
  'retry-after', 'retry-after-ms', 'ratelimit', 'ratelimit-policy', 'ratelimit-limit',
  'ratelimit-remaining', 'ratelimit-reset', 'x-ratelimit-limit', 'x-ratelimit-remaining',
  'x-ratelimit-reset', 'x-ratelimit-reset-after', 'x-rate-limit-limit',
  'x-rate-limit-remaining', 'x-rate-limit-reset',
]);

/** The [name, value] pairs of `headers` (a fetch Headers, an object, or [name, value] pairs)
 * that sluiced reads; null when the answer says nothing about limits (no such header, a status
 * other than 429 and 503), so that no call to sluiced is made for it. */
function worthTelling(status, headers) {
  let entries;
  if (headers && typeof headers.entries === 'function' && !Array.isArray(headers)) entries = [...headers.entries()];
  else if (Array.isArray(headers)) entries = headers;
  else entries = Object.entries(headers || {});
  const pairs = entries
    .filter(([name]) => RATE_HEADERS.has(String(name).toLowerCase()))
    .map(([name, value]) => [String(name), String(value)]);
  if (pairs.length === 0 && status !== 429 && status !== 503) return null;
  return pairs;
}

/** A fetch(url, init) that paces itself through sluiced: each call first acquires its turn
 * under `limit` (a check's options: {domain, descriptors} or an ad hoc {key, limit, period,
 * feedback: true}), waiting on the server up to `maxWait`, and after it tells sluiced what the
 * partner answered. Rejects with RateLimited, without calling, when no turn comes within
 * maxWait. `fetch` defaults to Node's own. */
function pacedFetch(client, limit, { maxWait = 30, fetch: inner = globalThis.fetch } = {}) {
  return async (input, init) => {
    const decision = await client.acquire({ maxWait, ...limit });
    if (!decision.allowed) throw new RateLimited(decision, 'call to the partner');
    const response = await inner(input, init);
    // The call has gone out: its answer is the caller's whatever sluiced says of it.
    const { cost, receipt, maxDebt, ...keys } = limit; // eslint-disable-line no-unused-vars
    try {
      await client.feedback(response.status, response.headers, keys);
    } catch (e) {
      console.warn(`sluice: the partner's answer was not told (${e.message})`);
    }
    return response;
  };
}

module.exports = { RATE_HEADERS, worthTelling, pacedFetch };
