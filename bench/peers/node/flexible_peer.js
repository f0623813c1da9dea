// The Node peer of bench/peers/table.py: rate-limiter-flexible's RateLimiterMemory (pinned in
// package.json; `npm ci` here first), measured the way bench/memory_store_benchmark.cc measures
// sluice, with points high enough that every call is admitted (a refusal ends the run with an
// error: the figures would mean nothing). consume() returns a promise and reads Date.now() on
// every call; each one is awaited before the next is made, as a request handler would, so a
// figure is decisions/s including the promise and its await, on Node's one thread.
//
//   node --expose-gc flexible_peer.js [--seconds 1] [--keys 1000000] MEASURE...
//
// Measures, each printed as "name value unit":
//   hot_key_clock  one key
//   keys_clock     --keys keys, each consumed once before timing, a uniform random key per call
//                  (indices drawn before timing)
//   bytes_per_key  heapUsed after gc() before and after consuming --keys keys of 16-17
//                  characters once each (the limiter's Map, records and expiry timers), divided
//                  by the keys; also the resident set's growth (rss_per_key)
// Each throughput measure runs once for a quarter of its time first, unmeasured (the JIT).
'use strict';

const { RateLimiterMemory } = require('rate-limiter-flexible');

const INDICES = 1 << 22;  // pre-drawn key indices, cycled

function newLimiter() {
  return new RateLimiterMemory({ points: 1e12, duration: 3600 });
}

// Awaits consume(keyOf(i)) until the time is up (the clock read once per 1024 calls).
async function run(name, seconds, limiter, keyOf) {
  let calls = 0;
  const start = process.hrtime.bigint();
  const deadline = start + BigInt(Math.round(seconds * 1e9));
  try {
    do {
      for (let j = 0; j < 1024; ++j) {
        await limiter.consume(keyOf(calls++));
      }
    } while (process.hrtime.bigint() < deadline);
  } catch (refusal) {
    console.error(`flexible_peer: ${name}: call ${calls} refused: ${JSON.stringify(refusal)}`);
    process.exit(1);
  }
  return calls / (Number(process.hrtime.bigint() - start) / 1e9);
}

async function measure(name, seconds, keys) {
  const limiter = newLimiter();
  if (name === 'hot_key_clock') {
    await run(name, seconds / 4, limiter, () => 'hot');
    return run(name, seconds, limiter, () => 'hot');
  }
  if (name === 'keys_clock') {
    const names = [];
    for (let n = 0; n < keys; ++n) {
      names.push(`user:${n}`);
      await limiter.consume(names[n]);
    }
    const idx = new Int32Array(INDICES);
    let x = 0x9E3779B97F4A7C15n;
    const mask = (1n << 64n) - 1n;
    for (let i = 0; i < INDICES; ++i) {
      x ^= (x << 13n) & mask;
      x ^= x >> 7n;
      x ^= (x << 17n) & mask;
      idx[i] = Number(x % BigInt(keys));
    }
    const keyOf = (i) => names[idx[i & (INDICES - 1)]];
    await run(name, seconds / 4, limiter, keyOf);
    return run(name, seconds, limiter, keyOf);
  }
  console.error(`flexible_peer: unknown measure ${name}`);
  process.exit(2);
}

async function bytesPerKey(keys) {
  if (typeof global.gc !== 'function') {
    console.error('flexible_peer: bytes_per_key needs node --expose-gc');
    process.exit(2);
  }
  global.gc();
  const before = process.memoryUsage();
  const limiter = newLimiter();
  for (let n = 0; n < keys; ++n) {
    await limiter.consume(`client-${String(n * 7919 + 13).padStart(9, '0')}`);
  }
  global.gc();
  const after = process.memoryUsage();
  console.log(`bytes_per_key ${((after.heapUsed - before.heapUsed) / keys).toFixed(1)} B`);
  console.log(`rss_per_key ${((after.rss - before.rss) / keys).toFixed(1)} B`);
}

async function main(args) {
  let seconds = 1;
  let keys = 1000000;
  while (args.length && args[0].startsWith('--')) {
    const [flag, value] = args.splice(0, 2);
    if (flag === '--seconds') seconds = Number(value);
    else if (flag === '--keys') keys = Number(value);
    else args = [];
  }
  if (!args.length || !(seconds > 0) || !(keys > 0 && Number.isInteger(keys))) {
    console.error('usage: node --expose-gc flexible_peer.js [--seconds S] [--keys N] MEASURE...');
    process.exit(2);
  }
  for (const name of args) {
    if (name === 'bytes_per_key') {
      await bytesPerKey(keys);
    } else {
      console.log(`${name} ${(await measure(name, seconds, keys)).toFixed(0)} decisions/s`);
    }
  }
}

main(process.argv.slice(2));
