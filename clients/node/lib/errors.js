'use strict';
// The client's errors. A denial is a value (a Decision), never one of these, except where the
// caller asked for one: a lease not granted (withLease).

/** The base of the client's errors. Thrown as itself when sluiced could not be asked to do
 * what has no onError policy (a reset). */
class SluiceError extends Error {
  constructor(message) {
    super(message);
    this.name = 'SluiceError';
  }
}

/** sluiced refused the request as malformed (HTTP 400), naming the problem: a bug in the
 * call, which no retry cures; or refused a receipt (settled already, expired, forged). */
class BadRequest extends SluiceError {
  constructor(message, status = 400) {
    super(message);
    this.name = 'BadRequest';
    this.status = status;
  }
}

/** Raised where the caller asked for an exception on denial; `decision` is the answer. */
class RateLimited extends SluiceError {
  constructor(decision, what = 'request') {
    let reason;
    if (decision.error) reason = `sluiced could not decide (${decision.error}) and the policy is deny`;
    else if (decision.never) reason = 'it can never be allowed (cost above the limit)';
    else reason = `retry after ${decision.retryAfter.toFixed(3)} s`;
    super(`${what} rate limited: ${reason}`);
    this.name = 'RateLimited';
    this.decision = decision;
  }
}

/** sluiced refused an admin request (POST /v1/reset): no admin token (`status` 401), a
 * wrong one, or admin endpoints off because sluiced runs without --admin-token-file (403). */
class Forbidden extends SluiceError {
  constructor(message, status) {
    super(message);
    this.name = 'Forbidden';
    this.status = status;
  }
}

module.exports = { SluiceError, BadRequest, Forbidden, RateLimited };
