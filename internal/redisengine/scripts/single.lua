-- single.lua: the step of a flat script (flat.lua) for one rule of the
-- meter family (token bucket, GCRA, leaky bucket as a queue; no warm-up).
-- It answers exactly as decide.lua would, with the same state encoding, so
-- a key may be reached by either script. Every step mirrors limit.meter
-- (and meter.lua), operation for operation; micros(v) is written
-- v <= 0 and 0 or math.ceil(v), floor_nonneg(v) v <= 0 and 0 or
-- math.floor(v).
--
-- Group fields: p1 capacity, p2 shown, p3 interval, p4 per_us, p5 bound,
-- p6 queue (0/1). State: x = debt (µs), y = 0.
do
  local debt = x - (t - last)
  if debt < 0 then debt = 0 end
  -- limit.Limiter.Step: a cost outside (0, capacity] never consumes; a
  -- non-zero one is refused for good, a zero one answers from the state.
  local new_debt = debt + cost * p3
  local refused = cost ~= 0 and (cost < 0 or cost > p1)
  if refused or new_debt > p5 then
    remaining = (p5 - debt) * p4
    remaining = remaining <= 0 and 0 or math.floor(remaining)
    reset = debt <= 0 and 0 or math.ceil(debt)
    if refused then retry = -1 else retry = math.ceil(new_debt - p5) end
  else
    allowed = true
    remaining = (p5 - new_debt) * p4
    remaining = remaining <= 0 and 0 or math.floor(remaining)
    reset = new_debt <= 0 and 0 or math.ceil(new_debt)
    if p6 == 1 and debt > 0 then delay = math.ceil(debt) end
    if cost > 0 then nx, ny = new_debt, 0 end
  end
end
