'use strict';
// The Express middleware: examples/express/app.js (express from npm, pinned) against a real
// sluiced: 200s, then 429 with the RateLimit headers and Retry-After, while other keys and
// unlimited routes are still served; rules mode; the onError policies with no sluiced.
//
//   SLUICED=build/bin/sluiced node --test tests/clients/node/

const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');

const ROOT = path.join(__dirname, '..', '..', '..');
const sluice = require(path.join(ROOT, 'clients', 'node'));
const express = require(path.join(ROOT, 'clients', 'node', 'node_modules', 'express'));
const { createApp } = require(path.join(ROOT, 'examples', 'express', 'app.js'));
const { startSluiced } = require('./sluiced');

let server;
test.before(async () => {
  server = await startSluiced(`
domain: web
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
`);
});
test.after(() => server.stop());

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

test('the example: 5 per address, then 429 with the headers; an unchecked header buys nothing', async () => {
  const client = new sluice.Client({ url: server.url });
  await serve(createApp(client), async (app) => {
    // A new X-API-Key (or any header) on each request: the example keys on the address, never
    // on what the caller claims, so these share one count.
    const get = (i) => fetch(`${app}/api/hello`, { headers: { 'x-api-key': `random-${i}` } });
    for (let i = 1; i <= 5; i++) {
      const r = await get(i);
      assert.equal(r.status, 200);
      assert.match((await r.json()).hello, /127\.0\.0\.1$/);
      assert.equal(r.headers.get('ratelimit-policy'), '"adhoc";q=5;w=10');
      assert.match(r.headers.get('ratelimit'), new RegExp(`^"adhoc";r=${5 - i};t=\\d+$`));
      assert.equal(r.headers.get('retry-after'), null);
    }
    const limited = await get(6);
    assert.equal(limited.status, 429);
    const body = await limited.json();
    assert.equal(body.error, 'too many requests');
    assert.ok(body.retryAfter > 0 && body.retryAfter <= 10);
    assert.equal(limited.headers.get('retry-after'), String(Math.ceil(body.retryAfter)));
    assert.match(limited.headers.get('ratelimit'), /^"adhoc";r=0;t=\d+$/);
    assert.equal(limited.headers.get('ratelimit-policy'), '"adhoc";q=5;w=10');

    assert.equal((await fetch(`${app}/api/hello`)).status, 429); // No header: the same count.
    assert.equal((await fetch(`${app}/health`)).status, 200);
  });
});

test('rules mode, a custom denial, and a key function that fails', async () => {
  const client = new sluice.Client({ url: server.url });
  const app = express();
  app.use(sluice.middleware({
    client,
    domain: 'web',
    descriptors: (req) => [{ user: req.get('x-user') || 'anonymous' }],
    onLimited: (req, res, next, decision) => res.status(429).send(`wait ${Math.ceil(decision.retryAfter)}`),
  }));
  app.get('/', (req, res) => res.send('ok'));
  const keyless = express();
  keyless.use(sluice.middleware({ client, key: () => undefined, limit: 1, period: '1s' }));
  keyless.get('/', (req, res) => res.send('ok'));
  keyless.use((err, req, res, next) => res.status(500).send(err.message)); // eslint-disable-line no-unused-vars

  await serve(app, async (url) => {
    const get = (user) => fetch(url, { headers: { 'x-user': user } });
    assert.equal((await get('carol')).status, 200);
    const second = await get('carol');
    assert.equal(second.status, 429);
    assert.match(await second.text(), /^wait \d+$/);
    assert.equal(second.headers.get('ratelimit-policy'), '"web.user";q=1;w=3600');
    assert.equal((await get('dave')).status, 200);
  });
  await serve(keyless, async (url) => {
    const r = await fetch(url);
    assert.equal(r.status, 500);
    assert.match(await r.text(), /key\(req\) gave undefined/);
  });
});

test('no sluiced: onError allow serves with no headers, deny answers 503', async () => {
  // A port nothing listens on: one a server had a moment ago.
  const gone = await new Promise((resolve) => {
    const s = require('node:net').createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(`http://127.0.0.1:${port}`));
    });
  });
  for (const [onError, status] of [['allow', 200], ['deny', 503]]) {
    const app = createApp(new sluice.Client({ url: gone, onError, errorRetryAfter: 3 }));
    await serve(app, async (url) => {
      const r = await fetch(`${url}/api/hello`);
      assert.equal(r.status, status, onError);
      assert.equal(r.headers.get('ratelimit'), null);
      assert.equal(r.headers.get('retry-after'), onError === 'deny' ? '3' : null);
    });
  }
});

test('the middleware refuses options it cannot use', () => {
  const client = new sluice.Client({ url: server.url });
  assert.throws(() => sluice.middleware({ key: (req) => req.ip }), /client/);
  assert.throws(() => sluice.middleware({ client, limit: 1, period: '1s' }), /key/);
});
