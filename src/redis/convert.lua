-- sluice: a key's state carried across a change of its limit's figures inside Redis, as
-- src/core/convert.cc's ConvertState (docs/algorithms.md, "A change of limit"), the part of
-- RedisStore's script after settle.lua, whose readers and state formats it shares.
--
-- A request names, for a limit a reload changed, the Redis keys of that limit under its
-- earlier figures (l.earlier, newest first; requests.lua), each with a mark key (f.mark) and
-- its figures (f.spec, read by read_earlier). When the key under the figures now does not
-- exist, adopt finds the newest earlier key that does; unless that one is marked, its state is
-- converted into the key: same shape (same algorithm, period and buckets: f.same, from
-- SameShape on the server), the state as it is, its usage capped at the limit's capacity plus
-- its debt (l.ceiling, from the server); another shape, one lump v of units charged at t.
--
-- The earlier key is copied, not moved, and marked as carried: the servers of a fleet that
-- have not reloaded yet go on counting on it, rather than finding it gone and starting it
-- afresh, and the mark stops a second conversion of it (were the new key to expire first). A
-- key that exists is never converted into (adopt says why): after a change back, the key under
-- the figures in force again holds what it held before the change. Every value stays below
-- 2^53, as in decide.lua: the products that could pass it (behind x N', a count of windows
-- times N, used x P2'/P1') go through mul_div, capped where only their minimum with a smaller
-- figure matters.

-- min(a*b, cap), for 0 <= a, b and cap < 2^53, without forming a product above it.
local function capped_product(a, b, cap)
  if a == 0 or b == 0 then
    return 0
  end
  if a >= ceil_div(cap, b) then
    return cap
  end
  return a * b
end

-- min(ceil(a*b / d), cap), as mul_div.
local function mul_div_ceil(a, b, d, cap)
  local q, r = mul_div(a, b, d, cap)
  if r and r > 0 then
    q = q + 1
  end
  return math.min(q, cap)
end

-- min(max(0, floor((x + k*rn) / rp)), cap): a bucket's level x refilled for k us (k < 0: taken
-- back), in units. |x| < 2^52 and |k| < 2^53.
local function refilled_units(x, k, rn, rp, cap)
  local slack = cap + ceil_div(math.abs(x), rp) + 1 -- beyond it, the sum's sign is known
  local q, r = mul_div(math.abs(k), rn, rp, slack)
  if not r then
    return k >= 0 and cap or 0
  end
  local units
  if k >= 0 then
    units = q + floor_div(x + r, rp)
  else
    units = floor_div(x - r, rp) - q
  end
  return math.max(0, math.min(units, cap))
end

-- How many windows of the fixed_window f start in (t, e - 1]. A calendar quota counts its four
-- bounds, then beyond them the server's count f.cnt of starts in (bounds[4], x], which holds for
-- x in [f.lo, f.hi) (the server's own first window's end lies there).
local function window_starts(f, t, e)
  if not f.bounds then
    return math.max(0, floor_div(e - 1, f.p) - floor_div(t, f.p))
  end
  local b, x, n = f.bounds, e - 1, 0
  for i = 1, 4 do
    if t < b[i] and b[i] <= x then
      n = n + 1
    end
  end
  if x < b[4] then
    return n
  elseif f.lo <= x and x < f.hi then
    return n + f.cnt
  end
  error('CLOCK sluice: time ' .. int(t) .. ' us is too far from the server\'s to convert a key of a '
    .. 'calendar quota whose limit changed', 0)
end

-- What an earlier key holds at now, as ConvertState reads it: the time t it is read at, the
-- units used, and allow(e, cap), min(cap, a bound on what f would still admit in [t, e)).
-- Buckets: the used units are capped at `cap` too.
local function usage(key, f, now, cap)
  local a, n, p = f.algorithm, f.n, f.p
  if a == 0 then
    local last, count = two(redis.call('GET', key))
    local t = math.max(now, last)
    local start, finish = window_of(f, t)
    local used = (start <= last and last < finish) and count or 0
    return t, used, function(e, c)
      return math.min(c, math.max(0, n - used) + capped_product(n, window_starts(f, t, e), c))
    end
  elseif a == 2 then
    local t, r, cur, prev = sliding_window_at(key, p, now)
    local used = cur + prev - mul_div(prev, r, p, prev + 1)
    return t, used, function(e, c)
      return math.min(c, math.max(0, n - cur) + capped_product(n, window_starts(f, t, e), c))
    end
  elseif a == 1 or a == 3 then
    local width, span = 1, p
    if a == 3 then
      width, span = p / f.k, f.k
    end
    local counts = read_counts(key, width, span, now)
    local t = counts.t
    return t, counts.used, function(e, c)
      local buckets = floor_div(e - 1, width) - floor_div(t, width) + 1
      return capped_product(n, ceil_div(buckets, span), c)
    end
  end
  local rn, rp = f.rn, f.rp
  local capacity = f.b * rp
  if a == 4 then
    local level, t = bucket_level(key, f, now)
    return t, math.max(0, ceil_div(capacity - level, rp)), function(e, c)
      return refilled_units(level, e - t, rn, rp, c)
    end
  end
  -- gcra and leaky_bucket, read at now: TAT - now*N' = behind*N' + ahead.
  local behind, ahead = read_tat(key, rn, now)
  local q, r = mul_div(behind, rn, rp, cap)
  local used = cap
  if r then
    used = math.min(cap, q + ceil_div(r + ahead, rp))
  end
  return now, used, function(e, c)
    return refilled_units(capacity - ahead, e - now - behind, rn, rp, c)
  end
