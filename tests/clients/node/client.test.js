'use strict';
// The Node client (clients/node) against a real sluiced: every call and figure, a denial as
// a value, an unreachable or silent server under each onError policy, leases given back when
// their function throws.
//
//   SLUICED=build/bin/sluiced node --test tests/clients/node/

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');

const sluice = require(path.join(__dirname, '..', '..', '..', 'clients', 'node'));
const { startSluiced } = require('./sluiced');

const EXPORT = { domain: 'api', descriptors: [{ job: 'export' }] };

let server;
let client;
test.before(async () => {
  server = await startSluiced(fs.readFileSync(path.join(__dirname, '..', 'rules.yaml'), 'utf8'));
  client = new sluice.Client({ url: server.url, timeout: 30 });
});
test.after(() => server.stop());

/** A listener that accepts and never answers, or answers `reply` and closes. */
async function listener(reply) {
  const sockets = [];
  const s = net.createServer((socket) => {
    sockets.push(socket);
    if (reply !== undefined) socket.once('data', () => socket.end(reply));
  });
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve));
  return {
    port: s.address().port,
    close: () => { sockets.forEach((c) => c.destroy()); return new Promise((r) => s.close(r)); },
  };
}

test('ad hoc figures, then a denial as a value', async () => {
  // sliding_log over an hour: no window edge to cross while the test runs.
  const ask = { key: 'adhoc-figures', algorithm: 'sliding_log', limit: 3, period: '1h' };
  const remaining = [];
  for (let i = 0; i < 3; i++) {
    const d = await client.check(ask);
    assert.equal(d.allowed, true);
    assert.deepEqual([d.status, d.retryAfter, d.error], [200, 0, null]);
    assert.ok(d.resetAfter > 0 && d.resetAfter <= 3600, JSON.stringify(d));
    remaining.push(d.remaining);
  }
  assert.deepEqual(remaining, [2, 1, 0]);
  const denied = await client.check(ask);
  assert.deepEqual([denied.allowed, denied.status, denied.remaining, denied.never], [false, 429, 0, false]);
  assert.ok(denied.retryAfter > 0 && denied.retryAfter <= 3600);
  assert.equal(denied.headers['retry-after'], String(Math.ceil(denied.retryAfter)));
  assert.equal(denied.headers['ratelimit-policy'], '"adhoc";q=3;w=3600');
  const [limit] = denied.limits;
  assert.deepEqual([limit.name, limit.algorithm, limit.limit, limit.period, limit.allowed],
    ['adhoc', 'sliding_log', 3, '1h', false]);
});

test('cost 0 counts nothing; a cost above the limit is never', async () => {
  const ask = { key: 'adhoc-cost', algorithm: 'gcra', limit: 5, period: 3600, burst: 5 };
  assert.equal((await client.check({ ...ask, cost: 0 })).remaining, 5);
  assert.equal((await client.check({ ...ask, cost: 2 })).remaining, 3);
  const never = await client.check({ ...ask, cost: 6 });
  assert.deepEqual([never.allowed, never.never, never.retryAfter], [false, true, Infinity]);
  assert.equal(never.headers['retry-after'], undefined);
  assert.equal((await client.check({ ...ask, cost: 0 })).remaining, 3);
});

test('rules: descriptors, their entries in order', async () => {
  const bob = { domain: 'api', descriptors: [{ user: 'bob' }] };
  const first = await client.check(bob);
  assert.deepEqual([first.allowed, first.remaining, first.limits[0].name], [true, 1, 'api.user']);
  assert.equal((await client.check(bob)).allowed, true);
  assert.equal((await client.check(bob)).allowed, false);
  assert.equal((await client.check({ domain: 'api', descriptors: [{ user: 'carol' }] })).allowed, true);
  const search = await client.check({ domain: 'api', descriptors: [{ path: '/search', user: 'dan' }] });
  assert.deepEqual([search.remaining, search.limits[0].name], [0, 'search']);
  const pairs = await client.check({ domain: 'api', descriptors: [[['path', '/search'], ['user', 'dan']]] });
  assert.equal(pairs.allowed, false);
  const reversed = await client.check({ domain: 'api', descriptors: [{ user: 'dan', path: '/search' }] });
  assert.deepEqual([reversed.allowed, reversed.remaining, reversed.limits], [true, null, []]);
  const unknown = await client.check({ domain: 'nobody', descriptors: [{ user: 'x' }] });
  assert.deepEqual([unknown.allowed, unknown.remaining, unknown.limits], [true, null, []]);
});

