'use strict';
// sluice: the client of sluiced, the sluice rate limit server, an Express middleware, and a
// fetch that paces calls to a partner (docs/node.md). No dependency beyond Node's own fetch.

const { Client } = require('./lib/client');
const { middleware } = require('./lib/middleware');
const { pacedFetch } = require('./lib/partner');
const { SluiceError, BadRequest, Forbidden, RateLimited } = require('./lib/errors');

module.exports = { Client, middleware, pacedFetch, SluiceError, BadRequest, Forbidden, RateLimited };