end

-- The end of l's first window from t, and what l admits in [t, that end) from nothing.
local function first_window(l, t)
  local a = l.algorithm
  if a == 0 then
    local _, finish = window_of(l, t)
    return finish, l.n
  elseif a == 2 then
    return (floor_div(t, l.p) + 1) * l.p, l.n
  elseif a == 1 then
    return t + l.p, l.n
  elseif a == 3 then
    local width = l.p / l.k
    return (floor_div(t, width) + l.k) * width, l.n
  end
  return t + l.p, l.b + l.n
end

-- Writes l's state for `key` after v units charged at t on a new key (0 < v <= l.ceiling), with
-- the TTL a decision that made it would give it.
local function seed(key, l, t, v, now)
  local a = l.algorithm
  if a == 0 then
    local _, finish = window_of(l, t)
    redis.call('SET', key, int(t) .. ' ' .. int(v), 'PX', ttl_ms(finish - t, t, now))
  elseif a == 2 then
    local r = t - floor_div(t, l.p) * l.p
    redis.call('SET', key, int(t) .. ' ' .. int(v) .. ' 0', 'PX', ttl_ms(2 * l.p - r, t, now))
  elseif a == 1 or a == 3 then
    local width, span = 1, l.p
    if a == 3 then
      width, span = l.p / l.k, l.k
    end
    local bucket = floor_div(t, width)
    redis.call('RPUSH', key, int(bucket) .. ' ' .. int(v), int(t) .. ' ' .. int(v))
    redis.call('PEXPIRE', key, ttl_ms((bucket + span) * width - t, t, now))
  elseif a == 4 then
    redis.call('SET', key, int((l.b - v) * l.rp) .. ' ' .. int(t), 'PX',
      ttl_ms(ceil_div(v * l.rp, l.rn), t, now))
  else
    redis.call('SET', key, int(t) .. ' ' .. int(v * l.rp), 'PX', ttl_ms(ceil_div(v * l.rp, l.rn), t, now))
  end
end

