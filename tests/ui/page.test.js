'use strict';
// The operator's page (sluiced --ui) in a real browser: Debian's chromium, headless, driven by
// playwright-core (npm) with the system browser's path, against a sluiced of the test's own
// under load from this process. What it asserts holds at any speed of the machine: the charts
// change from one second to the next (the window slides), the flooding key leads the top
// table, the form's explanation is /v1/check's, nothing is logged as an error, and without
// the token nothing is served. The screenshots are kept (UI_ARTIFACTS) and their paths printed.
//
//   SLUICED=build/bin/sluiced [CHROMIUM=/usr/bin/chromium] [UI_ARTIFACTS=dir] node --test tests/ui/page.test.js

const { test, before, after } = require('node:test');
const assert = require('node:assert');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { chromium } = require('playwright-core');
const { startSluiced } = require('../clients/node/sluiced.js');

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = process.env.UI_ARTIFACTS || fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-ui-'));
const TOKEN = 'page-test-' + crypto.randomBytes(12).toString('hex');
// Generous: a loaded 2-core machine runs sluiced, chromium and the load side by side.
const WAIT = 90000;

const RULES = `
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: path
    value: /search
    rate_limit: {unit: minute, requests_per_unit: 100}
`;

let sluiced;
let tokenDir;
let browser;
let loading = true;
const load = [];

function check(entries, extra = {}) {
  return fetch(`${sluiced.url}/v1/check`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...(extra.headers || {}) },
    body: JSON.stringify({ domain: 'shop', descriptors: [{ entries }], ...(extra.body || {}) }),
  });
}

// Four clients, one request at a time each: mallory three times in four, the rest other users.
async function client(id) {
  let n = 0;
  while (loading) {
    const user = n % 4 === 3 ? `user-${id}-${n}` : 'mallory';
    n += 1;
    try {
      await (await check([{ key: 'user', value: user }])).arrayBuffer();
    } catch (e) {
      // A connection reset under load is the load's problem, not the page's: go on.
    }
  }
}

before(async () => {
  tokenDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-ui-token-'));
  fs.writeFileSync(path.join(tokenDir, 'token'), TOKEN + '\n', { mode: 0o600 });
  sluiced = await startSluiced(RULES, ['--ui', '--admin-token-file', path.join(tokenDir, 'token')]);
  for (let i = 0; i < 4; i++) load.push(client(i));
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true });
  fs.mkdirSync(ARTIFACTS, { recursive: true });
});

after(async () => {
  loading = false;
  await Promise.allSettled(load);
  if (browser) await browser.close();
  if (sluiced) await sluiced.stop();
  fs.rmSync(tokenDir, { recursive: true, force: true });
});

async function shoot(target, name, options = {}) {
  const file = path.join(ARTIFACTS, name);
  const png = await target.screenshot({ path: file, ...options });
  console.log(`screenshot: ${file}`);
  return png;
}

