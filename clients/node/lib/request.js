'use strict';
// The bodies of sluiced's requests (docs/server.md, HTTP API). Mistakes the client can see
// throw a TypeError or RangeError here, before anything is sent.

/** A duration for sluiced: a string as it is ("1s", "500ms"), or seconds, sent in whole
 * microseconds. */
function duration(value, name) {
  if (typeof value === 'string') return value;
  if (typeof value !== 'number' || Number.isNaN(value)) {
    throw new TypeError(`${name} must be a duration string ('1s') or seconds, not ${String(value)}`);
  }
  if (value < 0 || !Number.isFinite(value)) {
    throw new RangeError(`${name} must be a finite number of seconds, not negative: ${value}`);
  }
  const micros = Math.round(value * 1e6);
  return micros % 1e6 === 0 ? `${micros / 1e6}s` : `${micros}us`;
}

/** One descriptor (an object, its entries in order, or [key, value] pairs) as entries. */
function entries(descriptor) {
  if (descriptor === null || typeof descriptor !== 'object') {
    throw new TypeError(`a descriptor is an object {key: value}, not ${String(descriptor)}`);
  }
  const pairs = Array.isArray(descriptor) ? descriptor : Object.entries(descriptor);
  return {
    entries: pairs.map((pair) => {
      if (!Array.isArray(pair) || pair.length !== 2 || typeof pair[0] !== 'string'
          || !['string', 'number'].includes(typeof pair[1])) {
        throw new TypeError(`descriptor entries are string keys with string values: ${JSON.stringify(pair)}`);
      }
      return { key: pair[0], value: String(pair[1]) };
    }),
  };
}

/** The JSON object of /v1/check (or, with maxWait, /v1/acquire). `receipt: true` asks for a
 * receipt to settle later; `maxDebt` (ad hoc) bounds how far past the limit a settle may
 * charge the key. */
function body(options, maxWait) {
  const o = options || {};
  const out = keys(o);
  if (o.maxDebt !== undefined) {
    if (o.key === undefined) throw new TypeError('maxDebt is for ad hoc checks; rules mode takes it from the rules');
    out.max_debt = o.maxDebt;
  }
  if (o.cost !== undefined) out.cost = o.cost;
  if (maxWait !== undefined) out.max_wait = duration(maxWait, 'maxWait');
  if (o.receipt !== undefined && typeof o.receipt !== 'boolean') {
    throw new TypeError(`receipt is true or false, not ${String(o.receipt)}`);
  }
  if (o.receipt) out.receipt = true;
  return out;
}

/** The part of a body that names the keys and their limits: that of POST /v1/reset. */
function keys(options) {
  const o = options || {};
  if ((o.key === undefined) === (o.domain === undefined)) {
    throw new TypeError('give either key (an ad hoc limit) or domain and descriptors (rules)');
  }
  const out = {};
  if (o.key !== undefined) {
    if (o.limit === undefined || o.period === undefined) {
      throw new TypeError('an ad hoc check needs limit and period');
    }
    Object.assign(out, { key: o.key, limit: o.limit, period: duration(o.period, 'period') });
    for (const name of ['algorithm', 'burst', 'buckets']) if (o[name] !== undefined) out[name] = o[name];
    // An ad hoc limit's block is part of it: a reset lifts the block of the limit it names.
    if (o.block !== undefined) out.block = duration(o.block, 'block');
    // And its feedback: true, or {maxPause, pause}: its partner's answers pace it (feedback()).
    if (o.feedback === true) out.feedback = true;
    if (o.feedback && typeof o.feedback === 'object') {
      out.feedback = true;
      if (o.feedback.maxPause !== undefined) out.max_pause = duration(o.feedback.maxPause, 'maxPause');
      if (o.feedback.pause !== undefined) out.pause = duration(o.feedback.pause, 'pause');
    }
  } else {
    const adhoc = ['algorithm', 'limit', 'period', 'burst', 'buckets', 'block', 'feedback'];
    if (adhoc.some((n) => o[n] !== undefined)) {
      throw new TypeError('algorithm, limit, period, burst, buckets, block and feedback are for ad hoc checks');
    }
    if (!Array.isArray(o.descriptors)) throw new TypeError('descriptors is an array of descriptors');
    Object.assign(out, { domain: o.domain, descriptors: o.descriptors.map(entries) });
  }
  return out;
}

/** A settle's cost: a whole number of units, 0 or more (0 is a refund). */
function settleCost(cost) {
  if (!Number.isSafeInteger(cost)) throw new TypeError(`cost is a whole number of units, not ${String(cost)}`);
  if (cost < 0) throw new RangeError(`cost must not be negative (0 is a refund), not ${cost}`);
  return cost;
}

/** Seconds in a duration string (us, ms, s, m, h, d); 0 for one sluiced will refuse. */
function secondsOf(text) {
  const m = /^(\d+)(us|ms|s|m|h|d)$/.exec(text);
  if (!m) return 0;
  return Number(m[1]) * { us: 1e-6, ms: 1e-3, s: 1, m: 60, h: 3600, d: 86400 }[m[2]];
}

module.exports = { body, keys, duration, secondsOf, settleCost };
