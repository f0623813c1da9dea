-- wrk script: POST /v1/check, keys spread over many users (bench/http/run.sh sends it to sluiced
-- and, for the same work in wrk, to nginx).
--
--   wrk -t2 -c64 -d10s --latency -s bench/http/check.lua http://127.0.0.1:PORT
--
-- Environment:
--   SLUICE_BENCH_MODE   adhoc (default): {"key": "user:N", "algorithm": "gcra", "limit": ...}
--                       rules: {"domain": "bench", "descriptors": [{"entries": [{"key": "user",
--                       "value": "N"}]}]} (sluiced needs a rules file with that domain;
--                       bench/http/run.sh writes one)
--   SLUICE_BENCH_USERS  how many users the keys cycle through (default 10000; 1: a hot key)
--   SLUICE_BENCH_ALGORITHM  the ad-hoc limit's algorithm (default gcra; fixed_window: a counter)
--   SLUICE_BENCH_LIMIT  the ad-hoc gcra limit per user per second (default 100000), high
--                       enough that every request is admitted: wrk counts any 429 under
--                       "Non-2xx or 3xx responses".
--
-- done() prints the tail beyond wrk's --latency (which stops at p99) on a line of its own,
-- "tail: p99.5 X p99.9 Y max Z" in ms, for run.sh's summary.
--
-- The requests are formatted once per thread in init() and then cycled through with a counter,
-- so that wrk's own Lua work per request stays small. Each thread starts at a different user.

local mode = os.getenv("SLUICE_BENCH_MODE") or "adhoc"
local users = tonumber(os.getenv("SLUICE_BENCH_USERS") or "10000")
local limit = tonumber(os.getenv("SLUICE_BENCH_LIMIT") or "100000")
local algorithm = os.getenv("SLUICE_BENCH_ALGORITHM") or "gcra"

local threads = {}
local next_id = 0

function setup(thread)
   thread:set("id", next_id)
   next_id = next_id + 1
   table.insert(threads, thread)
end

local requests = {}
local counter = 0

function init(args)
   local headers = {["Content-Type"] = "application/json"}
   for u = 0, users - 1 do
      local body
      if mode == "rules" then
         body = string.format(
            '{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"%d"}]}]}', u)
      else
         body = string.format(
            '{"key":"user:%d","algorithm":"%s","limit":%d,"period":"1s"}', u, algorithm, limit)
      end
      requests[u + 1] = wrk.format("POST", "/v1/check", headers, body)
   end
   -- Threads start apart so that they do not walk the same users in step.
   counter = (id or 0) * math.floor(users / 2)
end

function request()
   counter = counter + 1
   return requests[(counter % users) + 1]
end

function done(summary, latency, requests)
   io.write(string.format("tail: p99.5 %.3f p99.9 %.3f max %.3f\n", latency:percentile(99.5) / 1000,
                          latency:percentile(99.9) / 1000, latency.max / 1000))
end
