-- window.lua: fixed window (limit.fixedWindow), the weighted sliding window
-- (limit.slidingWindow) and sub-buckets (limit.slidingBuckets).
-- State: t = last time seen; x, y = counts; ext = the sub-bucket ring.

local function window_start(t, w) return t - t % w end

local function fixed_window(p, s, now, cost)
  now = effective_now(s.t, now)
  local ws = window_start(now, p.window)
  local count = 0
  if s.t >= ws then count = s.x end
  local r = result(p.shown)
  local finish = ws + p.window - now
  local ns = nil
  if count + cost <= p.limit then
    r.allowed = true
    count = count + cost
    ns = {t = now, x = count, y = 0}
  else
    r.retry = finish
  end
  r.remaining = p.limit - count
  if count > 0 then r.reset = finish end
  return ns, r
end

local function sliding_window(p, s, now, cost)
  now = effective_now(s.t, now)
  local w = p.window
  local ws = window_start(now, w)
  local cur, prev = 0, 0
  local last = window_start(s.t, w)
  if last == ws then cur, prev = s.x, s.y elseif last == ws - w then prev = s.x end
  local fw = w
  local weight = (w - (now - ws)) / fw
  local est = prev * weight + cur
  local limit = p.limit
  local r = result(p.shown)
  local ns = nil
  if est + cost <= limit * SLACK then
    r.allowed = true
    cur = cur + cost
    est = est + cost
    ns = {t = now, x = cur, y = prev}
  else
    local need = limit - cost
    local at
    if cur <= need then
      at = fw - (need - cur) * fw / prev
    else
      at = fw + math.max(fw - need * fw / cur, 0)
    end
    r.retry = micros((ws - now) + at)
  end
  r.remaining = floor_nonneg(limit * SLACK - est)
  if cur > 0 then r.reset = ws + 2 * w - now elseif prev > 0 then r.reset = ws + w - now end
  return ns, r
end

local function sliding_buckets(p, s, now, cost)
  now = effective_now(s.t, now)
  local n = p.buckets
  local g = p.gran
  local b, last = math.floor(now / g), math.floor(s.t / g)
  local ring = {}
  if #s.ext == n and b - last < n then
    for i = 1, n do ring[i] = s.ext[i] end
    for j = last + 1, b do ring[j % n + 1] = 0 end
  else
    for i = 1, n do ring[i] = 0 end
  end
  local sum = 0
  for i = 1, n do sum = sum + ring[i] end
  local r = result(p.shown)
  local ns = nil
  if sum + cost <= p.limit then
    r.allowed = true
    ring[b % n + 1] = ring[b % n + 1] + cost
    sum = sum + cost
    ns = {t = now, x = 0, y = 0, ext = ring}
  else
    local freed = 0
    for j = math.max(b - n + 1, 0), b do
      freed = freed + ring[j % n + 1]
      if sum - freed + cost <= p.limit then
        r.retry = (j + n) * g - now
        break
      end
    end
  end
  r.remaining = p.limit - sum
  local j = b
  while j > b - n and j >= 0 do
    if ring[j % n + 1] > 0 then
      r.reset = (j + n) * g - now
      break
    end
    j = j - 1
  end
  return ns, r
end
