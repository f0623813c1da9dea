'use strict';
// The client of sluiced over HTTP, with Node's own fetch (18 and later), which keeps
// connections alive and reuses them. Every call resolves to a Decision, or, for a request
// sluiced refused as malformed (HTTP 400 only), rejects with BadRequest: an unreachable sluiced, a timeout or
// a 5xx answer is a Decision whose `error` says what happened and whose `allowed` is the
// `onError` policy.

const { fromAnswer, failed, settlementOf, unsettled } = require('./decision');
const { body, keys, duration, secondsOf, settleCost } = require('./request');
const { BadRequest, Forbidden, RateLimited, SluiceError } = require('./errors');
const { worthTelling } = require('./partner');

function describe(e) {
  if (e && e.name === 'TimeoutError') return 'timed out';
  const cause = e && e.cause ? `: ${e.cause.code || e.cause.message || e.cause}` : '';
  return `${e && e.message ? e.message : String(e)}${cause}`;
}

class Client {
  /** `url` of sluiced; `timeout` in seconds per call (an acquire adds its maxWait);
   * `onError`: 'deny' or 'allow' when sluiced cannot decide; `errorRetryAfter`: the
   * retryAfter (seconds) of such a denial. */
  constructor({ url = 'http://127.0.0.1:8080', timeout = 1, onError = 'deny', errorRetryAfter = 1 } = {}) {
    let parsed;
    try {
      parsed = new URL(url);
    } catch {
      throw new TypeError(`url must be http://HOST:PORT, not ${String(url)}`);
    }
    if (!['http:', 'https:'].includes(parsed.protocol)) {
      throw new TypeError(`url must be http://HOST:PORT or https://HOST:PORT, not ${url}`);
    }
    if (!['allow', 'deny'].includes(onError)) {
      throw new TypeError(`onError must be 'allow' or 'deny', not ${String(onError)}`);
    }
    if (!(timeout > 0) || !(errorRetryAfter >= 0)) {
      throw new RangeError('timeout must be positive and errorRetryAfter not negative');
    }
    this.url = url.replace(/\/+$/, '');
    this.timeout = timeout;
    this.onError = onError;
    this.errorRetryAfter = errorRetryAfter;
    this._warned = new Set(); // The unmatched warnings given (see _warnUnmatched).
  }

  /** POST /v1/check: ad hoc ({key, limit, period, algorithm, burst, buckets, cost, maxDebt, block})
   * or rules ({domain, descriptors: [{user: 'bob'}], cost}). With `receipt: true`, the
   * decision's `settle(cost)` settles the real cost later. */
  check(options) {
    const request = body(options); // Throws here, at the call, for what the client can see.
    return this._decide('/v1/check', request, this.timeout)
      .then((decision) => this._settleable(decision, options));
  }

  // With `receipt: true`, the decision's settle(cost) (not enumerable: a decision stays a plain
  // value to compare and print): resolves to a Settlement, or to null when there is nothing to
  // settle (denied, cost 0, no rule matched, admitted by onError without sluiced).
  _settleable(decision, options) {
    if (!options || options.receipt !== true) return decision;
    Object.defineProperty(decision, 'settle', {
      value: async (cost) => {
        settleCost(cost); // A wrong cost is a bug even when there is nothing to settle.
        return decision.receipt === null ? null : this.settle(decision.receipt, cost);
      },
      enumerable: false,
    });
    return decision;
  }

  /** POST /v1/settle: settles the request `receipt` (decision.receipt) was charged for at
   * `cost` units, 0 being a refund: what the check charged above `cost` is given back, what it
   * charged below is charged on top (past the limit, up to maxDebt). Resolves to a Settlement
   * {settled, cost, givenBack, charged, limits, status, error}; rejects with BadRequest when
   * sluiced refuses the receipt (settled already, expired, forged, malformed). When sluiced
   * cannot be asked it resolves to `settled: false` with `error` set: the check's charge
   * stands. */
  async settle(receipt, cost) {
    if (typeof receipt !== 'string') throw new TypeError('receipt is the token of decision.receipt');
    settleCost(cost);
    const { status, answer, error } = await this._post('/v1/settle', { receipt, cost }, this.timeout);
    let why = error;
    if (!why && status === 200) {
      try {
        return settlementOf(status, answer);
      } catch (e) {
        why = `not a settlement (${e.message})`;
      }
    } else if (!why && status === 400) {
      throw new BadRequest(String(answer.error ?? JSON.stringify(answer)), status); // See _decide.
    } else if (!why) {
      why = `HTTP ${status}: ${answer.error ?? JSON.stringify(answer)}`;
    }
    return unsettled(cost, status, why);
  }