test('bad requests reject naming the problem', async () => {
  await assert.rejects(client.check({ key: 'k', algorithm: 'gcrx', limit: 1, period: '1s' }),
    { name: 'BadRequest', message: /unknown algorithm 'gcrx'/ });
  await assert.rejects(client.check({ key: 'k', limit: 1, period: '1s', cost: -1 }),
    { name: 'BadRequest', message: /cost/ });
  assert.throws(() => client.check({ limit: 1, period: '1s' }), /either key/);
  assert.throws(() => client.check({ domain: 'api', descriptors: { user: 'bob' } }), /array/);
  assert.throws(() => client.check({ key: 'k', limit: 1, period: -1 }), RangeError);
  assert.throws(() => new sluice.Client({ url: 'http://x', onError: 'maybe' }), /onError/);
  assert.throws(() => new sluice.Client({ url: 'not a url' }), /url/);
});

test('acquire waits on the server, and is denied beyond maxWait', async () => {
  const ask = { key: 'acquire-wait', algorithm: 'sliding_log', limit: 1, period: '300ms' };
  assert.equal((await client.acquire(ask)).allowed, true);
  const second = await client.acquire({ ...ask, maxWait: '30s' });
  assert.deepEqual([second.allowed, second.status], [true, 200]);
  const far = { key: 'acquire-far', algorithm: 'sliding_log', limit: 1, period: '1h' };
  assert.equal((await client.acquire({ ...far, maxWait: 0 })).allowed, true);
  const denied = await client.acquire({ ...far, maxWait: 0.05 });
  assert.equal(denied.allowed, false);
  assert.ok(denied.retryAfter > 0.05);
});

test('an unreachable sluiced follows each policy', async () => {
  const closed = await listener();
  const { port } = closed;
  await closed.close(); // Nothing listens there now.
  const ask = { key: 'k', limit: 1, period: '1s' };
  const url = `http://127.0.0.1:${port}`;
  const deny = await new sluice.Client({ url, errorRetryAfter: 2.5 }).check(ask);
  assert.deepEqual([deny.allowed, deny.retryAfter, deny.status], [false, 2.5, null]);
  assert.match(deny.error, /ECONNREFUSED/);
  const allow = await new sluice.Client({ url, onError: 'allow' }).check(ask);
  assert.deepEqual([allow.allowed, allow.retryAfter], [true, 0]);
  assert.ok(allow.error);
});

test('a silent server times out under each policy', async () => {
  const silent = await listener();
  try {
    for (const [onError, allowed] of [['deny', false], ['allow', true]]) {
      const c = new sluice.Client({ url: `http://127.0.0.1:${silent.port}`, timeout: 0.2, onError });
      const d = await c.check({ key: 'k', limit: 1, period: '1s' });
      assert.equal(d.allowed, allowed);
      assert.equal(d.error, 'timed out');
      assert.equal((await c.acquire({ key: 'k', limit: 1, period: '1s', maxWait: 0 })).allowed, allowed);
    }
  } finally {
    await silent.close();
  }
});

test('an answer that is not a decision follows the policy', async () => {
  for (const reply of [
    'HTTP/1.1 503 Service Unavailable\r\nContent-Length: 21\r\n\r\n{"error":"too busy!"}',
    'HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello',
    'HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n{"allowed":1}',
    'garbage\r\n\r\n',
  ]) {
    const s = await listener(reply);
    try {
      const d = await new sluice.Client({ url: `http://127.0.0.1:${s.port}` }).check({ key: 'k', limit: 1, period: '1s' });
      assert.equal(d.allowed, false, reply);
      assert.ok(d.error, reply);
    } finally {
      await s.close();
    }
  }
});

test('a lease is held while the function runs and given back when it throws', async () => {
  await assert.rejects(client.withLease(EXPORT, async (held) => {
    assert.ok(held.lease);
    assert.equal(held.leaseTtl, 600);
    const full = await client.check(EXPORT);
    assert.deepEqual([full.allowed, full.remaining], [false, 0]);
    await assert.rejects(client.withLease({ ...EXPORT, maxWait: 0 }, () => assert.fail('a second lease')),
      { name: 'RateLimited' });
    throw new Error('boom');
  }), /boom/);
  const token = await client.withLease({ ...EXPORT, maxWait: 0 }, (again) => again.lease);
  assert.equal(await client.release(token), false); // Given back already.
  const d = await client.acquire({ ...EXPORT, maxWait: 0 });
  assert.equal(await client.release(d.lease), true);
  await assert.rejects(client.release('forged'), { name: 'BadRequest', message: /lease/ });
});

