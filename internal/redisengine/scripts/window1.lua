-- window1.lua: the step of a flat script (flat.lua) for one rule of the
-- window-counter family: the fixed window (the algorithm of
-- envoyproxy/ratelimit, and of every rule `sluice import` brings over) and
-- the weighted sliding window. It answers exactly as decide.lua would, with
-- the same state encoding, so a key may be reached by either script. Every
-- step mirrors limit.fixedWindow and limit.slidingWindow (and window.lua),
-- operation for operation.
--
-- Group fields: p1 capacity, p2 shown, p3 limit, p4 window µs, p5 sliding
-- (0/1), p6 SLACK. State: x = the count of the window holding last, y =
-- the window's before it (sliding).
do
  local limit, w = p3, p4
  -- limit.Limiter.Step: a cost outside (0, capacity] never consumes; a
  -- non-zero one is refused for good, a zero one answers from the state.
  local c = cost
  if c <= 0 or c > p1 then c = 0 end

  local ws = t - t % w
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
    if last >= ws then cur = x end
    local finish = ws + w - t
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
