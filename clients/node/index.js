'use strict';
// sluice: the client of sluiced, the sluice rate limit server, and an Express middleware
// (docs/node.md). No dependency beyond Node's own fetch.

const { Client } = require('./lib/client');
const { middleware } = require('./lib/middleware');
const { SluiceError, BadRequest, Forbidden, RateLimited } = require('./lib/errors');

module.exports = { Client, middleware, SluiceError, BadRequest, Forbidden, RateLimited };
