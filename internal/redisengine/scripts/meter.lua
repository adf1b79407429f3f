-- meter.lua: token bucket, GCRA and leaky bucket as a queue (limit.meter),
-- and the token bucket with warm-up (limit.warmingBucket).
-- State: t = last time seen (µs), x = debt (µs), y = warm-up stored deficit.

local function meter(p, s, now, cost)
  now = effective_now(s.t, now)
  local debt = s.x - (now - s.t)
  if debt < 0 then debt = 0 end
  local bound = p.bound
  local new_debt = debt + cost * p.interval
  local r = result(p.shown)
  if new_debt > bound then
    r.remaining = floor_nonneg((bound - debt) * p.per_us)
    r.reset = micros(debt)
    r.retry = micros(new_debt - bound)
    return nil, r
  end
  r.allowed = true
  r.remaining = floor_nonneg((bound - new_debt) * p.per_us)
  r.reset = micros(new_debt)
  if p.queue then r.delay = micros(debt) end
  return {t = now, x = new_debt, y = 0}, r
end

-- limit.warmUp.permitsToTime
local function permits_to_time(w, permits)
  return w.stable + permits * w.slope
end

-- limit.warmUp.wait
local function warm_wait(w, stored, n)
  local from_stored = math.min(n, stored)
  local fresh = n - from_stored
  local us = 0
  local above = stored - w.threshold
  if above > 0 then
    local above_take = math.min(above, from_stored)
    local length = permits_to_time(w, above) + permits_to_time(w, above - above_take)
    us = above_take * length / 2.0
    from_stored = from_stored - above_take
  end
  return us + w.stable * from_stored + w.stable * fresh
end

local function warming_bucket(p, s, now, cost)
  local w = p.warm
  now = effective_now(s.t, now)
  local debt = s.x - (now - s.t)
  local stored = w.max - s.y
  if debt < 0 then
    stored = stored + (-debt) / w.cool_down
    if stored * SLACK >= w.max then stored = w.max end
    debt = 0
  end
  local bound = p.bound
  local new_debt = debt + warm_wait(w, stored, cost)
  local r = result(p.shown)
  local ttl = debt
  local ns = nil
  if new_debt <= bound then
    r.allowed = true
    ttl = new_debt
    stored = stored - math.min(cost, stored)
    ns = {t = now, x = new_debt, y = w.max - stored}
  else
    r.retry = micros(new_debt - bound)
  end
  local next = w.stable
  local above = stored - w.threshold
  if above > 0 then next = permits_to_time(w, above) end
  r.remaining = math.min(floor_nonneg((bound - ttl) / next), p.shown)
  r.reset = micros(ttl + (w.max - stored) * w.cool_down)
  return ns, r
end
