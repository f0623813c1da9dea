-- wrk script for bench/http/bytes_per_key.sh: fills sluiced's memory store with N distinct
-- ad-hoc gcra keys, each sent exactly once, or warms sluiced up without adding keys.
--
--   wrk -t2 -c64 -d1h -s bench/http/fill.lua http://127.0.0.1:PORT -- fill N DONE_DIR 2
--   wrk -t2 -c64 -d1s -s bench/http/fill.lua http://127.0.0.1:PORT -- warm
--
-- fill: the keys are "client-" followed by the key's number 0..N-1, zero-padded to 9 digits
--   (16 characters; longer past 10^9, 24 at most). Thread i of T (numbered by setup(), in the
--   order wrk creates them) owns the numbers [floor(N*i/T), floor(N*(i+1)/T)) and sends each
--   of them once, as {"key": ..., "algorithm": "gcra", "limit": 10, "period": "1h",
--   "cost": 1}: a fresh key is always admitted and then holds state for an hour. Once a
--   thread has handed out its last key, its connections send GET /healthz instead (no store
--   state), and when the answers to all of its keys are in, the thread writes
--   DONE_DIR/thread-I ("id first last sent ok other first_other_status") and stops
--   (wrk.thread:stop()). wrk's main thread only returns after -d or SIGINT, so the caller
--   waits for the T files and then sends wrk SIGINT (bytes_per_key.sh does).
-- warm: every request is a cost-0 check of "warmup-000000000" under the same limit: the full
--   request path (connections, parsing, the limit's table, a lookup), and no state is added.
--
-- The first request() call of every thread returns GET /healthz without using a key: wrk
-- calls request() once on thread 0 to check the request's syntax and throws the result away
-- (script_verify_request), so a key handed out there would never be sent. On the other
-- threads that first /healthz is sent, and is harmless.
--
-- A request is told apart from /healthz in response() by its body ("allowed" is in every
-- /v1/check answer). A check answered by anything but 200 is counted as "other".

local next_id = 0

function setup(thread)
   thread:set("id", next_id)
   next_id = next_id + 1
end

local headers = {["Content-Type"] = "application/json"}
local healthz = wrk.format("GET", "/healthz")
local mode, first_key, last_key, nxt, done_dir
local sent, ok, other, finished, first_call = 0, 0, 0, false, true
local first_other = nil

local function check(key, cost)
   return wrk.format("POST", "/v1/check", headers, string.format(
      '{"key":"%s","algorithm":"gcra","limit":10,"period":"1h","cost":%d}', key, cost))
end

local warm_request

function init(args)
   mode = args[1] or "warm"
   if mode == "fill" then
      local n = tonumber(args[2])
      local t = tonumber(args[4])
      done_dir = args[3]
      assert(n and done_dir and t, "fill.lua: fill needs -- fill N DONE_DIR THREADS")
      assert(id < t, "fill.lua: more wrk threads than THREADS")
      first_key = math.floor(n * id / t)
      last_key = math.floor(n * (id + 1) / t)  -- exclusive
      nxt = first_key
   elseif mode == "warm" then
      warm_request = check("warmup-000000000", 0)
   else
      error("fill.lua: mode fill or warm, not " .. tostring(mode))
   end
end

function request()
   if first_call then
      first_call = false
      return healthz
   end
   if mode == "warm" then
      return warm_request
   end
   if nxt < last_key then
      local key = string.format("client-%09d", nxt)
      nxt = nxt + 1
      sent = sent + 1
      return check(key, 1)
   end
   return healthz
end

local function finish()
   finished = true
   local f = assert(io.open(string.format("%s/thread-%d", done_dir, id), "w"))
   f:write(string.format("%d %d %d %d %d %d %s\n", id, first_key, last_key, sent, ok, other,
                         first_other or "-"))
   f:close()
   wrk.thread:stop()
end

function response(status, hdrs, body)
   if mode ~= "fill" or finished then
      return
   end
   if body:find('"allowed"', 1, true) then
      if status == 200 then
         ok = ok + 1
      else
         other = other + 1
         if not first_other then first_other = tostring(status) end
      end
   end
   if ok + other >= last_key - first_key then
      finish()
   end
end
