'use strict';
// The Node client's receipts, settles and resets (issue 33) against a real sluiced: a check
// with a receipt settled below, above and at 0, once only, a forged receipt refused; reset
// with no, a wrong and the right admin token, and with admin endpoints off; and the Express
// middleware's countOnly ('failures': failed logins only; 'successes', where a response the
// client went away from is a failure) in a real Express app.
//
//   SLUICED=build/bin/sluiced node --test tests/clients/node/settle.test.js

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const ROOT = path.join(__dirname, '..', '..', '..');
const sluice = require(path.join(ROOT, 'clients', 'node'));
const express = require(path.join(ROOT, 'clients', 'node', 'node_modules', 'express'));
const { startSluiced } = require('./sluiced');

// sliding_log over an hour: exact, and no window edge to cross while a test runs.
const RULES = `
domain: llm
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: sliding_log}
`;
const ADMIN_TOKEN = 'test-admin-token-0123456789';

let server;
let noAdmin; // Without --admin-token-file: admin endpoints off.
let client;
let secrets;
test.before(async () => {
  secrets = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-node-settle-'));
  fs.writeFileSync(path.join(secrets, 'secret'), `${'s'.repeat(48)}\n`);
  fs.writeFileSync(path.join(secrets, 'admin-token'), `${ADMIN_TOKEN}\n`);
  const secret = ['--secret-file', path.join(secrets, 'secret')];
  server = await startSluiced(RULES, [...secret, '--admin-token-file', path.join(secrets, 'admin-token')]);
  noAdmin = await startSluiced(RULES, secret);
  client = new sluice.Client({ url: server.url, timeout: 30 });
});
test.after(async () => {
  await Promise.all([server, noAdmin].filter(Boolean).map((s) => s.stop()));
  fs.rmSync(secrets, { recursive: true, force: true });
});

const user = (name) => ({ domain: 'llm', descriptors: [{ user: name }] });
const adhoc = (key, limit = 10) => ({ key, algorithm: 'sliding_log', limit, period: '1h' });
const remaining = async (ask) => (await client.check({ ...ask, cost: 0 })).remaining;

/** A port nothing listens on: one a server had a moment ago. */
async function gonePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

test('a settle below the estimate gives back, above it charges the rest', async () => {
  const d = await client.check({ ...user('ann'), cost: 30, receipt: true });
  assert.deepEqual([d.allowed, d.remaining, typeof d.receipt], [true, 70, 'string']);
  assert.ok(d.receiptTtl > 0, JSON.stringify(d));
  const s = await d.settle(10);
  assert.deepEqual([s.settled, s.cost, s.givenBack, s.charged, s.error], [true, 10, 20, 0, null]);
  assert.deepEqual([s.limits[0].name, s.limits[0].givenBack, s.limits[0].remaining], ['llm.user', 20, 90]);
  assert.equal(await remaining(user('ann')), 90);

  const above = await client.check({ ...adhoc('node-above'), cost: 2, receipt: true });
  const extra = await client.settle(above.receipt, 5);
  assert.deepEqual([extra.givenBack, extra.charged, extra.limits[0].charged], [0, 3, 3]);
  assert.equal(await remaining(adhoc('node-above')), 5);
});

test('a receipt settles once; forged ones are refused; nothing is changed by either', async () => {
  const ask = adhoc('node-once');
  const d = await client.check({ ...ask, cost: 4, receipt: true });
  assert.deepEqual(await d.settle(0).then((s) => [s.cost, s.givenBack]), [0, 4]);
  await assert.rejects(d.settle(0), { name: 'BadRequest', status: 400, message: /settled already/ });
  for (const [forged, why] of [['r1.bm90.YQ', /not a receipt/], ['', /empty/], ['x'.repeat(100), /not a receipt/]]) {
    await assert.rejects(client.settle(forged, 1), { name: 'BadRequest', message: why });
  }
  assert.equal(await remaining(ask), 10);

  // One character of a fresh receipt's payload (after "r1."), six bits of it, changed.
  const fresh = await client.check({ ...ask, cost: 3, receipt: true });
  const i = 'r1.'.length + 8;
  const tampered = fresh.receipt.slice(0, i) + (fresh.receipt[i] === 'A' ? 'B' : 'A') + fresh.receipt.slice(i + 1);
  await assert.rejects(client.settle(tampered, 0), { name: 'BadRequest', message: /signature/ });
  assert.equal(await remaining(ask), 7);
  assert.equal((await fresh.settle(0)).givenBack, 3); // The true receipt was not used up.
});

