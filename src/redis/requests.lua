-- sluice: the entry of RedisStore's script, after decide.lua, give_back.lua, settle.lua and
-- convert.lua:
-- the requests of one call, each decided, given back, settled or reset in order.
--
-- KEYS: the Redis keys of every limit of every request, in order.
-- ARGV: margin_ms, request count, expires, then per request:
--   time ('' for Redis's TIME), cost, limit count, mode, then per limit:
--   algorithm code (the order of sluice::Algorithm), N, P, B, K, N', P' (the rate in lowest
--   terms, Limit::rate_units() and rate_period_us()).
--   mode 0 decides; mode 1 decides and also returns what each limit charged (a receipt, for a
--   give-back); mode 2 gives back (sluice/give_back.h): per limit, after the seven, the
--   charge's time, units and ahead, and the cost is unused; mode 3 is a dry run: each limit
--   answers as if another limit of the request had denied it, and nothing is recorded
--   (RedisStore asks it of the slots after the one that denied a request over several
--   cluster slots, src/redis/multislot.h).
--   mode 4 settles (settle.lua): after the head, once_until ('' for no `once`; else the
--   request's first key is its once key, before its limits' keys), then per limit, after the
--   seven: the charge's time, the units of it to give back and its ahead, the units to charge
--   past the limit, and max_debt; the cost is unused. mode 5 resets: each limit's key is
--   deleted. mode 6 reads or writes a record (a hash a fleet shares): after the head (its
--   limit count 0), a read's cursor ('0' first), n, then n fields and values to set (none: a
--   read); its hash is the request's key.
--   A calendar quota (a fixed_window on the calendar, Limit::calendar) has the code 8, N, P (its
--   longest window), then in place of B, K, N', P' the four bounds of CalendarBounds: the
--   windows before, at and after the server's time.
--   After a limit's seven (and before a mode's own), E, the count of the limit's earlier figures
--   (LimitedKey::before, sent in modes 0, 1, 3 and 5; E = 0 otherwise), then per earlier figure
--   one argument, its numbers joined by spaces: the limit's ceiling (its capacity plus the debt
--   a store keeps), 1 when the figure has the limit's shape (SameShape) or 0, its seven, and
--   for an earlier calendar quota of another shape the server's count of its window starts in
--   (its fourth bound, x] for x in [lo, hi), cnt, lo and hi (0 0 0 otherwise). In KEYS, after
--   the limit's key: in mode 5 its mark key, then each earlier figure's key and mark key
--   (convert.lua).
--   A request of leases (Store::LeaseAll) has the code 7 in place of an algorithm on each
--   key, and its op (0 query, 1 take, 2 release) in place of the cost; per key: 7, capacity,
--   ttl, the lease id, and three unused numbers.
-- `expires`: Redis's time (in microseconds, on its TIME) past which the caller has been answered
-- without Redis (the store's deadline): a call that reaches Redis later, as one sent before Redis
-- froze does when it wakes, decides nothing and answers the error "TIMEOUT sluice: ...".
-- '' for none.
-- Returns, per request: 1 followed by five numbers per limit (allowed 0/1, remaining,
-- reset_after, retry_after, delay, in microseconds; mode 2: what a cost-0 query answers after
-- the give-back), in mode 1 seven (the five, then the charge's time and ahead), in mode 4
-- seven (a cost-0 query's five after the settle, then the units given back and charged), in
-- mode 5 none, in mode 6 a count of fields and values, the next cursor, then them; or
-- 0 followed by
-- an error message (settle.lua's ONCE_CLAIMED for a settle whose `once` is claimed already).
--

-- One request, all or nothing, as MemoryStore::DecideAll: a dry run of every limit; then, if
-- all allow, each records the request; if not, a limit that would have allowed reports its
-- figures as a cost-0 query does. Leases alike (their op in place of the cost, QUERY being 0),
-- except that a release gives back the lease wherever it is held. With `receipts` (mode 1),
-- each limit's figures are followed by its receipt. With `dry` (mode 3), as if a limit had
-- denied.
local function decide_request(keys, limits, now, cost, out, receipts, dry)
  local first = #out
  local stride = receipts and 7 or 5
  local all_allowed = not dry
  local results = {}
  for i = 1, #limits do
    adopt(keys[i], limits[i], now)
  end
  for i = 1, #limits do
    local r = { decide(keys[i], limits[i], now, cost, false) }
    results[i] = r
    all_allowed = all_allowed and r[1]
  end
  for i = 1, #limits do
    local r = results[i]
    if all_allowed or (r[1] and limits[i].algorithm == LEASES and cost == RELEASE) then
      r = { decide(keys[i], limits[i], now, cost, true) }
    elseif r[1] then
      r = { decide(keys[i], limits[i], now, 0, false) }
    end
    out[first + stride * (i - 1) + 1] = r[1] and 1 or 0
    for j = 2, stride do
      out[first + stride * (i - 1) + j] = r[j]
    end
  end
end

-- Mode 2: gives back each limit's charge, then answers as a cost-0 query.
local function give_back_request(keys, limits, now, out)
  for i = 1, #limits do
    give_back(keys[i], limits[i], now, limits[i].charge)
    local r = { decide(keys[i], limits[i], now, 0, false) }
    out[#out + 1] = r[1] and 1 or 0
    for j = 2, 5 do
      out[#out + 1] = r[j]
    end
  end
end

-- Mode 6, a record a fleet shares (RedisStore::ReadRecord and WriteRecord): with no fields to
-- set, answers a part of the hash record.key from record.cursor on (HSCAN: a few hundred
-- fields a call, so that no call holds Redis long): its count of fields and values, the next
-- cursor ('0' at the end), then them; else sets them, and answers 0 and '0'.
local function record_request(record, out)
  local cursor, fields = '0', {}
  if #record.set == 0 then
    local part = redis.call('HSCAN', record.key, record.cursor, 'COUNT', 500)
    cursor, fields = part[1], part[2]
  end
  for i = 1, #record.set, 2 do
    redis.call('HSET', record.key, record.set[i], record.set[i + 1])
  end
  out[#out + 1] = #fields
  out[#out + 1] = cursor
  for i = 1, #fields do
    out[#out + 1] = fields[i]
  end
end

-- A limit's seven arguments from ARGV[arg] on.
local function read_limit(arg)
  local l = {
    algorithm = tonumber(ARGV[arg]),
    n = tonumber(ARGV[arg + 1]),
    p = tonumber(ARGV[arg + 2]),
    b = tonumber(ARGV[arg + 3]),
    k = tonumber(ARGV[arg + 4]),
    rn = tonumber(ARGV[arg + 5]),
    rp = tonumber(ARGV[arg + 6]),
    id = ARGV[arg + 3], -- Leases: the lease id in place of B.
  }
  if l.algorithm == CALENDAR then -- A calendar fixed_window: its bounds in place of B..P'.
    l.algorithm = 0
    l.bounds = { tonumber(ARGV[arg + 3]), tonumber(ARGV[arg + 4]), tonumber(ARGV[arg + 5]), tonumber(ARGV[arg + 6]) }
  end
  return l
end

local clock
local expires = tonumber(ARGV[3])
if expires then
  local time = redis.call('TIME')
  clock = tonumber(time[1]) * 1000000 + tonumber(time[2])
  if clock > expires then
    return redis.error_reply('TIMEOUT sluice: the call reached Redis ' ..
      string.format('%d', clock - expires) .. ' us after its deadline; nothing was decided')
  end
end
local out = {}
local arg, key = 4, 1
for _ = 1, tonumber(ARGV[2]) do
  local now = tonumber(ARGV[arg])
  if not now then
    if not clock then
      local time = redis.call('TIME')
      clock = tonumber(time[1]) * 1000000 + tonumber(time[2])
    end
    now = clock
  end
  local cost = tonumber(ARGV[arg + 1])
  local count = tonumber(ARGV[arg + 2])
  local mode = tonumber(ARGV[arg + 3])
  arg = arg + 4
  local keys, limits = {}, {}
  local once_key, once_until
  local record
  if mode == 6 then -- A record: its hash key, the cursor of a read, the fields to set.
    record = { key = KEYS[key], cursor = ARGV[arg], set = {} }
    for i = 1, 2 * tonumber(ARGV[arg + 1]) do
      record.set[i] = ARGV[arg + 1 + i]
    end
    arg = arg + 2 + #record.set
    key = key + 1
  end
  if mode == 4 then
    once_until = tonumber(ARGV[arg])
    arg = arg + 1
    if once_until then
      once_key = KEYS[key]
      key = key + 1
    end
  end
  for i = 1, count do
    keys[i] = KEYS[key]
    key = key + 1
    limits[i] = read_limit(arg)
    arg = arg + 7
    local earlier = tonumber(ARGV[arg])
    arg = arg + 1
    if mode == 5 then -- A reset: the limit's own mark key, which it forgets too.
      limits[i].mark = KEYS[key]
      key = key + 1
    end
    if earlier > 0 then
      limits[i].earlier = {}
      for j = 1, earlier do
        -- Read whole only when the key is carried (convert.lua's read_earlier).
        limits[i].earlier[j] = { key = KEYS[key], mark = KEYS[key + 1], spec = ARGV[arg] }
        key = key + 2
        arg = arg + 1
      end
    end
    if mode == 2 then
      limits[i].charge = {
        at = tonumber(ARGV[arg]), units = tonumber(ARGV[arg + 1]), ahead = tonumber(ARGV[arg + 2]),
      }
      arg = arg + 3
    elseif mode == 4 then
      limits[i].settle = {
        g = { at = tonumber(ARGV[arg]), units = tonumber(ARGV[arg + 1]), ahead = tonumber(ARGV[arg + 2]) },
        x = tonumber(ARGV[arg + 3]),
        debt = tonumber(ARGV[arg + 4]),
      }
      arg = arg + 5
    end
  end
  local mark = #out + 1
  out[mark] = 1
  -- A request that fails (a key of another type, a time out of range) fails alone; the batch
  -- goes on.
  local ok, err
  if mode == 2 then
    ok, err = pcall(give_back_request, keys, limits, now, out)
  elseif mode == 4 then
    ok, err = pcall(settle_request, keys, limits, now, once_key, once_until, out)
  elseif mode == 5 then
    ok, err = pcall(reset_request, keys, limits)
  elseif mode == 6 then
    ok, err = pcall(record_request, record, out)
  else
    ok, err = pcall(decide_request, keys, limits, now, cost, out, mode == 1, mode == 3)
  end
  if not ok then
    for i = #out, mark + 1, -1 do
      out[i] = nil
    end
    out[mark] = 0
    out[mark + 1] = type(err) == 'table' and (err.err or 'error') or tostring(err)
  end
end
return out
