-- window.lua: fixed window (limit.fixedWindow, on the epoch or the
-- calendar), the weighted sliding window
-- (limit.slidingWindow) and sub-buckets (limit.slidingBuckets).
-- State: t = last time seen; x, y = counts; ext = the sub-bucket ring.

local function window_start(t, w) return t - t % w end

-- Calendar windows (limit.CalendarWindow), UTC: w is -1 for weeks from
-- Monday, -2 for months, -3 for years. The arithmetic is window1.lua's
-- (Howard Hinnant's civil_from_days), in whole days, exact in doubles.
local function calendar_window(t, w)
  local day = 86400000000
  local z = math.floor(t / day)
  if w == -1 then
    local monday = z - (z + 3) % 7 -- day 0, 1970-01-01, was a Thursday
    return monday * day, (monday + 7) * day
  end
  local zz = z + 719468
  local era = math.floor(zz / 146097)
  local doe = zz - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100)) -- from March 1st
  local mp = math.floor((5 * doy + 2) / 153) -- the month from March, 0 ... 11
  local y = yoe + era * 400
  if mp >= 10 then y = y + 1 end -- January and February
  local leap = 0
  if (y % 4 == 0 and y % 100 ~= 0) or y % 400 == 0 then leap = 1 end
  if w == -2 then
    local len = 31
    if mp == 11 then len = 28 + leap elseif mp == 1 or mp == 3 or mp == 6 or mp == 8 then len = 30 end
    local first = z - (doy - math.floor((153 * mp + 2) / 5))
    return first * day, (first + len) * day
  end
  local jan1 = z - (doy + 59 + leap)
  if mp >= 10 then jan1 = z - (doy - 306) end
  return jan1 * day, (jan1 + 365 + leap) * day
end

-- window_of returns the start and the end of the window w holding t.
local function window_of(t, w)
  if w < 0 then return calendar_window(t, w) end
  local ws = t - t % w
  return ws, ws + w
end

local function fixed_window(p, s, now, cost)
  now = effective_now(s.t, now)
  local ws, we = window_of(now, p.window)
  local count = 0
  if s.t >= ws then count = s.x end
  local r = result(p.shown)
  local finish = we - now
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