test('nothing to settle when nothing was charged; mistakes throw before anything is sent', async () => {
  const ask = adhoc('node-nothing', 1);
  const free = await client.check({ ...ask, cost: 0, receipt: true });
  assert.deepEqual([free.allowed, free.receipt], [true, null]);
  assert.equal(await free.settle(3), null);
  assert.equal((await client.check({ ...ask, receipt: true })).allowed, true);
  const denied = await client.check({ ...ask, receipt: true });
  assert.deepEqual([denied.allowed, denied.receipt], [false, null]);
  assert.equal(await denied.settle(0), null);
  const plain = await client.check(adhoc('node-plain'));
  assert.equal(plain.settle, undefined); // Not asked with a receipt.
  assert.ok(!Object.keys(free).includes('settle')); // A decision stays a plain value.
  await assert.rejects(free.settle(-1), RangeError);
  await assert.rejects(free.settle(1.5), TypeError);
  await assert.rejects(client.settle(null, 1), TypeError);
  assert.throws(() => client.check({ ...user('x'), maxDebt: 5 }), /maxDebt/);
  assert.throws(() => client.check({ ...user('x'), receipt: 'yes' }), /receipt/);
});

test('an acquire with a receipt and an ad hoc maxDebt', async () => {
  const ask = { ...adhoc('node-acquire'), maxDebt: 2 };
  const d = await client.acquire({ ...ask, maxWait: 0, cost: 10, receipt: true });
  assert.deepEqual([d.allowed, d.remaining], [true, 0]);
  const s = await d.settle(15); // 5 more, past the limit: maxDebt bounds it to 2.
  assert.deepEqual([s.settled, s.charged, s.limits[0].remaining], [true, 2, 0]);
  assert.equal((await client.check(ask)).allowed, false);
});

test('reset needs the admin token; off without --admin-token-file', async () => {
  const ask = user('reset-me');
  assert.equal((await client.check({ ...ask, cost: 60 })).allowed, true);
  await assert.rejects(client.reset(ask), { name: 'Forbidden', status: 401 });
  await assert.rejects(client.reset(ask, { adminToken: 'wrong-token-0123456789' }), { name: 'Forbidden', status: 403 });
  assert.equal(await remaining(ask), 40); // Refused: untouched.
  assert.deepEqual(await client.reset(ask, { adminToken: ADMIN_TOKEN }), { reset: true, limits: [{ name: 'llm.user' }] });
  assert.equal(await remaining(ask), 100);

  const key = adhoc('node-reset', 1);
  await client.check(key);
  assert.equal((await client.check(key)).allowed, false);
  assert.deepEqual((await client.reset(key, { adminToken: ADMIN_TOKEN })).limits, [{ name: 'adhoc' }]);
  assert.equal((await client.check(key)).allowed, true);

  const off = new sluice.Client({ url: noAdmin.url, timeout: 30 });
  await assert.rejects(off.reset(ask, { adminToken: ADMIN_TOKEN }),
    { name: 'Forbidden', status: 403, message: /admin endpoints are off/ });
});

test('an ad hoc block shuts the key out; a reset that names the same block lifts it', async () => {
  // gcra 2 per second: its own wait after a denial is half a second; the block's is an hour.
  const key = { key: 'node-block', algorithm: 'gcra', limit: 2, period: '1s', block: 3600 };
  await client.check({ ...key, cost: 2 });
  const denied = await client.check(key);
  assert.equal(denied.allowed, false);
  assert.ok(denied.retryAfter > 60, `retryAfter ${denied.retryAfter}: the block's, not gcra's`);
  const { block, ...withoutBlock } = key;
  assert.equal(block, 3600);
  await client.reset(withoutBlock, { adminToken: ADMIN_TOKEN }); // Another limit: block stays.
  assert.ok((await client.check(key)).retryAfter > 60);
  await client.reset(key, { adminToken: ADMIN_TOKEN });
  assert.equal((await client.check(key)).allowed, true);
  assert.throws(() => client.check({ ...user('x'), block: '1h' }), /block and feedback are for ad hoc/);
});