-- A list of counts (sliding_log, sliding_buckets) capped at `ceiling`, in place: the excess
-- taken off the oldest entries, which leave the window first (convert.cc's Capped).
local function cap_counts(key, ceiling)
  local last, total = two(redis.call('LINDEX', key, -1))
  local excess = total - ceiling
  if excess <= 0 then
    return
  end
  local i, chunk = 0, {}
  while true do
    if #chunk == 0 then
      chunk = redis.call('LRANGE', key, i, i + 31)
    end
    local index, count = two(table.remove(chunk, 1))
    if count > excess then
      redis.call('LTRIM', key, i, -1)
      redis.call('LSET', key, 0, int(index) .. ' ' .. int(count - excess))
      redis.call('LSET', key, -1, int(last) .. ' ' .. int(ceiling))
      return
    end
    excess = excess - count
    i = i + 1
  end
end

-- Copies the string or list `from` to `to`, with its TTL.
local function copy_key(from, to)
  local pttl = redis.call('PTTL', from)
  if redis.call('TYPE', from).ok == 'list' then
    local n = redis.call('LLEN', from)
    for i = 0, n - 1, 100 do
      redis.call('RPUSH', to, unpack(redis.call('LRANGE', from, i, i + 99)))
    end
  else
    redis.call('SET', to, redis.call('GET', from))
  end
  if pttl > 0 then
    redis.call('PEXPIRE', to, pttl)
  end
end

-- Same shape: the earlier key's state, its usage capped at l.ceiling, becomes key's.
local function carry(earlier_key, f, key, l, now)
  local a = l.algorithm
  if a <= 3 then
    copy_key(earlier_key, key) -- the TTL with it: the windows are the same
    if a == 1 or a == 3 then
      cap_counts(key, l.ceiling)
      return
    end
    -- fixed_window "last count", sliding_window "last cur prev": each count at most the ceiling.
    local figures, capped = {}, false
    for x in string.gmatch(redis.call('GET', key), '%S+') do
      local value = tonumber(x)
      if #figures > 0 and value > l.ceiling then
        value, capped = l.ceiling, true
      end
      figures[#figures + 1] = int(value)
    end
    if capped then
      local pttl = redis.call('PTTL', key)
      redis.call('SET', key, table.concat(figures, ' '))
      if pttl > 0 then
        redis.call('PEXPIRE', key, pttl)
      end
    end
    return
  end
  -- The buckets: used1 units of P1' become ceil(used1 x P2' / P1') of P2', at most the ceiling.
  local rp1, rp2 = f.rp, l.rp
  local most = l.ceiling * rp2
  local t, q, r
  if a == 4 then
    local level
    level, t = bucket_level(earlier_key, f, now)
    local used1 = f.b * rp1 - level
    q = floor_div(used1, rp1)
    r = used1 - q * rp1
  else
    local behind, ahead = read_tat(earlier_key, f.rn, now)
    local qa, ra = mul_div(behind, f.rn, rp1, l.ceiling + 1)
    t, q, r = now, l.ceiling, 0
    if ra then
      q = qa + floor_div(ra + ahead, rp1)
      r = ra + ahead - floor_div(ra + ahead, rp1) * rp1
    end
  end
  local used2 = most
  if q < l.ceiling then
    used2 = math.min(most, q * rp2 + mul_div_ceil(r, rp2, rp1, rp2 + 1))
  end
  if used2 <= 0 then
    return
  end
  local ttl = ttl_ms(ceil_div(used2, l.rn), t, now)
  if a == 4 then
    redis.call('SET', key, int(l.b * rp2 - used2) .. ' ' .. int(t), 'PX', ttl)
  else
    redis.call('SET', key, int(t) .. ' ' .. int(used2), 'PX', ttl)
  end
end

-- An earlier figure's numbers (requests.lua): l's ceiling, whether f has l's shape, f's seven
-- (a calendar quota's bounds in place of B..P'), and a calendar f's window count cnt, lo, hi.
local function read_earlier(f, l)
  local v = {}
  for x in string.gmatch(f.spec, '%S+') do
    v[#v + 1] = tonumber(x)
  end
  l.ceiling = v[1]
  f.same = v[2] == 1
  f.algorithm, f.n, f.p, f.b, f.k, f.rn, f.rp = v[3], v[4], v[5], v[6], v[7], v[8], v[9]
  if f.algorithm == CALENDAR then
    f.algorithm = 0
    f.bounds = { v[6], v[7], v[8], v[9] }
  end
  f.cnt, f.lo, f.hi = v[10], v[11], v[12]
end

-- ConvertState from f's earlier key to `key` of l, which does not exist: written there
-- (unless it converts to a new key's state), and the earlier key marked as carried. An earlier
-- state that has reset is deleted instead: it is a new key's under any figures.
local function convert(f, key, l, now)
  read_earlier(f, l)
  local r = { decide(f.key, f, now, 0, false) }
  if r[3] == 0 then
    redis.call('DEL', f.key)
    return
  end
  if f.same then
    carry(f.key, f, key, l, now)
  else
    local t, first_end, fresh
    local used, allow
    t, used, allow = usage(f.key, f, now, l.ceiling + 1)
    first_end, fresh = first_window(l, t)
    local v = math.min(l.ceiling, math.max(used, fresh - allow(first_end, fresh)))
    if v > 0 then
      seed(key, l, t, v, now)
    end
  end
  local pttl = redis.call('PTTL', f.key)
  redis.call('SET', f.mark, '1')
  if pttl > 0 then
    redis.call('PEXPIRE', f.mark, pttl)
  end
end

-- Before a request acts on `key` under l, when it does not exist: the newest of l's earlier
-- keys that exists, converted into it unless carried already. A key that exists is never
-- overwritten: it is counting for the servers that decide under l, and one that holds it under
-- other figures (and names these as earlier: a change back, or a rollback during a rollout)
-- counts on its own key likewise; converting either way would lose what the other admitted.
local function adopt(key, l, now)
  if not l.earlier or redis.call('EXISTS', key) == 1 then
    return
  end
  for _, f in ipairs(l.earlier) do
    if redis.call('EXISTS', f.key) == 1 then
      if redis.call('EXISTS', f.mark) == 0 then
        convert(f, key, l, now)
      end
      return
    end
  end
end
