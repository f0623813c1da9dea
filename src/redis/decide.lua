-- sluice: the decisions of docs/algorithms.md inside Redis, for RedisStore (src/redis/redis_store.cc).
--
-- One call decides a batch of requests, in order, each all or nothing over its limits, exactly
-- as MemoryStore::DecideAll does. The arithmetic is the C++ one (src/core/algorithms.cc) rewritten
-- for Lua numbers, which are doubles: every value this script computes is an integer below
-- 2^53, which doubles hold exactly. That holds because
--   - times are microseconds, and a time t is decided only while t + 2P < 2^53 (for a period
--     P of a day, until the year 2255);
--   - the bucket algorithms never store t*N: gcra and leaky_bucket keep their TAT relative to
--     the time it was written, and token_bucket its level, both at most B*P' (RedisStore's
--     CheckLimit refuses limits with B*P' above 2^52), or (B+D)*P' for a key a settle put in
--     debt (settle.lua; RedisStore refuses a settle whose max_debt D takes that above 2^52);
--   - sliding_window's products prev*r and (N-c)*P are divided exactly by mul_div below.
--
-- The script is this file, then give_back.lua, settle.lua, convert.lua, then requests.lua (its
-- entry: KEYS and ARGV), joined by CMake (src/redis/CMakeLists.txt).
--
-- State, one Redis key per limit and key, each with a TTL of its reset_after plus margin_ms:
--   fixed_window     string "last count"
--   sliding_window   string "last cur prev"
--   token_bucket     string "level last"
--   gcra, leaky      string "ref ahead": TAT = ref*N' + ahead
--   sliding_log,     list of "index count" entries, oldest first, then a header "last total"
--   sliding_buckets  (index: the timestamp, or the bucket floor(t / (P/K)))
--   leases           sorted set of lease ids, scored by expiry (held while now < expiry), with
--                    a TTL of its last expiry plus margin_ms

local EXACT = 9007199254740992 -- 2^53

-- floor(a / b) and ceil(a / b), exact for integers |a| < 2^53, 0 < b < 2^53: the quotient of
-- doubles can be one off, and one correction step puts it right.
local function floor_div(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then
    return q - 1
  elseif r >= b then
    return q + 1
  end
  return q
end

local function ceil_div(a, b)
  return -floor_div(-a, b)
end

-- min(floor(a*b / d), cap) for 0 <= a, 0 <= b, 0 < d <= 2^52 and cap < 2^52, without forming
-- a*b (which can pass 2^53): long multiplication over the bits of b, keeping q*d + r. Below the
-- cap, also the remainder r = a*b - q*d (convert.lua rounds up with it).
local function mul_div(a, b, d, cap)
  local q = floor_div(a, d)
  local ra = a - q * d -- a = q*d + ra
  q = q * b -- inexact only when far above cap
  if q >= cap then
    return cap
  end
  local bit = 1
  while bit * 2 <= b do
    bit = bit * 2
  end
  local rest, q2, r = b, 0, 0 -- ra * (bits of b so far) = q2*d + r, r < d
  while bit >= 1 do
    q2, r = q2 * 2, r * 2
    if r >= d then
      q2, r = q2 + 1, r - d
    end
    if rest >= bit then
      rest, r = rest - bit, r + ra
      if r >= d then
        q2, r = q2 + 1, r - d
      end
    end
    if q + q2 >= cap then
      return cap
    end
    bit = bit / 2
  end
  return q + q2, r
end

-- An integer as Redis stores it ("%.0f": no exponent; + 0 turns -0 into 0).
local function int(x)
  return string.format('%.0f', x + 0)
end

local function two(s)
  local a, b = string.match(s, '^(%S+) (%S+)$')
  return tonumber(a), tonumber(b)
end

-- A key's expiry, from Redis's now: its reset_after (which counts from the time the request
-- was decided at, t >= now when the key's time is ahead of the clock) plus the margin.
local margin_ms = tonumber(ARGV[1])
local function ttl_ms(reset_after, t, now)
  return ceil_div(reset_after + t - now, 1000) + margin_ms
end

-- Each decide function returns allowed, remaining, reset_after, retry_after, delay, and the
-- receipt of a charge: the time it is recorded at and, for the buckets, how far ahead of it the
-- state stands after it (sluice::Charge); it writes the new state when `apply` is true and the
-- request is allowed with cost > 0.

-- Which of a calendar quota's windows holds t: 1 to 3, of the four bounds the server sent
-- around its own time (l.bounds: the previous window's start, the window's start and end, the
-- next one's end; src/core/calendar.h's CalendarBounds), or nil outside them.
local function calendar_window(l, t)
  local b = l.bounds
  for i = 1, 3 do
    if b[i] <= t and t < b[i + 1] then
      return i
    end
  end
  return nil
end

-- The window [start, end) of a fixed_window that holds t: floor(t/P)*P and P on, or a
-- calendar quota's (an error when t is a window or more from the server's time: clocks that
-- far apart cannot agree on a window).
local function window_of(l, t)
  if not l.bounds then
    local start = floor_div(t, l.p) * l.p
    return start, start + l.p
  end
  local i = calendar_window(l, t)
  if not i then
    error('CLOCK sluice: time ' .. int(t) .. ' us is outside the calendar windows the server sent, '
      .. int(l.bounds[1]) .. ' to ' .. int(l.bounds[4]) .. ' us: its clock and the key\'s differ by a window', 0)
  end
  return l.bounds[i], l.bounds[i + 1]
end

-- Whether a and b lie in one fixed_window window (for a calendar quota, one of the three the
-- server sent).
local function same_window(l, a, b)
  if not l.bounds then
    return floor_div(a, l.p) == floor_div(b, l.p)
  end
  local i = calendar_window(l, a)
  return i ~= nil and i == calendar_window(l, b)
end

local function fixed_window(key, l, now, cost, apply)
  local n = l.n
  local t, count, last = now, 0, nil
  local s = redis.call('GET', key)
  if s then
    local c
    last, c = two(s)
    t = math.max(now, last)
    count = c
  end
  local start, finish = window_of(l, t)
  if last and last < start then
    count = 0
  end
  local to_end = finish - t
  local allowed = cost <= n - count
  if allowed and cost > 0 then
    count = count + cost
    if apply then
      redis.call('SET', key, int(t) .. ' ' .. int(count), 'PX', ttl_ms(to_end, t, now))
    end
  end
  local retry = 0
  if not allowed then
    retry = cost > n and -1 or to_end
  end
  -- count > N: in debt (a settle charged past the limit, settle.lua).
  return allowed, math.max(0, n - count), count > 0 and to_end or 0, retry, 0, t, 0
end

-- sliding_window's state at t (max of now and the key's last time), before anything is
-- charged: t, r = t - floor(t/P)*P, cur and prev, moved on by the windows passed since (the
-- next window makes cur the new prev; further clears both). Decisions and settles read it here.
local function sliding_window_at(key, p, now)
  local t, cur, prev = now, 0, 0
  local s = redis.call('GET', key)
  if s then
    local a, b, c = string.match(s, '^(%S+) (%S+) (%S+)$')
    local last = tonumber(a)
    t = math.max(now, last)
    local w, lw = floor_div(t, p), floor_div(last, p)
    if w == lw then
      cur, prev = tonumber(b), tonumber(c)
    elseif w == lw + 1 then
      prev = tonumber(b)
    end
  end
  return t, t - floor_div(t, p) * p, cur, prev