test('without the token the page and its data are refused', async () => {
  for (const url of ['/ui', '/ui/', '/ui/ui.js', '/ui/api/series', '/ui/api/top', '/ui/api/rules',
                     '/ui/api/health', '/ui/api/simulate?rule=shop.user&burst=5']) {
    for (const authorization of [undefined, 'Basic ' + Buffer.from('x:wrong-token-0123456789').toString('base64'),
                                 'Bearer wrong-token-0123456789']) {
      const response = await fetch(sluiced.url + url, { headers: authorization ? { authorization } : {}, redirect: 'manual' });
      assert.strictEqual(response.status, 401, `${url} with ${authorization}`);
      assert.match(response.headers.get('www-authenticate'), /^Basic realm="sluiced"/);
      assert.doesNotMatch(await response.text(), /<html|admitted/);
    }
  }
  const posted = await fetch(`${sluiced.url}/ui/api/check`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
  assert.strictEqual(posted.status, 401);
  // In the browser, too: no credentials, no page (the browser has none to answer the 401's
  // challenge with, and gives up the navigation).
  const context = await browser.newContext();
  const page = await context.newPage();
  const statuses = [];
  page.on('response', (r) => statuses.push(r.status()));
  await assert.rejects(page.goto(`${sluiced.url}/ui/`), /ERR_INVALID_AUTH_CREDENTIALS|401/);
  assert.deepStrictEqual(statuses, [401]);
  assert.strictEqual(await page.locator('#charts').count(), 0);
  await context.close();
});

test('with the token, a cross-site POST is refused', async () => {
  const basic = 'Basic ' + Buffer.from('operator:' + TOKEN).toString('base64');
  const body = JSON.stringify({ domain: 'shop', descriptors: [{ entries: [{ key: 'user', value: 'x' }] }], cost: 0, explain: true });
  const form = await fetch(`${sluiced.url}/ui/api/check`, { method: 'POST', headers: { authorization: basic, 'Content-Type': 'text/plain' }, body });
  assert.strictEqual(form.status, 403);
  const foreign = await fetch(`${sluiced.url}/ui/api/check`, { method: 'POST', headers: { authorization: basic, 'Content-Type': 'application/json', 'Sec-Fetch-Site': 'cross-site' }, body });
  assert.strictEqual(foreign.status, 403);
  const own = await fetch(`${sluiced.url}/ui/api/check`, { method: 'POST', headers: { authorization: basic, 'Content-Type': 'application/json', 'Sec-Fetch-Site': 'same-origin' }, body });
  assert.strictEqual(own.status, 200);
});

// The explanation as the page's raw JSON or /v1/check's, without the figures that move with
// the clock (a window's reset, a retry).
function steady(value) {
  if (Array.isArray(value)) return value.map(steady);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).filter(([k]) => !k.endsWith('_us')).map(([k, v]) => [k, steady(v)]));
  }
  return value;
}

