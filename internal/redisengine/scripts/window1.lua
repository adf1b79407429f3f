-- window1.lua: the step of a flat script (flat.lua) for one rule of the
-- window-counter family: the fixed window (the algorithm of
-- envoyproxy/ratelimit, and of every rule `sluice import` brings over) and
-- the weighted sliding window. It answers exactly as decide.lua would, with
-- the same state encoding, so a key may be reached by either script. Every
-- step mirrors limit.fixedWindow and limit.slidingWindow (and window.lua),
-- operation for operation.
--
-- Group fields: p1 capacity, p2 shown, p3 limit, p4 window µs, p5 the
-- kind: 0 fixed, 1 sliding, 2, 3, 4 fixed on the calendar (weeks, months,
-- years: limit.CalendarWindow; p4 is then 0), p6 SLACK. State: x = the
-- count of the window holding last, y = the window's before it (sliding).
do
  local limit, w = p3, p4
  -- limit.Limiter.Step: a cost outside (0, capacity] never consumes; a
  -- non-zero one is refused for good, a zero one answers from the state.
  local c = cost
  if c <= 0 or c > p1 then c = 0 end

  local ws, we = 0, 0
  if p5 < 2 then ws = t - t % w; we = ws + w end
  local cur, prev = 0, 0
  if p5 == 1 then -- limit.slidingWindow
    local lw = last - last % w
    if lw == ws then cur, prev = x, y elseif lw == ws - w then prev = x end
    local weight = (w - (t - ws)) / w
    local est = prev * weight + cur
    local ceiling = limit * p6
    if est + c <= ceiling then
      allowed = true
      cur = cur + c
      est = est + c
    else
      local need = limit - c
      local at
      if cur <= need then
        at = w - (need - cur) * w / prev
      else
        at = w + math.max(w - need * w / cur, 0)
      end
      retry = math.ceil((ws - t) + at)
      if retry < 0 then retry = 0 end
    end
    remaining = ceiling - est
    if remaining <= 0 then remaining = 0 else remaining = math.floor(remaining) end
    if cur > 0 then reset = ws + 2 * w - t elseif prev > 0 then reset = ws + w - t end
  else -- limit.fixedWindow
    if p5 >= 2 then -- the calendar window holding t (as window.lua's calendar_window)
      local day = 86400000000
      local z = math.floor(t / day)
      if p5 == 2 then
        ws = (z - (z + 3) % 7) * day -- Monday (day 0 was a Thursday)
        we = ws + 7 * day
      else
        -- Day z's civil date (Howard Hinnant's civil_from_days): doy
        -- counts from March 1st, mp the month from March (0 ... 11).
        local zz = z + 719468
        local era = math.floor(zz / 146097)
        local doe = zz - era * 146097
        local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
        local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
        local mp = math.floor((5 * doy + 2) / 153)
        local y = yoe + era * 400
        if mp >= 10 then y = y + 1 end -- January and February
        local leap = 0
        if (y % 4 == 0 and y % 100 ~= 0) or y % 400 == 0 then leap = 1 end
        if p5 == 3 then
          local len = 31 -- the month's days
          if mp == 11 then len = 28 + leap elseif mp == 1 or mp == 3 or mp == 6 or mp == 8 then len = 30 end
          ws = (z - (doy - math.floor((153 * mp + 2) / 5))) * day
          we = ws + len * day
        else
          if mp >= 10 then ws = (z - (doy - 306)) * day else ws = (z - (doy + 59 + leap)) * day end
          we = ws + (365 + leap) * day
        end
      end
    end
    if last >= ws then cur = x end
    local finish = we - t
    if cur + c <= limit then
      allowed = true
      cur = cur + c
    else
      retry = finish
    end
    remaining = limit - cur
    if cur > 0 then reset = finish end
  end

  if c ~= cost then
    allowed, retry = false, -1
  elseif allowed and c > 0 then
    nx, ny = cur, prev
  end
end