end

local function sliding_window(key, l, now, cost, apply)
  local n, p = l.n, l.p
  local t, r, cur, prev = sliding_window_at(key, p, now)
  -- The previous window weighs (P - r)/P; the C++ tests prev*(P-r) + (cur+c)*P <= N*P, which
  -- is prev - floor(prev*r/P) <= N - cur - c in numbers that stay small.
  local prev_left = prev - mul_div(prev, r, p, prev + 1) -- ceil(prev * (P - r) / P)
  local allowed = cost <= n and prev_left <= n - cur - cost
  if allowed and cost > 0 then
    cur = cur + cost
  end
  local reset = 0
  if cur > 0 then
    reset = 2 * p - r
  elseif prev > 0 then
    reset = p - r
  end
  if allowed and cost > 0 and apply then
    redis.call('SET', key, int(t) .. ' ' .. int(cur) .. ' ' .. int(prev), 'PX', ttl_ms(reset, t, now))
  end
  local remaining = math.max(0, n - cur - prev_left)
  if allowed then
    return true, remaining, reset, 0, 0, t, 0
  end
  if cost > n then
    return false, remaining, reset, -1, 0, t, 0
  end
  -- The first instant the condition holds, as the C++: the rest of this window, the next,
  -- then the one after.
  if prev > 0 and n - cur - cost >= 0 then
    local wait = math.max(1, p - r - mul_div(n - cur - cost, p, prev, p + 1))
    if wait <= p - r - 1 then
      return false, remaining, reset, wait, 0, t, 0
    end
  end
  if cur == 0 then
    return false, remaining, reset, p - r, 0, t, 0
  end
  local fits = mul_div(n - cost, p, cur, p + 1)
  if fits >= 1 then
    return false, remaining, reset, p - r + math.max(0, p - fits), 0, t, 0
  end
  return false, remaining, reset, 2 * p - r, 0, t, 0
end

