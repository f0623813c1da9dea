-- sluice: give-backs inside Redis (sluice/give_back.h), the part of RedisStore's script
-- after decide.lua, whose arithmetic and state formats it shares.
-- Give-backs, as src/core/give_back.cc: `g` is the charge (at, units, ahead). Each changes the
-- key only when something comes back, and keeps its TTL (what is left expires no later), and
-- returns the units it gave back as src/core/settle.cc's Returned counts them: what the
-- counts lost; for the buckets, floor(what the level gained, or the TAT lost, / P').

-- How much of a bucket charge may come back at `t`: TAT1 - t*N', at most units*P'; <= 0 for
-- nothing. TAT1 - t*N' = ahead - (t - at)*N' is formed only when small, as in tat().
local function returnable(l, g, t)
  local most = g.units * l.rp
  if t >= g.at then
    local dt = t - g.at
    if dt >= ceil_div(g.ahead, l.rn) then
      return 0
    end
    return math.min(most, g.ahead - dt * l.rn)
  end
  if g.at - t >= ceil_div(most, l.rn) then
    return most
  end
  return math.min(most, g.ahead + (g.at - t) * l.rn)
end

local function give_back_window(key, l, g)
  local s = redis.call('GET', key)
  if not s then
    return 0
  end
  local a, b, c = string.match(s, '^(%S+) (%S+) ?(%S*)$')
  local last, cur, prev = tonumber(a), tonumber(b), tonumber(c)
  local w, lw = floor_div(g.at, l.p), floor_div(last, l.p)
  local taken
  if same_window(l, g.at, last) then
    taken = math.min(cur, g.units)
    cur = cur - taken
  elseif w + 1 == lw and prev then -- sliding_window: shifted into prev since
    taken = math.min(prev, g.units)
    prev = prev - taken
  else
    return 0
  end
  local value = int(last) .. ' ' .. int(cur)
  if prev then
    value = value .. ' ' .. int(prev)
  end
  redis.call('SET', key, value, 'KEEPTTL')
  return taken
end

-- sliding_log and sliding_buckets: the units come off the entry of the charge's bucket, looked
-- for from the newest back; an entry left empty is removed.
local function give_back_counts(key, width, g)
  local header = redis.call('LINDEX', key, -1)
  if not header then
    return 0
  end
  local bucket = floor_div(g.at, width)
  local entries = redis.call('LLEN', key) - 1
  for i = entries - 1, 0, -1 do
    local e = redis.call('LINDEX', key, i)
    local index, count = two(e)
    if index < bucket then
      return 0
    end
    if index == bucket then
      local taken = math.min(count, g.units)
      if taken == count then
        redis.call('LREM', key, 1, e)
      else
        redis.call('LSET', key, i, int(index) .. ' ' .. int(count - taken))
      end
      local last, total = two(header)
      redis.call('LSET', key, -1, int(last) .. ' ' .. int(total - taken))
      return taken
    end
  end
  return 0
end

local function give_back_token_bucket(key, l, now, g)
  local level, t = bucket_level(key, l, now) -- no key: a full bucket, nothing to give back
  local give = math.min(returnable(l, g, t), l.b * l.rp - level)
  if give <= 0 then
    return 0
  end
  redis.call('SET', key, int(level + give) .. ' ' .. int(t), 'KEEPTTL')
  return floor_div(give, l.rp)
end

local function give_back_tat(key, l, now, g)
  local s = redis.call('GET', key)
  if not s then
    return 0
  end
  local ref, a = two(s)
  local give = returnable(l, g, now)
  if give <= 0 then
    return 0
  end
  if now >= ref then
    local dt = now - ref
    if dt >= ceil_div(a, l.rn) then
      return 0 -- TAT is behind the clock: nothing of the charge is left in it
    end
    local ahead = a - dt * l.rn
    give = math.min(give, ahead)
    redis.call('SET', key, int(now) .. ' ' .. int(ahead - give), 'KEEPTTL')
  else
    -- TAT - t*N' is (ref - now)*N' + a here: the C++ takes at most that (a product that may
    -- pass 2^53, but then give, at most units*P', is the smaller one).
    give = math.min(give, (ref - now) * l.rn + a)
    if give <= 0 then
      return 0
    end
    redis.call('SET', key, int(ref) .. ' ' .. int(a - give), 'KEEPTTL')
  end
  return floor_div(give, l.rp)
end

local function give_back(key, l, now, g)
  if g.units <= 0 then
    return 0
  end
  local a = l.algorithm
  if a == 0 or a == 2 then
    return give_back_window(key, l, g)
  elseif a == 1 then
    return give_back_counts(key, 1, g)
  elseif a == 3 then
    return give_back_counts(key, l.p / l.k, g)
  elseif a == 4 then
    return give_back_token_bucket(key, l, now, g)
  elseif a == 5 or a == 6 then
    return give_back_tat(key, l, now, g)
  end
  return 0
end
