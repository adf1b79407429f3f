-- window.lua: fixed window (limit.fixedWindow, on the epoch or the
-- calendar), the weighted sliding window
-- (limit.slidingWindow) and sub-buckets (limit.slidingBuckets).
-- State: t = last time seen; x, y = counts; ext = the sub-bucket ring.

local function window_start(t, w) return t - t % w end

-- window_of returns the start and the end of p's window holding t: of
-- its width, on the epoch, or for a calendar window (window -1) the one
-- of its edges E1 < E2 < E3 < E4 (limit.CalendarEdges, from the decider's
-- clock) holding t, which is a window on either side of the decider's
-- when the clocks straddle an edge.
local function window_of(t, p)
  local w = p.window
  if w < 0 then
    local e = p.edges
    if t < e[2] then return e[1], e[2] end
    if t < e[3] then return e[2], e[3] end
    return e[3], e[4]
  end
  local ws = t - t % w
  return ws, ws + w
end

local function fixed_window(p, s, now, cost)
  now = effective_now(s.t, now)
  local ws, we = window_of(now, p)
  local count = 0
  if s.t >= ws then count = s.x end
  -- spent: what other regions took of a global limit (limit.Args.Spent)
  local limit = p.limit - p.spent
  local r = result(p.shown)
  local finish = we - now
  local ns = nil
  if count + cost <= limit then
    r.allowed = true
    count = count + cost
    ns = {t = now, x = count, y = 0}
  else
    r.retry = finish
  end
  r.remaining = math.max(limit - count, 0)
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
  local limit = p.limit - p.spent
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
    if need < 0 or cur == 0 and prev == 0 then
      at = 2 * fw -- other regions' counts: until both windows have passed
    elseif cur <= need then
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