test('the page under load: charts that move, the flooding key on top, explain, simulate', async () => {
  const context = await browser.newContext({
    httpCredentials: { username: 'operator', password: TOKEN, send: 'always' },
    viewport: { width: 1280, height: 1000 },
  });
  const page = await context.newPage();
  const errors = [];
  page.on('console', (message) => { if (message.type() === 'error') errors.push(message.text()); });
  page.on('pageerror', (error) => errors.push(String(error)));
  page.on('requestfailed', (request) => errors.push(`${request.url()}: ${request.failure().errorText}`));
  page.setDefaultTimeout(WAIT);

  const response = await page.goto(`${sluiced.url}/ui/`);
  assert.strictEqual(response.status(), 200);
  assert.match(response.headers()['content-security-policy'], /script-src 'self'/);

  // The charts: one for shop.user, with its axes' units; it moves from one second to the next.
  const chart = page.locator('figure.chart[data-name="shop.user"]');
  await chart.waitFor();
  await assert.doesNotReject(page.locator('figure.chart svg text', { hasText: 'requests/s' }).first().waitFor());
  await assert.doesNotReject(page.locator('figure.chart svg text', { hasText: 'minutes ago' }).first().waitFor());
  const rates = page.locator('#rates');
  const first = await shoot(rates, 'charts-1.png');
  const drawn = await chart.locator('path.admitted').getAttribute('d');
  await page.waitForFunction((d) => {
    const path = document.querySelector('figure.chart[data-name="shop.user"] path.admitted');
    return path && path.getAttribute('d') !== d;
  }, drawn);
  const second = await shoot(rates, 'charts-2.png');
  assert.notDeepStrictEqual(first, second, 'the charts did not move between the screenshots');
  assert.match(await chart.getAttribute('aria-label'), /^shop\.user: .* admitted\/s, .* denied\/s/);
  // After its first answer the page asks only for the seconds since, and lays them after what
  // it kept: what it holds is the server's whole window. Seconds before the page's last are
  // final on the server (its samples file under their own second or a later one).
  await page.waitForFunction(() => seriesKept.fetchedAt > 0 && seriesKept.series.has('shop.user'));
  const kept = await page.evaluate(() => {
    const s = seriesKept.series.get('shop.user');
    return { end: seriesKept.end, admitted: s.admitted, denied: s.denied };
  });
  const full = await (await fetch(`${sluiced.url}/ui/api/series`, { headers: { authorization: `Bearer ${TOKEN}` } })).json();
  const fresh = full.series.find((s) => s.name === 'shop.user');
  const lag = (full.end_ms - kept.end) / 1000;
  assert.ok(Number.isInteger(lag) && lag >= 0 && lag < 900, `page ${kept.end}, server ${full.end_ms}`);
  assert.strictEqual(kept.admitted.length, 900);
  assert.deepStrictEqual(kept.admitted.slice(lag, 899), fresh.admitted.slice(0, 899 - lag));
  assert.deepStrictEqual(kept.denied.slice(lag, 899), fresh.denied.slice(0, 899 - lag));

  // Top offenders by denials: mallory floods, and leads.
  await page.waitForFunction(() => {
    const cell = document.querySelector('#top-table tbody tr td.key');
    return cell && cell.textContent.includes('mallory');
  });
  assert.strictEqual(await page.locator('#top-table tbody tr').first().locator('td.key').textContent(), 'shop user=mallory');

  // The form's explanation is /v1/check's for the same request (a quiet key and no rule, so
  // that the load does not move it between the two).
  await page.fill('#explain-domain', 'shop');
  await page.fill('#explain-descriptors', 'user=alice\npath=/nowhere');
  await page.click('#explain-form button[type=submit]');
  await page.locator('#explain-answer .descriptor').nth(1).waitFor();
  const shown = JSON.parse(await page.locator('#explain-answer pre.raw').textContent());
  const asked = await fetch(`${sluiced.url}/v1/check`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', authorization: `Bearer ${TOKEN}` },
    body: JSON.stringify({ domain: 'shop', descriptors: [{ entries: [{ key: 'user', value: 'alice' }] }, { entries: [{ key: 'path', value: '/nowhere' }] }], cost: 0, explain: true }),
  });
  assert.strictEqual(asked.status, 200);
  assert.deepStrictEqual(steady(shown.explain), steady((await asked.json()).explain));
  assert.strictEqual(await page.locator('#explain-answer .descriptor .match').nth(0).textContent(), 'rule shop.user');
  assert.match(await page.locator('#explain-answer .descriptor .match').nth(1).textContent(), /^no rule/);

  // The simulate picture of shop.user against a burst, drawn as an image.
  await page.selectOption('#simulate-rule', 'shop.user');
  await page.fill('#simulate-burst', '30');
  await page.click('#simulate-form button[type=submit]');
  await page.waitForFunction(() => {
    const img = document.querySelector('#simulate-picture');
    return img && !img.hidden && img.complete && img.naturalWidth > 0;
  });
  assert.match(await page.locator('#simulate-picture').getAttribute('alt'), /shop\.user.*burst of 30/);
  await shoot(page, 'page.png', { fullPage: true });

  // By keyboard: every control has a label, and Tab reaches the charts and the form.
  assert.strictEqual(await page.evaluate(() => [...document.querySelectorAll('input, select, textarea')].filter((e) => e.labels.length === 0).length), 0);
  await page.evaluate(() => document.activeElement && document.activeElement.blur());
  const reached = new Set();
  for (let i = 0; i < 40; i++) {
    await page.keyboard.press('Tab');
    reached.add(await page.evaluate(() => document.activeElement.id || document.activeElement.className || document.activeElement.tagName));
  }
  assert.ok(reached.has('chart'), `Tab never reached a chart: ${[...reached]}`);
  assert.ok(reached.has('explain-descriptors'), `Tab never reached the form: ${[...reached]}`);

  assert.deepStrictEqual(errors, []);
  await context.close();
});
