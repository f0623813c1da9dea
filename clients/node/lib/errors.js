'use strict';
// The client's errors. A denial is a value (a Decision), never one of these, except where the
// caller asked for one: a lease not granted (withLease).

/** sluiced refused the request as malformed (HTTP 400), naming the problem: a bug in the
 * call, which no retry cures. */
class BadRequest extends Error {
  constructor(message, status = 400) {
    super(message);
    this.name = 'BadRequest';
    this.status = status;
  }
}

/** Raised where the caller asked for an exception on denial; `decision` is the answer. */
class RateLimited extends Error {
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

module.exports = { BadRequest, RateLimited };
