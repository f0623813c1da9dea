'use strict';
// A sluiced of the test's own for the Node tests: started on a port it picks itself
// (--http 127.0.0.1:0, the port read from its log, as tests/integration/sluiced.py does),
// with `rules` when given and `flags` after the others, stopped with SIGTERM. SLUICED names
// the binary.

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

async function startSluiced(rules, flags = []) {
  const binary = process.env.SLUICED;
  if (!binary) throw new Error('set SLUICED to the sluiced binary');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-node-test-'));
  const args = ['--http', '127.0.0.1:0', '--grpc', '127.0.0.1:0', '--threads', '1'];
  if (rules) {
    fs.writeFileSync(path.join(dir, 'rules.yaml'), rules);
    args.push('--config', path.join(dir, 'rules.yaml'));
  }
  args.push(...flags);
  const proc = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    // 120 s: a loaded 2-core machine has been seen to take over 10 s to start one.
    const timer = setTimeout(() => reject(new Error(`sluiced did not start:\n${log}`)), 120000);
    const read = (chunk) => {
      log += chunk;
      const found = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(log);
      if (found) {
        clearTimeout(timer);
        resolve(Number(found[1]));
      }
    };
    proc.stdout.on('data', read);
    proc.stderr.on('data', read);
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`sluiced exited with ${code}:\n${log}`));
    });
  });
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    async stop() {
      if (proc.exitCode === null) {
        const exited = new Promise((resolve) => proc.once('exit', resolve));
        proc.kill('SIGTERM');
        await exited;
      }
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

module.exports = { startSluiced };
