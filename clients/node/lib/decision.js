'use strict';
// A decision of sluiced, read from its JSON answer: seconds as numbers (the wire has integer
// microseconds, docs/server.md), `Infinity` for "never" (retry_after_us -1).

const seconds = (micros) => (micros == null ? 0 : micros < 0 ? Infinity : micros / 1e6);

// The headers of a decision that a limited HTTP response passes on (docs/server.md,
// "RateLimit headers"): whichever format sluiced was started with.
const PASSED_ON = /^(ratelimit(-.*)?|x-ratelimit-.*|retry-after)$/i;

function limitOf(entry) {
  return {
    name: entry.name ?? '',
    algorithm: entry.algorithm ?? null,
    limit: entry.limit ?? null,
    period: entry.period ?? null,
    mode: entry.mode ?? null,
    allowed: entry.allowed !== false,
    remaining: entry.remaining ?? null,
    resetAfter: seconds(entry.reset_after_us),
    retryAfter: seconds(entry.retry_after_us),
    delay: seconds(entry.delay_us),
    unlimited: entry.unlimited === true,
  };
}

/** The Decision of a 200 or 429 answer; throws a TypeError when `answer` is not one. */
function fromAnswer(status, answer, headers) {
  if (answer === null || typeof answer !== 'object' || typeof answer.allowed !== 'boolean') {
    throw new TypeError('allowed is not a boolean');
  }
  const passed = {};
  if (headers) {
    for (const [name, value] of headers) if (PASSED_ON.test(name)) passed[name] = value;
  }
  if (answer.receipt != null && typeof answer.receipt !== 'string') {
    throw new TypeError('receipt is not a string');
  }
  const retryAfter = seconds(answer.retry_after_us);
  return {
    allowed: answer.allowed,
    remaining: answer.remaining ?? null,
    retryAfter,
    resetAfter: seconds(answer.reset_after_us),
    delay: seconds(answer.delay_us),
    waited: seconds(answer.waited_us),
    overSoft: answer.over_soft === true,
    lease: answer.lease ?? null,
    leaseTtl: seconds(answer.lease_ttl_us),
    limits: Array.isArray(answer.limits) ? answer.limits.map(limitOf) : [],
    // No rule matched the request (its domain or descriptors name none): admitted, unlimited.
    unmatched: answer.unmatched === true,
    // Asked with `receipt: true` and charged: the token that settles the real cost later.
    receipt: answer.allowed && typeof answer.receipt === 'string' ? answer.receipt : null,
    receiptTtl: seconds(answer.receipt_ttl_us),
    never: retryAfter === Infinity,
    status,
    headers: passed,
    error: null,
  };
}

/** The Decision when sluiced could not decide: the caller's policy, and why. */
function failed(error, allowed, retryAfter) {
  return {
    allowed,
    remaining: null,
    retryAfter: allowed ? 0 : retryAfter,
    resetAfter: 0,
    delay: 0,
    waited: 0,
    overSoft: false,
    lease: null,
    leaseTtl: 0,
    limits: [],
    unmatched: false,
    receipt: null,
    receiptTtl: 0,
    never: false,
    status: null,
    headers: {},
    error,
  };
}

/** The Settlement of a 200 answer of /v1/settle; throws a TypeError when it is not one. */
function settlementOf(status, answer) {
  if (answer.settled !== true || !Number.isSafeInteger(answer.cost)) {
    throw new TypeError('settled is not true');
  }
  const limits = Array.isArray(answer.limits) ? answer.limits : [];
  return {
    settled: true,
    cost: answer.cost,
    givenBack: answer.given_back ?? 0,
    charged: answer.charged ?? 0,
    limits: limits.map((entry) => ({
      name: entry.name ?? '',
      givenBack: entry.given_back ?? 0,
      charged: entry.charged ?? 0,
      remaining: entry.remaining ?? null,
      resetAfter: seconds(entry.reset_after_us),
      retryAfter: seconds(entry.retry_after_us),
      delay: seconds(entry.delay_us),
    })),
    status,
    error: null,
  };
}

/** The Settlement when sluiced could not settle: nothing known settled, and why. */
function unsettled(cost, status, error) {
  return { settled: false, cost, givenBack: 0, charged: 0, limits: [], status: status ?? null, error };
}

module.exports = { fromAnswer, failed, settlementOf, unsettled };