-- sliding_log (width 1 us, span P) and sliding_buckets (width P/K, span K): counts in buckets
-- of `width` us; bucket i leaves the window at (i + span) * width.
-- read_counts reads such a key at `now`: its header, the time t the request is decided at, the
-- entries (read a chunk at a time: a request reads only the expired ones and the first live
-- one, and, when denied, as many as the retry walk needs), the first live one and the units
-- they hold.
local function read_counts(key, width, span, now)
  local c = { header = redis.call('LINDEX', key, -1), t = now, entries = 0, used = 0 }
  local total = 0
  if c.header then
    local last
    last, total = two(c.header)
    c.t = math.max(now, last)
    c.entries = redis.call('LLEN', key) - 1
  end
  local chunk, chunk_from = {}, 0
  function c.entry(i) -- 0-based
    local e = chunk[i - chunk_from + 1]
    if not e then
      chunk_from = i
      chunk = redis.call('LRANGE', key, i, math.min(i + 31, c.entries - 1))
      e = chunk[1]
    end
    return two(e)
  end
  local expired, first_live = 0, 0
  while first_live < c.entries do
    local index, count = c.entry(first_live)
    if (index + span) * width > c.t then
      break
    end
    expired = expired + count
    first_live = first_live + 1
  end
  c.first_live = first_live
  c.used = total - expired
  return c
end

-- Records `cost` units at c.t in bucket `bucket` of the key `read_counts` read as `c`, whose
-- live units are then `used`: the expired entries dropped, the units added to the newest entry
-- or a new one, the header rewritten.
local function add_counts(key, c, bucket, cost, used, width, span, now)
  if c.first_live > 0 then
    redis.call('LTRIM', key, c.first_live, -1)
  end
  local newest_entry = c.first_live < c.entries and redis.call('LINDEX', key, -2)
  local index, count
  if newest_entry then
    index, count = two(newest_entry)
  end
  local new_header = int(c.t) .. ' ' .. int(used)
  if index == bucket then
    redis.call('LSET', key, -2, int(bucket) .. ' ' .. int(count + cost))
    redis.call('LSET', key, -1, new_header)
  elseif c.header then
    redis.call('LSET', key, -1, int(bucket) .. ' ' .. int(cost))
    redis.call('RPUSH', key, new_header)
  else
    redis.call('RPUSH', key, int(bucket) .. ' ' .. int(cost), new_header)
  end
  redis.call('PEXPIRE', key, ttl_ms((bucket + span) * width - c.t, c.t, now))
end

local function windowed_counts(key, limit, width, span, now, cost, apply)
  local c = read_counts(key, width, span, now)
  local t, used = c.t, c.used
  local bucket = floor_div(t, width)
  local allowed = cost <= limit - used
  local newest
  if allowed and cost > 0 then
    used = used + cost
    newest = bucket
    if apply then
      add_counts(key, c, bucket, cost, used, width, span, now)
    end
  elseif used > 0 then
    newest = two(redis.call('LINDEX', key, -2))
  end
  local reset = used > 0 and (newest + span) * width - t or 0
  -- used > limit: in debt (a settle charged past the limit, settle.lua).
  local remaining = math.max(0, limit - used)
  if allowed then
    return true, remaining, reset, 0, 0, t, 0
  end
  if cost > limit then
    return false, remaining, reset, -1, 0, t, 0
  end
  local freed = 0
  for i = c.first_live, c.entries - 1 do
    local index, count = c.entry(i)
    freed = freed + count
    if used - freed <= limit - cost then
      return false, remaining, reset, (index + span) * width - t, 0, t, 0
    end
  end
  return false, remaining, reset, 0, 0, t, 0 -- unreachable: the walk frees all of `used`
end

-- A token_bucket key's level at `now`, refilled (below 0: in debt, settle.lua), and the time
-- t it is read at.
local function bucket_level(key, l, now)
  local capacity = l.b * l.rp
  local s = redis.call('GET', key)
  if not s then
    return capacity, now
  end
  local level, last = two(s)
  local t = math.max(now, last)
  local gap = capacity - level
  if gap > 0 then
    local dt = t - last
    level = dt >= ceil_div(gap, l.rn) and capacity or level + dt * l.rn
  end
  return level, t
end

local function token_bucket(key, l, now, cost, apply)
  local rn, rp = l.rn, l.rp
  local capacity = l.b * rp
  local level, t = bucket_level(key, l, now)
  local allowed = cost <= l.b and level >= cost * rp
  local after = allowed and level - cost * rp or level
  if allowed and cost > 0 and apply then
    redis.call('SET', key, int(after) .. ' ' .. int(t), 'PX',
      ttl_ms(ceil_div(capacity - after, rn), t, now))
  end
  local retry = 0
  if not allowed then
    retry = cost > l.b and -1 or ceil_div(cost * rp - level, rn)
  end
  return allowed, math.max(0, floor_div(after, rp)), ceil_div(capacity - after, rn), retry, 0, t,
    capacity - after