  /** POST /v1/reset: the keys of `options` (a check's, without cost) start afresh on every
   * limit they name. Needs sluiced's admin token (--admin-token-file) as {adminToken}, sent as
   * a bearer token. Resolves to {reset: true, limits: [{name}]}; rejects with Forbidden when
   * sluiced refuses the token (none, a wrong one, admin endpoints off), BadRequest for a
   * malformed request, SluiceError when sluiced cannot be asked. */
  async reset(options, { adminToken } = {}) {
    if (adminToken !== undefined && typeof adminToken !== 'string') {
      throw new TypeError('adminToken is a string');
    }
    const headers = adminToken === undefined ? {} : { authorization: `Bearer ${adminToken}` };
    const { status, answer, error } = await this._post('/v1/reset', keys(options), this.timeout, headers);
    if (!error && status === 200 && answer.reset === true) {
      const limits = Array.isArray(answer.limits) ? answer.limits : [];
      return { reset: true, limits: limits.map((entry) => ({ name: entry?.name ?? '' })) };
    }
    if (!error && status === 400) throw new BadRequest(String(answer.error ?? JSON.stringify(answer)), status);
    if (!error && (status === 401 || status === 403)) {
      throw new Forbidden(String(answer.error ?? JSON.stringify(answer)), status);
    }
    throw new SluiceError(`sluiced did not reset: ${error ?? `HTTP ${status}: ${answer.error ?? JSON.stringify(answer)}`}`);
  }

  /** POST /v1/feedback: tells sluiced what the partner answered (its HTTP `status`, its
   * `headers`: a fetch Headers, an object or [name, value] pairs) for the limits `options` (a
   * check's, without cost) name, so that every worker acts on it: a 429 pauses them, a lower
   * remaining brings theirs down (docs/server.md). Only the rate limit headers are sent.
   * Resolves to {told, limits: [{name, pause, paused, pauseLeft, lowered, remaining, notes}],
   * notes, error} (seconds); {told: false} without asking when the answer says nothing about
   * limits, or with `error` when sluiced cannot be asked. Rejects with BadRequest for a
   * malformed request. */
  async feedback(status, headers, options) {
    const pairs = worthTelling(status, headers);
    if (pairs === null) return { told: false, limits: [], notes: [], error: null };
    const request = keys(options);
    request.partner = { headers: pairs };
    if (status !== undefined && status !== null) request.partner.status = status;
    const { status: code, answer, error } = await this._post('/v1/feedback', request, this.timeout);
    if (!error && code === 200 && Array.isArray(answer.limits)) {
      const seconds = (us) => us / 1e6;
      return {
        told: true,
        limits: answer.limits.map((l) => ({
          name: l.name, pause: seconds(l.pause_us), paused: l.paused, pauseLeft: seconds(l.pause_left_us),
          lowered: l.lowered, remaining: l.remaining, notes: l.notes || [],
        })),
        notes: answer.notes || [],
        error: null,
      };
    }
    if (!error && code === 400) throw new BadRequest(String(answer.error ?? JSON.stringify(answer)), code);
    const why = error ?? `HTTP ${code}: ${answer.error ?? JSON.stringify(answer)}`;
    console.warn(`sluice: the partner's answer was not told (${why})`);
    return { told: false, limits: [], notes: [], error: why };
  }