test('a sluiced that cannot be reached settles nothing and resets nothing', async () => {
  const gone = new sluice.Client({ url: `http://127.0.0.1:${await gonePort()}` });
  const s = await gone.settle('r1.some.receipt', 0);
  assert.deepEqual([s.settled, s.cost], [false, 0]);
  assert.match(s.error, /ECONNREFUSED/);
  await assert.rejects(gone.reset(user('x'), { adminToken: ADMIN_TOKEN }),
    (e) => e instanceof sluice.SluiceError && /did not reset/.test(e.message));
});

async function serve(app, fn) {
  const listening = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  try {
    return await fn(`http://127.0.0.1:${listening.address().port}`);
  } finally {
    listening.closeAllConnections();
    await new Promise((resolve) => listening.close(resolve));
  }
}

// The refund is made after the response has gone out: wait for it to show (a watchdog, not a
// timing: the loop ends as soon as sluiced has it).
async function until(ask, expected) {
  for (let i = 0; i < 3000; i++) {
    if (await remaining(ask) === expected) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  assert.fail(`remaining never became ${expected}`);
}

test("countOnly 'failures': only failed logins count, and the limit then stops even the right password", async () => {
  const limit = { algorithm: 'sliding_log', limit: 3, period: '1h' };
  const app = express();
  app.post('/login', sluice.middleware({ client, key: (req) => `login-${req.get('x-user')}`, countOnly: 'failures', ...limit }),
    (req, res) => res.status(req.get('x-password') === 'right' ? 200 : 401).send('done'));
  const ask = { key: 'login-eve', ...limit };
  await serve(app, async (url) => {
    const login = (password) => fetch(`${url}/login`, { method: 'POST', headers: { 'x-user': 'eve', 'x-password': password } });
    for (let i = 0; i < 4; i++) {
      const r = await login('right');
      assert.equal(r.status, 200);
      assert.match(r.headers.get('ratelimit'), /^"adhoc";r=2;t=\d+$/); // Charged, then refunded.
      await until(ask, 3);
    }
    for (let i = 1; i <= 3; i++) {
      assert.equal((await login('wrong')).status, 401);
      assert.equal(await remaining(ask), 3 - i);
    }
    assert.equal((await login('right')).status, 429);
  });
});

test("countOnly 'successes' counts only what succeeded; succeeded() decides which", async () => {
  const limit = { algorithm: 'sliding_log', limit: 2, period: '1h' };
  const app = express();
  app.get('/export', sluice.middleware({ client, key: () => 'exports', countOnly: 'successes', ...limit }),
    (req, res) => res.status(req.query.fail ? 502 : 200).send('done'));
  app.get('/teapot', sluice.middleware({
    client, key: () => 'teapots', countOnly: 'successes', ...limit, succeeded: (req, res) => res.statusCode === 418,
  }), (req, res) => res.status(req.query.brew ? 418 : 200).send('done'));
  let reach;
  const reached = new Promise((resolve) => { reach = resolve; });
  app.get('/hang', sluice.middleware({ client, key: () => 'hangs', countOnly: 'successes', ...limit }),
    () => reach()); // Never answers: the test goes away once its check has been made.
  await serve(app, async (url) => {
    for (let i = 0; i < 3; i++) {
      assert.equal((await fetch(`${url}/export?fail=1`)).status, 502);
      await until({ key: 'exports', ...limit }, 2);
    }
    assert.equal((await fetch(`${url}/export`)).status, 200);
    assert.equal((await fetch(`${url}/export`)).status, 200);
    assert.equal((await fetch(`${url}/export`)).status, 429);

    // A response that never finishes (the client went away) is a failure: refunded here.
    const gone = new AbortController();
    const hanging = fetch(`${url}/hang`, { signal: gone.signal }).catch((e) => e);
    await reached; // Its check is made: charged.
    assert.equal(await remaining({ key: 'hangs', ...limit }), 1);
    gone.abort();
    assert.equal((await hanging).name, 'AbortError');
    await until({ key: 'hangs', ...limit }, 2);

    assert.equal((await fetch(`${url}/teapot`)).status, 200); // Not a success here: refunded.
    await until({ key: 'teapots', ...limit }, 2);
    assert.equal((await fetch(`${url}/teapot?brew=1`)).status, 418);
    assert.equal(await remaining({ key: 'teapots', ...limit }), 1);
  });
  assert.throws(() => sluice.middleware({ client, key: () => 'k', limit: 1, period: '1s', countOnly: 'all' }), /countOnly/);
  assert.throws(() => sluice.middleware({ client, key: () => 'k', limit: 1, period: '1s', countOnly: 'failures', succeeded: 1 }),
    /succeeded/);
});