end

-- gcra and leaky_bucket. With base = max(TAT, t*N'), the C++ works with base - t*N' (the
-- backlog ahead of this request); here it is behind*N' + ahead, where behind > 0 only when the
-- time has gone back since the state was written. Then behind*N' can pass 2^53, so the figures
-- are formed as behind + ceil(ahead / N') and the allow test only compares with B*P'.
-- A gcra or leaky_bucket key at `now`: behind and ahead, as above.
local function read_tat(key, rn, now)
  local s = redis.call('GET', key)
  if not s then
    return 0, 0
  end
  local ref, a = two(s)
  if now < ref then
    return ref - now, a
  end
  local dt = now - ref
  if dt < ceil_div(a, rn) then
    return 0, a - dt * rn
  end
  return 0, 0
end

local function tat(key, l, now, cost, apply, shapes)
  local rn, rp, b = l.rn, l.rp, l.b
  local capacity = b * rp
  local behind, ahead = read_tat(key, rn, now)
  local allowed = cost <= b and behind * rn + ahead + cost * rp <= capacity
  if allowed then
    local delay = 0
    local backlog = behind * rn + ahead + cost * rp -- exact: at most B*P'
    if shapes then
      delay = ceil_div(behind * rn + ahead, rn)
    end
    if cost > 0 and apply then
      redis.call('SET', key, int(now) .. ' ' .. int(backlog), 'PX', ttl_ms(ceil_div(backlog, rn), now, now))
    end
    return true, floor_div(capacity - backlog, rp), ceil_div(backlog, rn), 0, delay, now, backlog
  end
  local remaining = 0
  if behind * rn + ahead <= capacity then
    remaining = floor_div(capacity - (behind * rn + ahead), rp)
  end
  local reset = behind + ceil_div(ahead, rn)
  local retry = cost > b and -1 or behind + ceil_div(ahead + cost * rp - capacity, rn)
  return false, remaining, reset, retry, 0, now, 0
end

-- The leases of one key, as DecideLease in src/memory/leases.cc: expired leases are dropped, then,
-- when `apply`, `l.id` is taken or given back. Returns the five figures.
local QUERY, TAKE, RELEASE = 0, 1, 2
local function lease(key, l, now, op, apply)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now))
  local mine = l.id ~= '' and redis.call('ZSCORE', key, l.id) ~= false
  local held = redis.call('ZCARD', key)
  local allowed, remaining, changed = false, 0, false
  if op == RELEASE then
    allowed = mine
    if allowed and apply then
      redis.call('ZREM', key, l.id)
      held, changed = held - 1, true
    end
  else
    allowed = mine or held < l.n
    if allowed and apply and op == TAKE then
      redis.call('ZADD', key, int(now + l.p), l.id)
      if not mine then
        held = held + 1
      end
      changed = true
    end
    remaining = math.max(0, l.n - held)
  end
  local reset_after, retry_after = 0, 0
  if held > 0 then
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    reset_after = tonumber(last[2]) - now
    if not allowed and op ~= RELEASE then
      local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
      retry_after = tonumber(first[2]) - now
    end
    if changed then
      redis.call('PEXPIRE', key, ttl_ms(reset_after, now, now))
    end
  end
  return allowed, remaining, reset_after, retry_after, 0, now, 0
end

-- Errors for a time the arithmetic above cannot hold exactly.
local function check_time(now, l)
  if now < 0 or now + 2 * l.p >= EXACT then
    error('time ' .. int(now) .. ' us is outside what the Redis store decides at for a period of '
      .. int(l.p) .. ' us')
  end
end

local LEASES = 7
local CALENDAR = 8 -- In ARGV only: a fixed_window with calendar bounds (requests.lua).
local function decide(key, l, now, cost, apply)
  check_time(now, l)
  local a = l.algorithm
  if a == 0 then
    return fixed_window(key, l, now, cost, apply)
  elseif a == 1 then
    return windowed_counts(key, l.n, 1, l.p, now, cost, apply)
  elseif a == 2 then
    return sliding_window(key, l, now, cost, apply)
  elseif a == 3 then
    return windowed_counts(key, l.n, l.p / l.k, l.k, now, cost, apply)
  elseif a == 4 then
    return token_bucket(key, l, now, cost, apply)
  elseif a == 5 then
    return tat(key, l, now, cost, apply, false)
  elseif a == 6 then
    return tat(key, l, now, cost, apply, true)
  elseif a == LEASES then
    return lease(key, l, now, cost, apply)
  end
  error('unknown algorithm code ' .. tostring(a))
end