  /** POST /v1/acquire: waits on the server up to `maxWait` (seconds or '30s', default 30 s)
   * until the request may go ahead, charged then. Emits a warning (SluiceUnmatchedWarning)
   * when no rule matched: nothing then limits what it admits. */
  async acquire({ maxWait = 30, ...options } = {}) {
    const request = body(options, maxWait);
    const decision = await this._decide('/v1/acquire', request,
      this.timeout + secondsOf(duration(maxWait, 'maxWait')));
    if (decision.unmatched) this._warnUnmatched(options);
    return this._settleable(decision, options);
  }

  // A warning, not an error: sluiced admits what no rule names, as envoyproxy/ratelimit does,
  // and a caller may mean it; but a misspelt domain or key would otherwise run unlimited (and a
  // lease without a lease) with nothing to say so. Once per request shape, as Python's warnings
  // are once per place: process.emitWarning prints every time, and an acquire may be in a loop.
  _warnUnmatched({ domain, descriptors }) {
    const message = `sluice: no rule of sluiced matched domain ${JSON.stringify(domain)}, ` +
      `descriptors ${JSON.stringify(descriptors)}: admitted with no limit and no lease`;
    if (this._warned.has(message) || this._warned.size >= 100) return;
    this._warned.add(message);
    process.emitWarning(message, { type: 'SluiceUnmatchedWarning', code: 'SLUICE_UNMATCHED' });
  }

  /** POST /v1/release: true when the lease was held, false when it had expired or was
   * released already, null when sluiced could not be asked. */
  async release(lease) {
    if (typeof lease !== 'string') throw new TypeError('lease is the token of decision.lease');
    const { status, answer, error } = await this._post('/v1/release', { lease }, this.timeout);
    if (!error && status === 200 && typeof answer.released === 'boolean') return answer.released;
    if (!error && status === 400) throw new BadRequest(String(answer.error), status); // See _decide.
    return null;
  }

  /** Runs `fn` holding a lease of a concurrency limit (acquired with `options`, maxWait
   * included), and gives it back however `fn` ends; rejects with RateLimited when none is
   * granted. Resolves to what `fn` resolves to. A release that fails is a console.warn, never
   * an error over fn's own: the lease ends by itself at its leaseTtl. */
  async withLease(options, fn) {
    const decision = await this.acquire(options);
    if (!decision.allowed) throw new RateLimited(decision, 'lease');
    try {
      return await fn(decision);
    } finally {
      if (decision.lease) {
        try {
          await this.release(decision.lease);
        } catch (e) {
          console.warn(`sluice: lease not released (${e.name}: ${e.message}); it ends at its leaseTtl`);
        }
      }
    }
  }

  async _decide(path, request, timeout) {
    const { status, answer, headers, error } = await this._post(path, request, timeout);
    let why = error;
    if (!why && (status === 200 || status === 429)) {
      try {
        return fromAnswer(status, answer, headers);
      } catch (e) {
        why = `not a decision (${e.message})`;
      }
    } else if (!why && status === 400) {
      // A malformed call, which no retry fixes. Any other 4xx (a proxy's 403, 404, 408, 413, a
      // wrong path prefix in the url) is a sluiced that cannot be reached: the onError policy.
      throw new BadRequest(String(answer.error ?? JSON.stringify(answer)), status);
    } else if (!why) {
      why = `HTTP ${status}: ${answer.error ?? JSON.stringify(answer)}`;
    }
    return failed(why, this.onError === 'allow', this.errorRetryAfter);
  }

  async _post(path, request, timeout, headers = {}) {
    let response;
    let text;
    try {
      response = await fetch(this.url + path, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify(request),
        signal: AbortSignal.timeout(Math.ceil(timeout * 1000)),
      });
      text = await response.text();
    } catch (e) {
      return { error: describe(e) };
    }
    let answer;
    try {
      answer = JSON.parse(text);
    } catch {
      answer = null;
    }
    if (answer === null || typeof answer !== 'object' || Array.isArray(answer)) {
      return { error: `HTTP ${response.status}, not a JSON object: ${text.slice(0, 200)}` };
    }
    return { status: response.status, answer, headers: response.headers };
  }
}

module.exports = { Client };
