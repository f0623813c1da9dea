'use strict';
// An Express app whose /api routes are limited by sluiced: 5 requests per 10 s per client
// address. /health is not limited.
//
//   sluiced --http 127.0.0.1:8080 &
//   npm ci && SLUICE_URL=http://127.0.0.1:8080 PORT=3000 npm start
//   for i in 1 2 3 4 5 6; do curl -si localhost:3000/api/hello | head -1; done

const express = require('express');
const sluice = require('sluice');

function createApp(client) {
  const app = express();
  app.get('/health', (req, res) => res.json({ ok: true }));
  app.use('/api', sluice.middleware({
    client,
    // A key must be an identity the app has verified: the address of the connection here, or
    // a user or API key once authentication has checked it. Never a header as the caller
    // sent it (an unchecked X-API-Key): a new value on each request would be a new quota each
    // time. Behind a proxy, set app.set('trust proxy', ...) so that req.ip is the client's.
    key: (req) => req.ip,
    algorithm: 'sliding_log', // exact: never a 6th within any 10 s
    limit: 5,
    period: '10s',
  }));
  app.get('/api/hello', (req, res) => res.json({ hello: req.ip }));
  return app;
}

if (require.main === module) {
  const client = new sluice.Client({ url: process.env.SLUICE_URL || 'http://127.0.0.1:8080' });
  const port = Number(process.env.PORT || 3000);
  createApp(client).listen(port, '127.0.0.1', () => console.log(`listening on http://127.0.0.1:${port}`));
}

module.exports = { createApp };
