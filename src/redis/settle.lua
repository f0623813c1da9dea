-- sluice: settles and resets inside Redis (sluice/settle.h, Store::SettleAll and ResetAll), the
-- part of RedisStore's script after give_back.lua, whose arithmetic and state formats it
-- shares.
--
-- charge_past charges up to x units past the limit, as src/core/settle.cc's ChargePast: as
-- many as keep the key's usage at most N + D (B + D for the buckets, in the rate's lowest
-- terms N', P'), D the settle's max_debt. Each reads the key as its decide function does,
-- at t' = max(t, the state's last time) where the state keeps one (gcra and leaky_bucket at t),
-- writes it only when it charges something (recording t', as an admission does, with the TTL
-- an admission would give it), and returns what it charged. Every value stays below 2^53:
-- counts are at most N + D <= 2 x 10^15, and RedisStore refuses a settle whose (B + D) x P'
-- passes 2^52.

local function charge_past_fixed_window(key, l, now, x, debt)
  local t, count, last = now, 0, nil
  local s = redis.call('GET', key)
  if s then
    last, count = two(s)
    t = math.max(now, last)
  end
  local start, finish = window_of(l, t)
  if last and last < start then
    count = 0
  end
  local c = math.min(x, math.max(0, l.n + debt - count))
  if c > 0 then
    redis.call('SET', key, int(t) .. ' ' .. int(count + c), 'PX', ttl_ms(finish - t, t, now))
  end
  return c
end

-- floor(((N+D)P - prev(P-r) - cur P) / P) = N + D - cur - ceil(prev(P-r)/P), the last term
-- formed as decide's sliding_window forms it, without the product.
local function charge_past_sliding_window(key, l, now, x, debt)
  local p = l.p
  local t, r, cur, prev = sliding_window_at(key, p, now)
  local prev_left = prev - mul_div(prev, r, p, prev + 1)
  local c = math.min(x, math.max(0, l.n + debt - cur - prev_left))
  if c > 0 then
    redis.call('SET', key, int(t) .. ' ' .. int(cur + c) .. ' ' .. int(prev), 'PX',
      ttl_ms(2 * p - r, t, now))
  end
  return c
end

local function charge_past_counts(key, ceiling, width, span, now, x)
  local c = read_counts(key, width, span, now)
  local charged = math.min(x, math.max(0, ceiling - c.used))
  if charged > 0 then
    add_counts(key, c, floor_div(c.t, width), charged, c.used + charged, width, span, now)
  end
  return charged
end

-- The level may go below 0 (down to -D x P'): a debt that refills at N' per us like any deficit.
local function charge_past_token_bucket(key, l, now, x, debt)
  local rn, rp = l.rn, l.rp
  local level, t = bucket_level(key, l, now)
  local c = math.min(x, math.max(0, floor_div(level + debt * rp, rp)))
  if c > 0 then
    local after = level - c * rp
    redis.call('SET', key, int(after) .. ' ' .. int(t), 'PX',
      ttl_ms(ceil_div(l.b * rp - after, rn), t, now))
  end
  return c
end

-- With base = max(TAT, t N'), base - t N' = behind N' + ahead (read_tat): TAT may end up to
-- (B + D) P' ahead of t N'. behind N' may pass 2^53 (time gone back), but then the room is
-- negative whatever its rounding, and nothing is charged.
local function charge_past_tat(key, l, now, x, debt)
  local rn, rp = l.rn, l.rp
  local behind, ahead = read_tat(key, rn, now)
  local backlog = behind * rn + ahead
  local c = math.min(x, math.max(0, floor_div((l.b + debt) * rp - backlog, rp)))
  if c > 0 then
    backlog = backlog + c * rp -- exact: at most (B + D) P'
    redis.call('SET', key, int(now) .. ' ' .. int(backlog), 'PX',
      ttl_ms(ceil_div(backlog, rn), now, now))
  end
  return c
end

local function charge_past(key, l, now, x, debt)
  if x <= 0 then
    return 0
  end
  local a = l.algorithm
  if a == 0 then
    return charge_past_fixed_window(key, l, now, x, debt)
  elseif a == 1 then
    return charge_past_counts(key, l.n + debt, 1, l.p, now, x)
  elseif a == 2 then
    return charge_past_sliding_window(key, l, now, x, debt)
  elseif a == 3 then
    return charge_past_counts(key, l.n + debt, l.p / l.k, l.k, now, x)
  elseif a == 4 then
    return charge_past_token_bucket(key, l, now, x, debt)
  elseif a == 5 or a == 6 then
    return charge_past_tat(key, l, now, x, debt)
  end
  error('unknown algorithm code ' .. tostring(a))
end

-- What the C++ reads as AlreadyExists (src/redis/call.h, kOnceClaimed).
local ONCE_CLAIMED = 'ONCE sluice: receipt was settled already'

-- Mode 4: claims the settle's `once` key (when it has one) until once_until, on the clock the
-- request is decided at (Redis's TIME), plus the keys' margin; a claim held already fails the
-- request, having changed nothing. Then settles each limit (`l.settle`: the part of the
-- charge to give back, `g`, or the units to charge past the limit, `x`, with the debt bound
-- `debt`) and answers, per limit, a cost-0 query's five figures, then the units given back
-- and the units charged.
local function settle_request(keys, limits, now, once_key, once_until, out)
  for i = 1, #limits do
    check_time(now, limits[i]) -- before the claim: a request that fails must change nothing
  end
  if once_key then
    local px = math.max(1, ceil_div(once_until - now, 1000) + margin_ms)
    if not redis.call('SET', once_key, '1', 'NX', 'PX', px) then
      error({ err = ONCE_CLAIMED })
    end
  end
  for i = 1, #limits do
    local l, key = limits[i], keys[i]
    local given, charged = 0, 0
    if l.settle.g.units > 0 then
      given = give_back(key, l, now, l.settle.g)
    else
      charged = charge_past(key, l, now, l.settle.x, l.settle.debt)
    end
    local r = { decide(key, l, now, 0, false) }
    out[#out + 1] = r[1] and 1 or 0
    for j = 2, 5 do
      out[#out + 1] = r[j]
    end
    out[#out + 1] = given
    out[#out + 1] = charged
  end
end

-- Mode 5: forgets each limit's key, and its keys under the earlier figures it names
-- (Store::ResetAll). Answers nothing per limit.
local function reset_request(keys, limits)
  for i = 1, #keys do
    redis.call('DEL', keys[i], limits[i].mark)
    for _, f in ipairs(limits[i].earlier or {}) do
      redis.call('DEL', f.key, f.mark) -- a change back to those figures must not find it
    end
  end
end