/** An HTTP server answering each POST path with `answers[path]` ([status, JSON object]). */
async function answering(answers) {
  const http = require('node:http');
  const s = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const [status, answer] = answers[req.url] || [404, { error: 'no such path' }];
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
    });
  });
  await new Promise((resolve) => s.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${s.address().port}`, close: () => new Promise((r) => s.close(r)) };
}

test('a lease or an acquire no rule matches warns, once for each request', async (t) => {
  // docs/node.md's lease once named a domain no rule had: its function ran unlimited, without a
  // lease, and nothing said so. The answer now says "unmatched", and the client warns.
  const said = [];
  const onWarning = (w) => { if (w.code === 'SLUICE_UNMATCHED') said.push([w.name, w.message]); };
  process.on('warning', onWarning);
  t.after(() => process.off('warning', onWarning));
  const typo = { domain: 'jobs', descriptors: [{ job: 'export' }] }; // The rules' domain is api.
  const ran = await client.withLease({ ...typo, maxWait: 0 }, async (d) => [d.allowed, d.lease, d.unmatched]);
  assert.deepEqual(ran, [true, null, true]);
  assert.equal((await client.acquire({ ...typo, maxWait: 0 })).unmatched, true); // Said once.
  const key = await client.acquire({ domain: 'api', descriptors: [{ jobs: 'export' }], maxWait: 0 });
  assert.deepEqual([key.allowed, key.remaining, key.limits, key.unmatched], [true, null, [], true]);
  // What a rule matches says nothing; a check is a value, "unmatched" there to read.
  await client.withLease({ ...EXPORT, maxWait: 30 }, async (held) => assert.ok(held.lease && !held.unmatched));
  assert.equal((await client.acquire({ key: 'unmatched', limit: 1, period: '1h', maxWait: 0 })).unmatched, false);
  const check = await client.check(typo);
  assert.deepEqual([check.allowed, check.unmatched], [true, true]);
  await new Promise(setImmediate); // emitWarning emits on the next tick.
  const tail = 'admitted with no limit and no lease';
  assert.deepEqual(said, [
    ['SluiceUnmatchedWarning', `sluice: no rule of sluiced matched domain "jobs", descriptors [{"job":"export"}]: ${tail}`],
    ['SluiceUnmatchedWarning', `sluice: no rule of sluiced matched domain "api", descriptors [{"jobs":"export"}]: ${tail}`],
  ]);
});

test('a 4xx other than 400 follows the policy (a proxy, a wrong path prefix)', async () => {
  for (const status of [403, 404, 408, 413]) {
    const s = await answering({ '/v1/check': [status, { error: 'not sluiced' }],
      '/v1/release': [status, { error: 'not sluiced' }] });
    try {
      for (const [onError, allowed] of [['deny', false], ['allow', true]]) {
        const c = new sluice.Client({ url: s.url, onError });
        const d = await c.check({ key: 'k', limit: 1, period: '1s' });
        assert.deepEqual([d.allowed, d.status], [allowed, null], String(status));
        assert.match(d.error, new RegExp(`HTTP ${status}`));
        assert.equal(await c.release('some-token'), null);
      }
    } finally {
      await s.close();
    }
  }
  const wrong = new sluice.Client({ url: `${server.url}/wrong/prefix` });
  const d = await wrong.check({ key: 'k', limit: 1, period: '1s' });
  assert.equal(d.allowed, false);
  assert.match(d.error, /HTTP 404/);
});

test("a failed release does not hide the function's own error", async (t) => {
  const s = await answering({
    '/v1/acquire': [200, { allowed: true, lease: 'the-lease', lease_ttl_us: 600000000 }],
    '/v1/release': [400, { error: 'unknown lease' }],
  });
  const warned = [];
  t.mock.method(console, 'warn', (...args) => warned.push(args.join(' ')));
  try {
    const c = new sluice.Client({ url: s.url });
    await assert.rejects(c.withLease({ key: 'k', limit: 1, period: '1s' }, () => {
      throw new Error("the function's own");
    }), /the function's own/);
    assert.match(warned.join('\n'), /unknown lease/);
  } finally {
    await s.close();
  }
});
