'use strict';
// The Node client's feedback (issue 36) against a real sluiced and a real local HTTP partner:
// pacedFetch waits out a 429's Retry-After before its next call, a lower remaining brings
// ours down, answers about nothing are not told, and other headers are never sent.
//
//   SLUICED=build/bin/sluiced node --test tests/clients/node/feedback.test.js

const test = require('node:test');
const assert = require('node:assert/strict');
const http = require('node:http');
const path = require('node:path');
const { performance } = require('node:perf_hooks');

const ROOT = path.join(__dirname, '..', '..', '..');
const sluice = require(path.join(ROOT, 'clients', 'node'));
const { startSluiced } = require('./sluiced');

const RULES = `
domain: jobs
descriptors:
  - key: partner
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 10,
                 feedback: {max_pause: 5s, pause: 1s}}
`;

let server;
let client;
test.before(async () => {
  server = await startSluiced(RULES);
  client = new sluice.Client({ url: `http://127.0.0.1:${server.port}`, timeout: 30 });
});
test.after(() => server.stop());

// A partner answering call n with script(n) = [status, headers]; keeps each call's time.
async function partnerOf(script) {
  const calls = [];
  const srv = http.createServer((req, res) => {
    const [status, headers] = script(calls.length);
    calls.push({ at: performance.now(), status });
    res.writeHead(status, headers);
    res.end('ok');
  });
  await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${srv.address().port}/v1/orders`, calls, close: () => srv.close() };
}

const limitOf = (name) => ({ domain: 'jobs', descriptors: [{ partner: name }] });

test('pacedFetch waits out a 429 Retry-After before its next call', async () => {
  const partner = await partnerOf((n) => (n === 0 ? [429, { 'Retry-After': '2' }] : [200, {}]));
  try {
    const limit = limitOf('retry');
    const paced = sluice.pacedFetch(client, limit);
    assert.equal((await paced(partner.url)).status, 429);
    const d = await client.check({ ...limit, cost: 0 });
    assert.equal(d.allowed, false);
    assert.equal((await paced(partner.url)).status, 200);
    assert.ok(partner.calls[1].at - partner.calls[0].at >= 2000 - 1,
      `second call ${partner.calls[1].at - partner.calls[0].at} ms after the 429`);
  } finally {
    partner.close();
  }
});

test('a lower remaining brings ours down', async () => {
  const limit = limitOf('remaining');
  const start = performance.now();
  const told = await client.feedback(200, { 'X-RateLimit-Remaining': '2', 'X-Request-Id': 'abc' }, limit);
  assert.equal(told.told, true);
  assert.equal(told.limits[0].lowered, 8);
  const d = await client.check({ ...limit, cost: 0 });
  // 2, and what the rate refilled since (one per 100 ms), however slow this runs.
  assert.ok(d.remaining <= 2 + Math.floor((performance.now() - start) / 100), `remaining ${d.remaining}`);
});

test('answers about nothing are not told; a malformed one is refused', async () => {
  const told = await client.feedback(200, { 'Set-Cookie': 'session=secret' }, limitOf('nothing'));
  assert.deepEqual(told, { told: false, limits: [], notes: [], error: null });
  const garbage = await client.feedback(429, [['Retry-After', 'soon'], ['Cookie', 'secret']], limitOf('garbage'));
  assert.equal(garbage.limits[0].pause, 1); // The rule's pause: no time could be read.
  assert.ok(garbage.notes.some((n) => n.includes('retry-after')), JSON.stringify(garbage.notes));
  assert.ok(!JSON.stringify(garbage).includes('secret'));
  await assert.rejects(client.feedback(429, {}, { key: 'k', limit: 5, period: '1s' }), sluice.BadRequest);
});
